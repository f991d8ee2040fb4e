#pragma once
//! \file ops/sparse_cross_entropy.hpp
//! Local kernels of a sparse categorical cross-entropy from logits whose classes (a vocabulary)
//! may be split over processes: each process holds a block of COLUMNS `[col_offset, col_offset +
//! z.extent(1))` of the logits of its rows. The caller combines the per-row results of the blocks
//! (nn/sparse_categorical_crossentropy.hpp: an all-reduce over the vocabulary's mesh axes):
//!
//!   1. row_max              m(i) = max over this block's columns (-inf for an empty block);
//!                           the caller takes the max over the blocks;
//!   2. sum_exp_and_target   st(i, 0) = sum_j exp(z(i, j) - m(i)) with the GLOBAL row max m,
//!                           st(i, 1) = z(i, t(i) - col_offset) when this block holds the
//!                           target column, else 0; the caller sums both over the blocks;
//!   3. sparse_xent_sum      sum_i m(i) + log st(i, 0) - st(i, 1): the rows' losses, summed;
//!   4. sparse_xent_grad     g(i, j) = scale (exp(z(i, j) - m(i)) / st(i, 0) - [t(i) == col_offset
//!                           + j]), local (softmax minus one-hot).
//!
//! Views: logits and gradient rank-2 LayoutRight [rows, block columns] of float or double; m
//! rank-1 [rows]; st rank-2 LayoutRight [rows, 2] of the logits' scalar type; targets rank-1
//! [rows] of integers. Kokkos kernels in the Views' execution space (host or device); on the host,
//! blocks of rows shared by the rank's threads (ops/detail/host_threads.hpp), the same bits for
//! any thread count.

#include <Kokkos_Core.hpp>
#include <cstdint>
#include <kdist/core/error.hpp>
#include <kdist/ops/backend.hpp>
#include <kdist/ops/detail/host_threads.hpp>
#include <kdist/ops/detail/kokkos_math.hpp>
#include <kdist/ops/detail/views.hpp>
#include <limits>
#include <string>
#include <type_traits>

