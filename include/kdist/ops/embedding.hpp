#pragma once
//! \file ops/embedding.hpp
//! Local kernels of Keras' Embedding on one block of the table, as Megatron's
//! VocabParallelEmbedding computes them: the block holds vocabulary rows [row_offset, row_offset +
//! rows) and some of the columns; a token outside those rows looks up zeros (the other blocks along
//! the vocabulary axes hold its row, so the sum over them is the lookup) and scatters nothing.
//! - `embedding_lookup`: `y(..., k) = table(t - row_offset, k)` for the token `t` at `...`, else 0;
//! - `embedding_backward`: `dtable(t - row_offset, k) += dy(..., k)` for every token of the block
//!   (Kokkos::atomic_add: two positions may hold the same token);
//! - `count_invalid_tokens`: how many ids are not integers in [0, vocab), and where the first is.
//! Tokens are a View (n,) or (batch, seq) of float, double or an integer type; outputs have one
//! more dimension, the block's columns. Any memory space: plain Kokkos kernels in the Views'
//! execution space. The lookup and backward take valid ids (check them with count_invalid_tokens).

#include <Kokkos_Core.hpp>
#include <cstddef>
#include <cstdint>
#include <kdist/core/error.hpp>
#include <kdist/ops/detail/views.hpp>
#include <string>
#include <type_traits>

