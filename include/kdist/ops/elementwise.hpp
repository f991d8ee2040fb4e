#pragma once
//! \file ops/elementwise.hpp
//! Elementwise kernels: `add` on whole contiguous Views of any rank, seen as their elements in
//! memory order (a residual connection, Keras' `layers.Add`); `add_broadcast` of a (sequence,
//! features) table to every example of a (batch, sequence, features) View and its gradient
//! `sum_over_batch` (a position embedding). Where the Views live, the kernels run.

#include <Kokkos_Core.hpp>
#include <cstddef>
#include <cstdint>
#include <kdist/core/error.hpp>
#include <string>
#include <type_traits>

namespace kdist::ops {

namespace detail {
template <class V>
void require_packed(const char* op, const char* what, const V& v) {
  if (!v.span_is_contiguous()) {
    throw ValueError(std::string("kdist::ops::") + op + ": " + what +
                     " is not contiguous; elementwise kernels take whole (packed) Views");
  }
}
}  // namespace detail

//! `out = a + b`, elementwise; `out` may be `a` or `b` (in place). The three Views have the same
//! extents (and rank), any LayoutRight data of float or double in one memory space.
//! Errors: kdist::ValueError for extents that differ (naming both) or non-contiguous Views.
template <class AV, class BV, class OV>
void add(const AV& a, const BV& b, const OV& out) {
  static_assert(
      Kokkos::is_view<AV>::value && Kokkos::is_view<BV>::value && Kokkos::is_view<OV>::value,
      "kdist::ops::add: expected Kokkos::Views");
  static_assert(static_cast<int>(AV::rank) == static_cast<int>(BV::rank) &&
                    static_cast<int>(AV::rank) == static_cast<int>(OV::rank),
                "kdist::ops::add: the three Views must have one rank");
  static_assert(!std::is_const_v<typename OV::value_type>,
                "kdist::ops::add: the output View must not be const");
  for (std::size_t d = 0; d < static_cast<std::size_t>(AV::rank); ++d) {
    if (a.extent(d) != b.extent(d) || a.extent(d) != out.extent(d)) {
      throw ValueError("kdist::ops::add: extent " + std::to_string(d) +
                       " differs: " + std::to_string(a.extent(d)) + ", " +
                       std::to_string(b.extent(d)) + " and " + std::to_string(out.extent(d)) +
                       " (a residual connection adds tensors of one shape and layout)");
    }
  }
  detail::require_packed("add", "a", a);
  detail::require_packed("add", "b", b);
  detail::require_packed("add", "out", out);
  using Exec = typename OV::execution_space;
  const auto* pa = a.data();
  const auto* pb = b.data();
  auto* po = out.data();
  Kokkos::parallel_for(
      "kdist::ops::add",
      Kokkos::RangePolicy<Exec, Kokkos::IndexType<std::int64_t>>(
          0, static_cast<std::int64_t>(out.size())),
      KOKKOS_LAMBDA(const std::int64_t i) { po[i] = pa[i] + pb[i]; });
}

//! `out(b, s, f) = x(b, s, f) + p(s, f)` for every b; `out` may be `x`. Rank-3 and rank-2
//! LayoutRight Views in one memory space. Errors: kdist::ValueError when p is not (s, f) of x.
template <class XV, class PV, class OV>
void add_broadcast(const XV& x, const PV& p, const OV& out) {
  static_assert(static_cast<int>(XV::rank) == 3 && static_cast<int>(PV::rank) == 2 &&
                    static_cast<int>(OV::rank) == 3,
                "kdist::ops::add_broadcast: x and out are (batch, sequence, features), p is "
                "(sequence, features)");
  if (p.extent(0) != x.extent(1) || p.extent(1) != x.extent(2) || out.extent(0) != x.extent(0) ||
      out.extent(1) != x.extent(1) || out.extent(2) != x.extent(2)) {
    throw ValueError("kdist::ops::add_broadcast: the table is (" + std::to_string(p.extent(0)) +
                     ", " + std::to_string(p.extent(1)) + ") but the examples are (" +
                     std::to_string(x.extent(1)) + ", " + std::to_string(x.extent(2)) +
                     ") (or out's shape differs from x's)");
  }
  using Exec = typename OV::execution_space;
  Kokkos::parallel_for(
      "kdist::ops::add_broadcast",
      Kokkos::MDRangePolicy<Exec, Kokkos::Rank<3>, Kokkos::IndexType<std::int64_t>>(
          {0, 0, 0},
          {static_cast<std::int64_t>(x.extent(0)), static_cast<std::int64_t>(x.extent(1)),
           static_cast<std::int64_t>(x.extent(2))}),
      KOKKOS_LAMBDA(const std::int64_t b, const std::int64_t s, const std::int64_t f) {
        out(b, s, f) = x(b, s, f) + p(s, f);
      });
}

//! `dp(s, f) = sum_b dy(b, s, f)` (overwrites dp): the gradient of add_broadcast's table.
template <class DYV, class DPV>
void sum_over_batch(const DYV& dy, const DPV& dp) {
  static_assert(static_cast<int>(DYV::rank) == 3 && static_cast<int>(DPV::rank) == 2,
                "kdist::ops::sum_over_batch: dy is (batch, sequence, features), dp (sequence, "
                "features)");
  if (dp.extent(0) != dy.extent(1) || dp.extent(1) != dy.extent(2)) {
    throw ValueError("kdist::ops::sum_over_batch: dp is (" + std::to_string(dp.extent(0)) + ", " +
                     std::to_string(dp.extent(1)) + ") but dy's examples are (" +
                     std::to_string(dy.extent(1)) + ", " + std::to_string(dy.extent(2)) + ")");
  }
  using Exec = typename DPV::execution_space;
  const auto batch = static_cast<std::int64_t>(dy.extent(0));
  Kokkos::parallel_for(
      "kdist::ops::sum_over_batch",
      Kokkos::MDRangePolicy<Exec, Kokkos::Rank<2>, Kokkos::IndexType<std::int64_t>>(
          {0, 0},
          {static_cast<std::int64_t>(dp.extent(0)), static_cast<std::int64_t>(dp.extent(1))}),
      KOKKOS_LAMBDA(const std::int64_t s, const std::int64_t f) {
        typename DPV::non_const_value_type sum = 0;
        for (std::int64_t b = 0; b < batch; ++b) sum += dy(b, s, f);
        dp(s, f) = sum;
      });
}

}  // namespace kdist::ops
