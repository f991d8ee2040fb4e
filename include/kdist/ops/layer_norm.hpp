#pragma once
//! \file ops/layer_norm.hpp
//! Local kernels of Keras' LayerNormalization over the last axis, on rows (n, d) of float or
//! double (a (batch, seq, d) block seen as (batch * seq, d)):
//! - forward: `mean_i = sum_j x_ij / d`, `var_i = sum_j (x_ij - mean_i)^2 / d` (two passes),
//!   `rstd_i = 1 / sqrt(var_i + epsilon)`, `y_ij = (x_ij - mean_i) rstd_i gamma_j + beta_j`;
//! - input gradient, with `xhat = (x - mean) rstd` and `g = dy gamma`:
//!   `dx_ij = rstd_i (g_ij - mean_j(g_ij) - xhat_ij mean_j(g_ij xhat_ij))`;
//! - parameter gradients over the rows given: `dgamma_j = sum_i dy_ij xhat_ij`,
//!   `dbeta_j = sum_i dy_ij` (one thread per column: no atomics).
//! Any memory space: plain Kokkos kernels in the Views' execution space, one thread per row; on
//! the host, blocks of rows (of columns for the parameter gradients) shared by the rank's threads
//! (ops/detail/host_threads.hpp), with the same bits for any thread count.

#include <Kokkos_Core.hpp>
#include <cstddef>
#include <cstdint>
#include <kdist/core/error.hpp>
#include <kdist/ops/backend.hpp>
#include <kdist/ops/detail/host_threads.hpp>
#include <kdist/ops/detail/kokkos_math.hpp>
#include <kdist/ops/detail/views.hpp>
#include <string>