namespace kdist::ops {

namespace detail {

//! Checks (at compile time) that `V` is a rank-1 or rank-2 View of token ids (float, double or an
//! integer type).
template <class V>
constexpr bool check_tokens() {
  static_assert(Kokkos::is_view<V>::value, "kdist::ops::embedding: tokens must be a Kokkos::View");
  static_assert(static_cast<int>(V::rank) == 1 || static_cast<int>(V::rank) == 2,
                "kdist::ops::embedding: tokens must be a View (n,) or (batch, seq)");
  static_assert(std::is_arithmetic_v<scalar_t<V>>,
                "kdist::ops::embedding: token ids must be integers or floating-point values");
  return true;
}

//! Checks that `Y` has one dimension more than the tokens `X` (the features) and is LayoutRight.
template <class X, class Y>
constexpr bool check_embedded() {
  static_assert(Kokkos::is_view<Y>::value, "kdist::ops::embedding: expected a Kokkos::View");
  static_assert(static_cast<int>(Y::rank) == static_cast<int>(X::rank) + 1,
                "kdist::ops::embedding: the embedded View has the tokens' dimensions and one more "
                "(the features): (n, cols) for tokens (n,), (batch, seq, cols) for (batch, seq)");
  static_assert(std::is_same_v<typename Y::array_layout, Kokkos::LayoutRight>,
                "kdist::ops::embedding: expected Kokkos::LayoutRight Views");
  static_assert(std::is_same_v<scalar_t<Y>, float> || std::is_same_v<scalar_t<Y>, double>,
                "kdist::ops::embedding: expected embeddings of float or double");
  return true;
}

//! The number of token positions of a rank-1 or rank-2 View.
template <class X>
std::size_t token_count(const X& x) {
  if constexpr (static_cast<int>(X::rank) == 1) {
    return x.extent(0);
  } else {
    return x.extent(0) * x.extent(1);
  }
}

//! The token at flat position p (row-major over the View's extents).
template <class X>
KOKKOS_INLINE_FUNCTION auto token_at(const X& x, std::int64_t p, std::int64_t seq) {
  if constexpr (static_cast<int>(X::rank) == 1) {
    (void)seq;
    return x(p);
  } else {
    return x(p / seq, p % seq);
  }
}

template <class X>
std::int64_t seq_extent(const X& x) {
  if constexpr (static_cast<int>(X::rank) == 1) {
    return 1;
  } else {
    return static_cast<std::int64_t>(x.extent(1));
  }
}

//! Whether `v` is an integer in [0, vocab) (NaN is not).
template <class V>
KOKKOS_INLINE_FUNCTION bool valid_token(V v, std::int64_t vocab) {
  if constexpr (std::is_floating_point_v<V>) {
    if (!(v >= V(0) && v < static_cast<V>(vocab))) return false;
    return static_cast<V>(static_cast<std::int64_t>(v)) == v;
  } else {
    return static_cast<std::int64_t>(v) >= 0 && static_cast<std::int64_t>(v) < vocab;
  }
}

template <class X, class Y>
void require_embedded_shape(const char* op, const char* what, const X& x, const Y& y,
                            std::size_t cols) {
  bool ok = y.extent(static_cast<unsigned>(X::rank)) == cols;
  for (int r = 0; r < static_cast<int>(X::rank); ++r) {
    ok = ok && y.extent(static_cast<unsigned>(r)) == x.extent(static_cast<unsigned>(r));
  }
  if (!ok) {
    throw ValueError(std::string("kdist::ops::") + op + ": " + what + " is " + shape_string(y) +
                     ", expected the tokens' " + shape_string(x) + " and " + std::to_string(cols) +
                     " columns");
  }
}

}  // namespace detail

//! What count_invalid_tokens found: `count` ids that are not integers in [0, vocab); the first of
//! them (row-major) at flat position `first` (valid when count > 0) has the value `first_value`.
struct InvalidTokens {
  std::size_t count = 0;
  std::size_t first = 0;
  double first_value = 0;
};

//! Counts the ids of `tokens` that are not integers in [0, vocab) (one parallel_reduce; a second
//! finds the first when there is one, and one element is copied to the host).
template <class X>
InvalidTokens count_invalid_tokens(const X& tokens, std::size_t vocab) {
  static_assert(detail::check_tokens<X>());
  const std::size_t n = detail::token_count(tokens);
  const std::int64_t seq = detail::seq_extent(tokens);
  const auto v = static_cast<std::int64_t>(vocab);
  InvalidTokens out;
  if (n == 0) return out;
  std::int64_t bad = 0;
  Kokkos::parallel_reduce(
      "kdist::ops::count_invalid_tokens", detail::range<X>(n),
      KOKKOS_LAMBDA(const std::int64_t p, std::int64_t& acc) {
        if (!detail::valid_token(detail::token_at(tokens, p, seq), v)) acc += 1;
      },
      bad);
  out.count = static_cast<std::size_t>(bad);
  if (bad == 0) return out;
  std::int64_t first = static_cast<std::int64_t>(n);
  Kokkos::parallel_reduce(
      "kdist::ops::first_invalid_token", detail::range<X>(n),
      KOKKOS_LAMBDA(const std::int64_t p, std::int64_t& acc) {
        if (!detail::valid_token(detail::token_at(tokens, p, seq), v) && p < acc) acc = p;
      },
      Kokkos::Min<std::int64_t>(first));
  out.first = static_cast<std::size_t>(first);
  detail::scalar_t<X> value{};
  if constexpr (static_cast<int>(X::rank) == 1) {
    Kokkos::deep_copy(value, Kokkos::subview(tokens, first));
  } else {
    Kokkos::deep_copy(value, Kokkos::subview(tokens, first / seq, first % seq));
  }
  out.first_value = static_cast<double>(value);
  return out;
}

//! The first (row-major) flat position of `tokens` whose id is not an integer in [0, vocab), into
//! `first` (a rank-0 View of int64 in the tokens' memory; the largest int64 when none), without
//! waiting for it (a step that keeps its checks on the device: kdist::DeviceChecks).
template <class X, class FV>
void first_invalid_token_into(const X& tokens, std::size_t vocab, const FV& first) {
  static_assert(detail::check_tokens<X>() && Kokkos::is_view<FV>::value);
  const std::int64_t seq = detail::seq_extent(tokens);
  const auto v = static_cast<std::int64_t>(vocab);
  Kokkos::parallel_reduce(
      "kdist::ops::first_invalid_token", detail::range<X>(detail::token_count(tokens)),
      KOKKOS_LAMBDA(const std::int64_t p, std::int64_t& acc) {
        if (!detail::valid_token(detail::token_at(tokens, p, seq), v) && p < acc) acc = p;
      },
      Kokkos::Min<std::int64_t, typename FV::memory_space>(first));
}

//! The ids of `tokens` as a flat sequence (row-major) in a kernel: `(p)` the p-th as a double,
//! `extent(0)` how many (what kdist::DeviceChecks::record_first reads).
template <class X>
struct FlatTokens {
  X tokens;
  std::int64_t seq;
  std::size_t n;
  explicit FlatTokens(const X& t)
      : tokens(t), seq(detail::seq_extent(t)), n(detail::token_count(t)) {}
  KOKKOS_INLINE_FUNCTION double operator()(std::int64_t p) const {
    return static_cast<double>(detail::token_at(tokens, p, seq));
  }
  KOKKOS_INLINE_FUNCTION std::size_t extent(int) const { return n; }
};

namespace detail {
//! Element k of the embedding of token p (row-major over the tokens' extents) in a (tokens, cols)
//! or (batch, seq, cols) View. (A helper, not an `if constexpr` in the kernel: nvcc's extended
//! lambdas cannot first-capture a variable inside one.)
template <class V>
KOKKOS_INLINE_FUNCTION typename V::reference_type embedded_at(const V& v, std::int64_t p,
                                                              std::int64_t k, std::int64_t seq) {
  if constexpr (static_cast<int>(V::rank) == 2) {
    (void)seq;
    return v(p, k);
  } else {
    return v(p / seq, p % seq, k);
  }
}
}  // namespace detail

//! `y(..., k) = table(t - row_offset, k)` for the token `t` at position `...` when row_offset <= t
//! < row_offset + table.extent(0), else 0. `table` is the block (rows, cols) of the vocabulary
//! rows from row_offset; `y` has the tokens' extents and `cols`. Tokens must be valid ids.
//! Errors: kdist::ValueError when y's shape is not the tokens' and cols.
template <class X, class TV, class YV>
void embedding_lookup(const X& tokens, const TV& table, std::size_t row_offset, const YV& y) {
  static_assert(detail::check_tokens<X>() && detail::check_matrix<TV>() &&
                detail::check_embedded<X, YV>() && detail::check_same_scalar<TV, YV>());
  using T = detail::scalar_t<YV>;
  detail::require_embedded_shape("embedding_lookup", "y", tokens, y, table.extent(1));
  const std::int64_t seq = detail::seq_extent(tokens);
  const auto lo = static_cast<std::int64_t>(row_offset);
  const auto rows = static_cast<std::int64_t>(table.extent(0));
  Kokkos::parallel_for(
      "kdist::ops::embedding_lookup",
      detail::md_range<YV>(detail::token_count(tokens), table.extent(1)),
      KOKKOS_LAMBDA(const std::int64_t p, const std::int64_t k) {
        const std::int64_t r = static_cast<std::int64_t>(detail::token_at(tokens, p, seq)) - lo;
        detail::embedded_at(y, p, k, seq) = (r >= 0 && r < rows) ? table(r, k) : T(0);
      });
}

//! `dtable(t - row_offset, k) += dy(..., k)` for every token `t` of the block's rows (the others
//! are skipped); `dtable` is the block (rows, cols) of the vocabulary rows from row_offset and is
//! accumulated into (zero it first for the gradient of one step). Tokens must be valid ids.
//! Errors: kdist::ValueError when dy's shape is not the tokens' and dtable's cols.
template <class X, class DYV, class DTV>
void embedding_backward(const X& tokens, const DYV& dy, std::size_t row_offset, const DTV& dtable) {
  static_assert(detail::check_tokens<X>() && detail::check_matrix<DTV>() &&
                detail::check_embedded<X, DYV>() && detail::check_same_scalar<DTV, DYV>());
  detail::require_embedded_shape("embedding_backward", "dy", tokens, dy, dtable.extent(1));
  const std::int64_t seq = detail::seq_extent(tokens);
  const auto lo = static_cast<std::int64_t>(row_offset);
  const auto rows = static_cast<std::int64_t>(dtable.extent(0));
  Kokkos::parallel_for(
      "kdist::ops::embedding_backward",
      detail::md_range<DTV>(detail::token_count(tokens), dtable.extent(1)),
      KOKKOS_LAMBDA(const std::int64_t p, const std::int64_t k) {
        const std::int64_t r = static_cast<std::int64_t>(detail::token_at(tokens, p, seq)) - lo;
        if (r < 0 || r >= rows) return;
        Kokkos::atomic_add(&dtable(r, k), detail::embedded_at(dy, p, k, seq));
      });
}

}  // namespace kdist::ops
