#pragma once
//! \file ops/activations.hpp
//! Local elementwise and row-wise kernels of a Dense layer: ReLU and its backward, GELU (exact, erf
//! form) and its backward, row-wise softmax (numerically stable) and its backward, bias add and
//! bias gradient, and bias + ReLU fused both ways. Views are rank-2 LayoutRight [rows, cols] of float or double (biases rank-1
//! [cols]); host memory through Eigen, other memory spaces through Kokkos kernels (see
//! ops/backend.hpp); GELU through Kokkos everywhere. Each function documents which arguments may
//! be the same View (in-place use).

#include <Eigen/Core>
#include <Kokkos_Core.hpp>
#include <cmath>
#include <cstdint>
#include <kdist/core/error.hpp>
#include <kdist/ops/backend.hpp>
#include <kdist/ops/detail/host_threads.hpp>
#include <kdist/ops/detail/kokkos_math.hpp>
#include <kdist/ops/detail/views.hpp>
#include <unsupported/Eigen/SpecialFunctions>  // vectorised erf: gelu on the host

namespace kdist::ops {

//! `y = max(x, 0)`. `y` may be `x` (in place). Errors: kdist::ValueError if shapes differ.
template <class XV, class YV, class Backend = AutoBackend>
void relu(const XV& x, const YV& y, Backend = {}) {
  static_assert(detail::check_matrix<XV>() && detail::check_matrix<YV>() &&
                detail::check_same_scalar<XV, YV>());
  constexpr bool eigen = detail::check_backend<Backend, XV, YV>();
  using T = detail::scalar_t<YV>;
  detail::require_shape("relu", "y", y, x.extent(0), x.extent(1));
  if constexpr (eigen) {
    auto ym = detail::eigen_map(y);
    ym = detail::eigen_map(x).array().max(T(0)).matrix();
  } else {
    Kokkos::parallel_for(
        "kdist::ops::relu", detail::md_range<YV>(y.extent(0), y.extent(1)),
        KOKKOS_LAMBDA(const std::int64_t i, const std::int64_t j) {
          const T v = x(i, j);
          y(i, j) = v > T(0) ? v : T(0);
        });
  }
}

//! `x = max(x, 0)` in place.
template <class V, class Backend = AutoBackend>
void relu_inplace(const V& x, Backend b = {}) {
  relu(x, x, b);
}

//! ReLU backward from the forward OUTPUT `y`: `dx = dy * (y > 0)` (the gradient at 0 is 0, as in
//! Keras). `dx` may be `dy`. Errors: kdist::ValueError if shapes differ.
template <class YV, class DYV, class DXV, class Backend = AutoBackend>
void relu_backward(const YV& y, const DYV& dy, const DXV& dx, Backend = {}) {
  static_assert(detail::check_matrix<YV>() && detail::check_matrix<DYV>() &&
                detail::check_matrix<DXV>());
  static_assert(detail::check_same_scalar<YV, DXV>() && detail::check_same_scalar<DYV, DXV>());
  constexpr bool eigen = detail::check_backend<Backend, YV, DYV, DXV>();
  using T = detail::scalar_t<DXV>;
  detail::require_shape("relu_backward", "dy", dy, y.extent(0), y.extent(1));
  detail::require_shape("relu_backward", "dx", dx, y.extent(0), y.extent(1));
  if constexpr (eigen) {
    auto dxm = detail::eigen_map(dx);
    dxm =
        (detail::eigen_map(y).array() > T(0)).select(detail::eigen_map(dy).array(), T(0)).matrix();
  } else {
    Kokkos::parallel_for(
        "kdist::ops::relu_backward", detail::md_range<DXV>(dx.extent(0), dx.extent(1)),
        KOKKOS_LAMBDA(const std::int64_t i, const std::int64_t j) {
          dx(i, j) = y(i, j) > T(0) ? dy(i, j) : T(0);
        });
  }
}

//! `d = d * (y > 0)` in place (ReLU backward on the gradient buffer).
template <class YV, class DV, class Backend = AutoBackend>
void relu_backward_inplace(const YV& y, const DV& d, Backend b = {}) {
  relu_backward(y, d, d, b);
}

//! Row-wise softmax, numerically stable: `y(i, :) = exp(x(i, :) - max) / sum(exp(x(i, :) - max))`.
//! `y` may be `x` (in place). Errors: kdist::ValueError if shapes differ.
template <class XV, class YV, class Backend = AutoBackend>
void softmax(const XV& x, const YV& y, Backend = {}) {
  static_assert(detail::check_matrix<XV>() && detail::check_matrix<YV>() &&
                detail::check_same_scalar<XV, YV>());
  constexpr bool eigen = detail::check_backend<Backend, XV, YV>();
  using T = detail::scalar_t<YV>;
  detail::require_shape("softmax", "y", y, x.extent(0), x.extent(1));
  const auto cols = static_cast<std::int64_t>(x.extent(1));
  if (cols == 0) return;
  if constexpr (eigen) {
    auto xm = detail::eigen_map(x);
    auto ym = detail::eigen_map(y);
    for (Eigen::Index i = 0; i < xm.rows(); ++i) {
      const T mx = xm.row(i).maxCoeff();
      ym.row(i) = (xm.row(i).array() - mx).exp().matrix();
      ym.row(i) /= ym.row(i).sum();
    }
  } else {
    Kokkos::parallel_for(
        "kdist::ops::softmax", detail::range<YV>(x.extent(0)), KOKKOS_LAMBDA(const std::int64_t i) {
          T mx = x(i, 0);
          for (std::int64_t j = 1; j < cols; ++j) mx = x(i, j) > mx ? x(i, j) : mx;
          T sum = 0;
          for (std::int64_t j = 0; j < cols; ++j) {
            const T e = kdist::detail::kmath::exp(x(i, j) - mx);
            y(i, j) = e;
            sum += e;
          }
          for (std::int64_t j = 0; j < cols; ++j) y(i, j) /= sum;
        });
  }
}

//! Row-wise softmax in place.
template <class V, class Backend = AutoBackend>
void softmax_inplace(const V& x, Backend b = {}) {
  softmax(x, x, b);
}

//! Softmax backward from the forward OUTPUT `y`:
//! `dx(i, j) = y(i, j) * (dy(i, j) - sum_k dy(i, k) * y(i, k))`. `dx` may be `dy`.
//! Errors: kdist::ValueError if shapes differ.
template <class YV, class DYV, class DXV, class Backend = AutoBackend>
void softmax_backward(const YV& y, const DYV& dy, const DXV& dx, Backend = {}) {
  static_assert(detail::check_matrix<YV>() && detail::check_matrix<DYV>() &&
                detail::check_matrix<DXV>());
  static_assert(detail::check_same_scalar<YV, DXV>() && detail::check_same_scalar<DYV, DXV>());
  constexpr bool eigen = detail::check_backend<Backend, YV, DYV, DXV>();
  using T = detail::scalar_t<DXV>;
  detail::require_shape("softmax_backward", "dy", dy, y.extent(0), y.extent(1));
  detail::require_shape("softmax_backward", "dx", dx, y.extent(0), y.extent(1));
  const auto cols = static_cast<std::int64_t>(y.extent(1));
  if constexpr (eigen) {
    auto ym = detail::eigen_map(y);
    auto dym = detail::eigen_map(dy);
    auto dxm = detail::eigen_map(dx);
    for (Eigen::Index i = 0; i < ym.rows(); ++i) {
      const T s = (dym.row(i).array() * ym.row(i).array()).sum();
      dxm.row(i) = (ym.row(i).array() * (dym.row(i).array() - s)).matrix();
    }
  } else {
    Kokkos::parallel_for(
        "kdist::ops::softmax_backward", detail::range<DXV>(y.extent(0)),
        KOKKOS_LAMBDA(const std::int64_t i) {
          T s = 0;
          for (std::int64_t j = 0; j < cols; ++j) s += dy(i, j) * y(i, j);
          for (std::int64_t j = 0; j < cols; ++j) dx(i, j) = y(i, j) * (dy(i, j) - s);
        });
  }
}

//! `y(i, j) += b(j)`: add a bias [cols] to every row of `y` [rows, cols].
//! Errors: kdist::ValueError if `b` does not have `y.extent(1)` elements.
template <class YV, class BV, class Backend = AutoBackend>
void bias_add(const YV& y, const BV& b, Backend = {}) {
  static_assert(detail::check_matrix<YV>() && detail::check_vector<BV>() &&
                detail::check_same_scalar<YV, BV>());
  constexpr bool eigen = detail::check_backend<Backend, YV, BV>();
  detail::require_length("bias_add", "the bias", b, y.extent(1));
  if constexpr (eigen) {
    auto ym = detail::eigen_map(y);
    ym.rowwise() += detail::eigen_row(b);
  } else {
    Kokkos::parallel_for(
        "kdist::ops::bias_add", detail::md_range<YV>(y.extent(0), y.extent(1)),
        KOKKOS_LAMBDA(const std::int64_t i, const std::int64_t j) { y(i, j) += b(j); });
  }
}

//! Bias gradient: `db(j) = sum_i dy(i, j)` (column sums, rows added in order; overwrites `db`).
//! Errors: kdist::ValueError if `db` does not have `dy.extent(1)` elements.
template <class DYV, class DBV, class Backend = AutoBackend>
void bias_grad(const DYV& dy, const DBV& db, Backend = {}) {
  static_assert(detail::check_matrix<DYV>() && detail::check_vector<DBV>() &&
                detail::check_same_scalar<DYV, DBV>());
  static_assert(!std::is_const_v<typename DBV::value_type>,
                "kdist::ops::bias_grad: the result View db must not be const");
  constexpr bool eigen = detail::check_backend<Backend, DYV, DBV>();
  using T = detail::scalar_t<DBV>;
  detail::require_length("bias_grad", "db", db, dy.extent(1));
  const auto rows = static_cast<std::int64_t>(dy.extent(0));
  if constexpr (eigen) {
    // Rows summed in order (vectorised across columns), as the Kokkos kernel and the fused
    // relu_backward_bias_grad do: every backend and both forms give the same bits.
    auto dbm = detail::eigen_row(db);
    const auto dym = detail::eigen_map(dy);
    dbm.setZero();
    for (Eigen::Index i = 0; i < dym.rows(); ++i) dbm += dym.row(i);
  } else {
    Kokkos::parallel_for(
        "kdist::ops::bias_grad", detail::range<DBV>(db.extent(0)),
        KOKKOS_LAMBDA(const std::int64_t j) {
          T s = 0;
          for (std::int64_t i = 0; i < rows; ++i) s += dy(i, j);
          db(j) = s;
        });
  }
}

// ---- fused: bias and ReLU in one pass ----------------------------------------------------------
// A Dense layer with a bias and ReLU streams its output once instead of twice in each direction
// (issue 21: elementwise passes fused where they stream the same data). Same arithmetic, in the same
// order, as the separate kernels: the results are bitwise those of bias_add + relu_inplace and of
// relu_backward_inplace + bias_grad.

//! `y = max(y + b, 0)` in place, row by row (bias_add then relu_inplace, one pass).
//! Errors: kdist::ValueError if `b` does not have `y.extent(1)` elements.
template <class YV, class BV, class Backend = AutoBackend>
void bias_add_relu(const YV& y, const BV& b, Backend = {}) {
  static_assert(detail::check_matrix<YV>() && detail::check_vector<BV>() &&
                detail::check_same_scalar<YV, BV>());
  constexpr bool eigen = detail::check_backend<Backend, YV, BV>();
  using T = detail::scalar_t<YV>;
  detail::require_length("bias_add_relu", "the bias", b, y.extent(1));
  if constexpr (eigen) {
    auto ym = detail::eigen_map(y);
    const auto bm = detail::eigen_row(b);
    for (Eigen::Index i = 0; i < ym.rows(); ++i) {
      ym.row(i) = (ym.row(i) + bm).array().max(T(0)).matrix();
    }
  } else {
    Kokkos::parallel_for(
        "kdist::ops::bias_add_relu", detail::md_range<YV>(y.extent(0), y.extent(1)),
        KOKKOS_LAMBDA(const std::int64_t i, const std::int64_t j) {
          const T v = y(i, j) + b(j);
          y(i, j) = v > T(0) ? v : T(0);
        });
  }
}

//! ReLU backward and the bias gradient in one pass: `d = d * (y > 0)` in place (y: the forward
//! output) and `db(j) = sum_i d(i, j)` of the masked `d` (overwrites `db`).
//! Errors: kdist::ValueError if `d` is not shaped as `y` or `db` lacks `y.extent(1)` elements.
template <class YV, class DV, class DBV, class Backend = AutoBackend>
void relu_backward_bias_grad(const YV& y, const DV& d, const DBV& db, Backend = {}) {
  static_assert(detail::check_matrix<YV>() && detail::check_matrix<DV>() &&
                detail::check_vector<DBV>());
  static_assert(detail::check_same_scalar<YV, DV>() && detail::check_same_scalar<DV, DBV>());
  static_assert(!std::is_const_v<typename DBV::value_type>,
                "kdist::ops::relu_backward_bias_grad: the result View db must not be const");
  constexpr bool eigen = detail::check_backend<Backend, YV, DV, DBV>();
  using T = detail::scalar_t<DBV>;
  detail::require_shape("relu_backward_bias_grad", "d", d, y.extent(0), y.extent(1));
  detail::require_length("relu_backward_bias_grad", "db", db, y.extent(1));
  const auto rows = static_cast<std::int64_t>(y.extent(0));
  if constexpr (eigen) {
    auto dm = detail::eigen_map(d);
    const auto ym = detail::eigen_map(y);
    auto dbm = detail::eigen_row(db);
    dbm.setZero();
    for (Eigen::Index i = 0; i < dm.rows(); ++i) {
      dm.row(i) = (ym.row(i).array() > T(0)).select(dm.row(i).array(), T(0)).matrix();
      dbm += dm.row(i);
    }
  } else {
    Kokkos::parallel_for(
        "kdist::ops::relu_backward_bias_grad", detail::range<DBV>(db.extent(0)),
        KOKKOS_LAMBDA(const std::int64_t j) {
          T s = 0;
          for (std::int64_t i = 0; i < rows; ++i) {
            const T v = y(i, j) > T(0) ? d(i, j) : T(0);
            d(i, j) = v;
            s += v;
          }
          db(j) = s;
        });
  }
}

// ---- GELU ---------------------------------------------------------------------------------------

namespace detail {

//! erf callable in a kernel, on Kokkos 3.x (Kokkos::Experimental) and 4.x (Kokkos).
template <class T>
KOKKOS_INLINE_FUNCTION T kerf(T x) {
#if KOKKOS_VERSION >= 40000
  return Kokkos::erf(x);
#else
  return Kokkos::Experimental::erf(x);
#endif
}

//! `gelu(x) = 0.5 x (1 + erf(x / sqrt 2))`, Keras' `gelu(x, approximate=False)`.
template <class T>
KOKKOS_INLINE_FUNCTION T gelu_value(T x) {
  return T(0.5) * x * (T(1) + kerf(x * T(0.70710678118654752440)));
}

//! `gelu'(x) = Phi(x) + x phi(x)`: the normal CDF `0.5 (1 + erf(x / sqrt 2))` plus x times the
//! normal density `exp(-x^2 / 2) / sqrt(2 pi)`.
template <class T>
KOKKOS_INLINE_FUNCTION T gelu_derivative(T x) {
  const T cdf = T(0.5) * (T(1) + kerf(x * T(0.70710678118654752440)));
  const T pdf = kdist::detail::kmath::exp(T(-0.5) * x * x) * T(0.39894228040143267794);
  return cdf + x * pdf;
}

}  // namespace detail

//! GELU, exact form (Keras' default `keras.activations.gelu(x, approximate=False)`):
//! `y = 0.5 x (1 + erf(x / sqrt 2))`. `y` may be `x` (in place). On the host, Eigen's vectorised
//! erf (unsupported/Eigen/SpecialFunctions; for float some 30x faster than std::erf per element,
//! within 5e-7 of it); elsewhere a Kokkos kernel. Errors: kdist::ValueError if shapes differ.
template <class XV, class YV, class Backend = AutoBackend>
void gelu(const XV& x, const YV& y, Backend = {}) {
  static_assert(detail::check_matrix<XV>() && detail::check_matrix<YV>() &&
                detail::check_same_scalar<XV, YV>());
  constexpr bool eigen = detail::check_backend<Backend, XV, YV>();
  using T = detail::scalar_t<YV>;
  detail::require_shape("gelu", "y", y, x.extent(0), x.extent(1));
  if constexpr (eigen) {
    auto ym = detail::eigen_map(y);
    const auto xm = detail::eigen_map(x);
    // Row blocks of ~16 K elements, shared by the rank's threads (ops/detail/host_threads.hpp).
    detail::for_host_blocks(
        y.extent(0), detail::rows_per_block(y.extent(1)), [&](std::uint64_t r, std::uint64_t n) {
          const auto r0 = static_cast<Eigen::Index>(r), rn = static_cast<Eigen::Index>(n);
          const auto xa = xm.middleRows(r0, rn).array();
          ym.middleRows(r0, rn) =
              (T(0.5) * xa * (T(1) + (xa * T(0.70710678118654752440)).erf())).matrix();
        });
    return;
  }
  Kokkos::parallel_for(
      "kdist::ops::gelu", detail::md_range<YV>(y.extent(0), y.extent(1)),
      KOKKOS_LAMBDA(const std::int64_t i, const std::int64_t j) {
        y(i, j) = detail::gelu_value<T>(x(i, j));
      });
}

//! GELU in place.
template <class V, class Backend = AutoBackend>
void gelu_inplace(const V& x, Backend b = {}) {
  gelu(x, x, b);
}

//! GELU backward from the forward INPUT `x` (the pre-activation): `dx = dy * gelu'(x)`, with
//! `gelu'(x) = 0.5 (1 + erf(x / sqrt 2)) + x exp(-x^2 / 2) / sqrt(2 pi)`. `dx` may be `dy`.
//! Errors: kdist::ValueError if shapes differ.
template <class XV, class DYV, class DXV, class Backend = AutoBackend>
void gelu_backward(const XV& x, const DYV& dy, const DXV& dx, Backend = {}) {
  static_assert(detail::check_matrix<XV>() && detail::check_matrix<DYV>() &&
                detail::check_matrix<DXV>());
  static_assert(detail::check_same_scalar<XV, DXV>() && detail::check_same_scalar<DYV, DXV>());
  constexpr bool eigen = detail::check_backend<Backend, XV, DYV, DXV>();
  using T = detail::scalar_t<DXV>;
  detail::require_shape("gelu_backward", "dy", dy, x.extent(0), x.extent(1));
  detail::require_shape("gelu_backward", "dx", dx, x.extent(0), x.extent(1));
  if constexpr (eigen) {
    auto dxm = detail::eigen_map(dx);
    const auto xm = detail::eigen_map(x);
    const auto dym = detail::eigen_map(dy);
    detail::for_host_blocks(
        dx.extent(0), detail::rows_per_block(dx.extent(1)), [&](std::uint64_t r, std::uint64_t n) {
          const auto r0 = static_cast<Eigen::Index>(r), rn = static_cast<Eigen::Index>(n);
          const auto xa = xm.middleRows(r0, rn).array();
          const auto cdf = T(0.5) * (T(1) + (xa * T(0.70710678118654752440)).erf());
          const auto pdf = (T(-0.5) * xa * xa).exp() * T(0.39894228040143267794);
          dxm.middleRows(r0, rn) = (dym.middleRows(r0, rn).array() * (cdf + xa * pdf)).matrix();
        });
    return;
  }
  Kokkos::parallel_for(
      "kdist::ops::gelu_backward", detail::md_range<DXV>(dx.extent(0), dx.extent(1)),
      KOKKOS_LAMBDA(const std::int64_t i, const std::int64_t j) {
        dx(i, j) = dy(i, j) * detail::gelu_derivative<T>(x(i, j));
      });
}

}  // namespace kdist::ops