namespace kdist::ops {

//! Normalises each row of `x` (n, d) into `y` (n, d) and keeps each row's mean and 1/sqrt(var +
//! epsilon) in `mean`, `rstd` (n,). `gamma`, `beta` (d,) scale and shift. `y` may be `x`.
//! Errors: kdist::ValueError for shapes that differ.
template <class XV, class GV, class BV, class YV, class MV, class RV>
void layer_norm_forward(const XV& x, const GV& gamma, const BV& beta, double epsilon, const YV& y,
                        const MV& mean, const RV& rstd) {
  static_assert(detail::check_matrix<XV>() && detail::check_matrix<YV>() &&
                detail::check_vector<GV>() && detail::check_vector<BV>() &&
                detail::check_vector<MV>() && detail::check_vector<RV>());
  static_assert(detail::check_same_scalar<XV, YV>() && detail::check_same_scalar<XV, GV>() &&
                detail::check_same_scalar<XV, BV>() && detail::check_same_scalar<XV, MV>() &&
                detail::check_same_scalar<XV, RV>());
  using T = detail::scalar_t<XV>;
  const std::size_t n = x.extent(0), d = x.extent(1);
  detail::require_shape("layer_norm_forward", "y", y, n, d);
  detail::require_length("layer_norm_forward", "gamma", gamma, d);
  detail::require_length("layer_norm_forward", "beta", beta, d);
  detail::require_length("layer_norm_forward", "mean", mean, n);
  detail::require_length("layer_norm_forward", "rstd", rstd, n);
  if (d == 0) throw ValueError("kdist::ops::layer_norm_forward: rows of 0 features");
  const auto cols = static_cast<std::int64_t>(d);
  const T eps = static_cast<T>(epsilon);
  detail::for_each_index<YV>(
      "kdist::ops::layer_norm_forward", n, detail::rows_per_block(d),
      KOKKOS_LAMBDA(const std::int64_t i) {
        T sum = 0;
        for (std::int64_t j = 0; j < cols; ++j) sum += x(i, j);
        const T mu = sum / static_cast<T>(cols);
        T sq = 0;
        for (std::int64_t j = 0; j < cols; ++j) sq += (x(i, j) - mu) * (x(i, j) - mu);
        const T r = T(1) / kdist::detail::kmath::sqrt(sq / static_cast<T>(cols) + eps);
        mean(i) = mu;
        rstd(i) = r;
        for (std::int64_t j = 0; j < cols; ++j) y(i, j) = (x(i, j) - mu) * r * gamma(j) + beta(j);
      });
}

//! The input gradient `dx` (n, d) of layer_norm_forward given `dy`, the forward's `x`, `gamma`,
//! `mean` and `rstd`. `dx` may be `dy`. Errors: kdist::ValueError for shapes that differ.
template <class XV, class DYV, class GV, class MV, class RV, class DXV>
void layer_norm_backward_input(const XV& x, const DYV& dy, const GV& gamma, const MV& mean,
                               const RV& rstd, const DXV& dx) {
  static_assert(detail::check_matrix<XV>() && detail::check_matrix<DYV>() &&
                detail::check_matrix<DXV>() && detail::check_vector<GV>() &&
                detail::check_vector<MV>() && detail::check_vector<RV>());
  static_assert(detail::check_same_scalar<XV, DYV>() && detail::check_same_scalar<XV, DXV>() &&
                detail::check_same_scalar<XV, GV>() && detail::check_same_scalar<XV, MV>() &&
                detail::check_same_scalar<XV, RV>());
  using T = detail::scalar_t<XV>;
  const std::size_t n = x.extent(0), d = x.extent(1);
  detail::require_shape("layer_norm_backward_input", "dy", dy, n, d);
  detail::require_shape("layer_norm_backward_input", "dx", dx, n, d);
  detail::require_length("layer_norm_backward_input", "gamma", gamma, d);
  detail::require_length("layer_norm_backward_input", "mean", mean, n);
  detail::require_length("layer_norm_backward_input", "rstd", rstd, n);
  const auto cols = static_cast<std::int64_t>(d);
  detail::for_each_index<DXV>(
      "kdist::ops::layer_norm_backward_input", n, detail::rows_per_block(d),
      KOKKOS_LAMBDA(const std::int64_t i) {
        const T mu = mean(i), r = rstd(i);
        T sum_g = 0, sum_gx = 0;
        for (std::int64_t j = 0; j < cols; ++j) {
          const T g = dy(i, j) * gamma(j);
          sum_g += g;
          sum_gx += g * (x(i, j) - mu) * r;
        }
        const T mg = sum_g / static_cast<T>(cols), mgx = sum_gx / static_cast<T>(cols);
        for (std::int64_t j = 0; j < cols; ++j) {
          const T xhat = (x(i, j) - mu) * r;
          dx(i, j) = r * (dy(i, j) * gamma(j) - mg - xhat * mgx);
        }
      });
}

//! The parameter gradients over the rows given: `dgamma_j = sum_i dy_ij (x_ij - mean_i) rstd_i`,
//! `dbeta_j = sum_i dy_ij` (overwritten, not accumulated). Errors: kdist::ValueError for shapes
//! that differ.
template <class XV, class DYV, class MV, class RV, class DGV, class DBV>
void layer_norm_backward_params(const XV& x, const DYV& dy, const MV& mean, const RV& rstd,
                                const DGV& dgamma, const DBV& dbeta) {
  static_assert(detail::check_matrix<XV>() && detail::check_matrix<DYV>() &&
                detail::check_vector<MV>() && detail::check_vector<RV>() &&
                detail::check_vector<DGV>() && detail::check_vector<DBV>());
  static_assert(detail::check_same_scalar<XV, DYV>() && detail::check_same_scalar<XV, DGV>() &&
                detail::check_same_scalar<XV, DBV>() && detail::check_same_scalar<XV, MV>() &&
                detail::check_same_scalar<XV, RV>());
  using T = detail::scalar_t<XV>;
  const std::size_t n = x.extent(0), d = x.extent(1);
  detail::require_shape("layer_norm_backward_params", "dy", dy, n, d);
  detail::require_length("layer_norm_backward_params", "mean", mean, n);
  detail::require_length("layer_norm_backward_params", "rstd", rstd, n);
  detail::require_length("layer_norm_backward_params", "dgamma", dgamma, d);
  detail::require_length("layer_norm_backward_params", "dbeta", dbeta, d);
  const auto rows = static_cast<std::int64_t>(n);
  if constexpr (runs_on_host_v<XV> && runs_on_host_v<DYV> && runs_on_host_v<MV> &&
                runs_on_host_v<RV> && runs_on_host_v<DGV> && runs_on_host_v<DBV>) {
    // Blocks of columns, each swept row by row (contiguous reads, not a column's stride) with
    // its sums kept per column: every column adds its rows in the same order as the kernel below.
    constexpr std::size_t block = 64;
    detail::for_host_blocks(d, block, [&](std::uint64_t j0, std::uint64_t count) {
      T sg[block] = {}, sb[block] = {};
      const auto jn = static_cast<std::int64_t>(count), jb = static_cast<std::int64_t>(j0);
      for (std::int64_t i = 0; i < rows; ++i) {
        const T mu = mean(i), r = rstd(i);
        for (std::int64_t j = 0; j < jn; ++j) {
          sg[j] += dy(i, jb + j) * (x(i, jb + j) - mu) * r;
          sb[j] += dy(i, jb + j);
        }
      }
      for (std::int64_t j = 0; j < jn; ++j) {
        dgamma(jb + j) = sg[j];
        dbeta(jb + j) = sb[j];
      }
    });
    return;
  }
  Kokkos::parallel_for(
      "kdist::ops::layer_norm_backward_params", detail::range<DGV>(d),
      KOKKOS_LAMBDA(const std::int64_t j) {
        T sg = 0, sb = 0;
        for (std::int64_t i = 0; i < rows; ++i) {
          sg += dy(i, j) * (x(i, j) - mean(i)) * rstd(i);
          sb += dy(i, j);
        }
        dgamma(j) = sg;
        dbeta(j) = sb;
      });
}

}  // namespace kdist::ops