namespace kdist::ops {

//! `m(i) = max_j z(i, j)` over the block's columns; `-infinity` for a block without columns (so
//! a max over the blocks ignores it). Errors: kdist::ValueError if `m` does not have one element
//! per row.
template <class ZV, class MV>
void row_max(const ZV& z, const MV& m) {
  static_assert(detail::check_matrix<ZV>() && detail::check_vector<MV>() &&
                detail::check_same_scalar<ZV, MV>());
  using T = detail::scalar_t<ZV>;
  detail::require_length("row_max", "m", m, z.extent(0));
  const auto cols = static_cast<std::int64_t>(z.extent(1));
  const T lowest = -std::numeric_limits<T>::infinity();
  detail::for_each_index<MV>(
      "kdist::ops::row_max", z.extent(0), detail::rows_per_block(z.extent(1)),
      KOKKOS_LAMBDA(const std::int64_t i) {
        T mx = lowest;
        for (std::int64_t j = 0; j < cols; ++j) mx = z(i, j) > mx ? z(i, j) : mx;
        m(i) = mx;
      });
}

//! `st(i, 0) = sum_j exp(z(i, j) - m(i))` over the block's columns and `st(i, 1) = z(i, t(i) -
//! col_offset)` when `t(i)` is one of the block's columns, else 0. `m` is the row max over ALL
//! columns. Errors: kdist::ValueError for mismatched shapes.
template <class ZV, class MV, class LV, class SV>
void sum_exp_and_target(const ZV& z, const MV& m, const LV& targets, std::int64_t col_offset,
                        const SV& st) {
  static_assert(detail::check_matrix<ZV>() && detail::check_vector<MV>() &&
                detail::check_labels<LV>() && detail::check_matrix<SV>() &&
                detail::check_same_scalar<ZV, MV>() && detail::check_same_scalar<ZV, SV>());
  using T = detail::scalar_t<ZV>;
  detail::require_length("sum_exp_and_target", "m", m, z.extent(0));
  detail::require_length("sum_exp_and_target", "targets", targets, z.extent(0));
  detail::require_shape("sum_exp_and_target", "st", st, z.extent(0), 2);
  const auto cols = static_cast<std::int64_t>(z.extent(1));
  detail::for_each_index<SV>(
      "kdist::ops::sum_exp_and_target", z.extent(0), detail::rows_per_block(z.extent(1)),
      KOKKOS_LAMBDA(const std::int64_t i) {
        const T mx = m(i);
        T s = 0;
        for (std::int64_t j = 0; j < cols; ++j) s += kdist::detail::kmath::exp(z(i, j) - mx);
        const std::int64_t local = static_cast<std::int64_t>(targets(i)) - col_offset;
        st(i, 0) = s;
        st(i, 1) = (local >= 0 && local < cols) ? z(i, local) : T(0);
      });
}

namespace detail {
//! sparse_xent_sum's reduction into `result`: a double (waited for) or a rank-0 View (not).
template <class MV, class SV, class R>
void sparse_xent_sum_to(const MV& m, const SV& st, R& result) {
  static_assert(check_vector<MV>() && check_matrix<SV>() && check_same_scalar<MV, SV>());
  require_shape("sparse_xent_sum", "st", st, m.extent(0), 2);
  Kokkos::parallel_reduce(
      "kdist::ops::sparse_xent_sum", range<SV>(m.extent(0)),
      KOKKOS_LAMBDA(const std::int64_t i, double& acc) {
        acc += static_cast<double>(m(i)) +
               kdist::detail::kmath::log(static_cast<double>(st(i, 0))) -
               static_cast<double>(st(i, 1));
      },
      result);
}
}  // namespace detail

//! `sum_i m(i) + log(st(i, 0)) - st(i, 1)` in double: the sum of the rows' losses
//! `logsumexp(z(i, :)) - z(i, t(i))`, given the combined row max and sums.
template <class MV, class SV>
double sparse_xent_sum(const MV& m, const SV& st) {
  double total = 0.0;
  detail::sparse_xent_sum_to(m, st, total);
  return total;
}

//! sparse_xent_sum into `out` (a rank-0 View of double in the memory of the Views), without
//! waiting for it (a training step that keeps its metrics on the device).
template <class MV, class SV, class OV>
void sparse_xent_sum_into(const MV& m, const SV& st, const OV& out) {
  static_assert(Kokkos::is_view<OV>::value);
  OV result = out;
  detail::sparse_xent_sum_to(m, st, result);
}

//! `g(i, j) = scale * (exp(z(i, j) - m(i)) / st(i, 0) - [t(i) == col_offset + j])`: the gradient
//! of `scale * sum of the rows' losses` for the block's columns. `g` may be `z`.
//! Errors: kdist::ValueError for mismatched shapes.
template <class ZV, class MV, class SV, class LV, class GV>
void sparse_xent_grad(const ZV& z, const MV& m, const SV& st, const LV& targets,
                      std::int64_t col_offset, detail::scalar_t<ZV> scale, const GV& g) {
  static_assert(detail::check_matrix<ZV>() && detail::check_vector<MV>() &&
                detail::check_matrix<SV>() && detail::check_labels<LV>() &&
                detail::check_matrix<GV>() && detail::check_same_scalar<ZV, MV>() &&
                detail::check_same_scalar<ZV, SV>() && detail::check_same_scalar<ZV, GV>());
  static_assert(!std::is_const_v<typename GV::value_type>,
                "kdist::ops::sparse_xent_grad: the gradient View must not be const");
  using T = detail::scalar_t<ZV>;
  detail::require_length("sparse_xent_grad", "m", m, z.extent(0));
  detail::require_length("sparse_xent_grad", "targets", targets, z.extent(0));
  detail::require_shape("sparse_xent_grad", "st", st, z.extent(0), 2);
  detail::require_shape("sparse_xent_grad", "the gradient", g, z.extent(0), z.extent(1));
  const auto element = KOKKOS_LAMBDA(const std::int64_t i, const std::int64_t j) {
    const T p = kdist::detail::kmath::exp(z(i, j) - m(i)) / st(i, 0);
    const bool hit = static_cast<std::int64_t>(targets(i)) == col_offset + j;
    g(i, j) = scale * (hit ? p - T(1) : p);
  };
  if constexpr (runs_on_host_v<ZV> && runs_on_host_v<GV>) {
    const auto cols = static_cast<std::int64_t>(g.extent(1));
    detail::for_each_index<GV>("kdist::ops::sparse_xent_grad", g.extent(0),
                               detail::rows_per_block(g.extent(1)), [&](const std::int64_t i) {
                                 for (std::int64_t j = 0; j < cols; ++j) element(i, j);
                               });
  } else {
    Kokkos::parallel_for("kdist::ops::sparse_xent_grad",
                         detail::md_range<GV>(g.extent(0), g.extent(1)), element);
  }
}

//! The number of targets outside `[0, classes)`.
template <class LV>
std::int64_t count_out_of_range(const LV& targets, std::int64_t classes) {
  static_assert(detail::check_labels<LV>());
  std::int64_t bad = 0;
  Kokkos::parallel_reduce(
      "kdist::ops::count_out_of_range", detail::range<LV>(targets.extent(0)),
      KOKKOS_LAMBDA(const std::int64_t i, std::int64_t& acc) {
        const auto t = static_cast<std::int64_t>(targets(i));
        if (t < 0 || t >= classes) ++acc;
      },
      bad);
  return bad;
}

}  // namespace kdist::ops
