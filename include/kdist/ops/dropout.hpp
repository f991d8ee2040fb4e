#pragma once
//! \file ops/dropout.hpp
//! Inverted dropout (Keras' `Dropout(rate)` in training): each element is kept with probability
//! `1 - rate` and scaled by `1 / (1 - rate)`, or set to 0. The mask is not stored: it is a function
//! of (seed, stream, step, GLOBAL element index) through kdist::dropout_keep, so a shard of an
//! activation (rows of the batch on a "data" axis, columns on a "model" axis) draws exactly the
//! elements of the full tensor's mask, and the backward pass recomputes it. `dropout` takes a
//! matrix block; `dropout_block` a block of an activation of any rank (a (batch, sequence,
//! features) or NHWC one), keyed by the same row-major global flat index.

#include <Kokkos_Core.hpp>
#include <array>
#include <cstddef>
#include <cstdint>
#include <kdist/core/error.hpp>
#include <kdist/ops/backend.hpp>
#include <kdist/ops/detail/views.hpp>
#include <kdist/ops/random.hpp>
#include <string>
#include <type_traits>

namespace kdist::ops {

//! Which mask a dropout call draws. Element (i, j) of the local View is element
//! (row_offset + i, col_offset + j) of the global activation [global batch, global_cols], whose
//! flat index `(row_offset + i) * global_cols + col_offset + j` keys kdist::dropout_keep.
//! Example: `{.seed = 1337, .stream = kdist::stream_id("dropout"), .step = step, .rate = 0.4,
//!            .row_offset = first_global_row}`.
struct DropoutParams {
  std::uint64_t seed = 0;         //!< the model's seed
  std::uint64_t stream = 0;       //!< the layer's stream, `kdist::stream_id("<layer name>")`
  std::uint64_t step = 0;         //!< the training step (the optimizer's iterations)
  double rate = 0.0;              //!< fraction dropped, in [0, 1)
  std::uint64_t row_offset = 0;   //!< global row of the local row 0 (the shard's batch offset)
  std::uint64_t col_offset = 0;   //!< global column of the local column 0
  std::uint64_t global_cols = 0;  //!< columns of the global activation; 0: the local View's
};

namespace detail {

template <class V>
std::uint64_t checked_global_cols(const char* op, const V& x, const DropoutParams& p) {
  if (!(p.rate >= 0.0 && p.rate < 1.0)) {
    throw ValueError(std::string("kdist::ops::") + op + ": rate is " + std::to_string(p.rate) +
                     "; the dropout rate must be in [0, 1)");
  }
  const std::uint64_t cols = x.extent(1);
  std::uint64_t global_cols = p.global_cols;
  if (global_cols == 0) {
    if (p.col_offset != 0) {
      throw ValueError(std::string("kdist::ops::") + op + ": col_offset is " +
                       std::to_string(p.col_offset) +
                       " but global_cols is not given; a column shard must give the global "
                       "number of columns so that it draws the full tensor's mask");
    }
    global_cols = cols;
  }
  if (p.col_offset + cols > global_cols) {
    throw ValueError(std::string("kdist::ops::") + op + ": columns [" +
                     std::to_string(p.col_offset) + ", " + std::to_string(p.col_offset + cols) +
                     ") do not fit in global_cols = " + std::to_string(global_cols));
  }
  return global_cols;
}

}  // namespace detail

//! `y = dropout(x)`: `y(i, j) = x(i, j) / (1 - rate)` where kdist::dropout_keep keeps the global
//! element, else 0. `y` may be `x` (in place). `rate == 0` copies.
//! Errors: kdist::ValueError for a rate outside [0, 1), a column shard without `global_cols`, a
//! shard that does not fit in `global_cols`, or mismatched shapes.
template <class XV, class YV, class Backend = AutoBackend>
void dropout(const XV& x, const YV& y, const DropoutParams& params, Backend = {}) {
  static_assert(detail::check_matrix<XV>() && detail::check_matrix<YV>() &&
                detail::check_same_scalar<XV, YV>());
  constexpr bool eigen = detail::check_backend<Backend, XV, YV>();
  using T = detail::scalar_t<YV>;
  detail::require_shape("dropout", "y", y, x.extent(0), x.extent(1));
  const std::uint64_t global_cols = detail::checked_global_cols("dropout", x, params);
  const RandomKey key = random_key(params.seed, params.stream, params.step);
  const auto rate = static_cast<float>(params.rate);
  const T keep_prob = T(1) - static_cast<T>(params.rate);
  const std::uint64_t row0 = params.row_offset;
  const std::uint64_t col0 = params.col_offset;
  if constexpr (eigen) {
    auto xm = detail::eigen_map(x);
    auto ym = detail::eigen_map(y);
    for (Eigen::Index i = 0; i < xm.rows(); ++i) {
      const std::uint64_t base = (row0 + static_cast<std::uint64_t>(i)) * global_cols + col0;
      for (Eigen::Index j = 0; j < xm.cols(); ++j) {
        ym(i, j) = dropout_keep(key, base + static_cast<std::uint64_t>(j), rate)
                       ? xm(i, j) / keep_prob
                       : T(0);
      }
    }
  } else {
    Kokkos::parallel_for(
        "kdist::ops::dropout", detail::md_range<YV>(y.extent(0), y.extent(1)),
        KOKKOS_LAMBDA(const std::int64_t i, const std::int64_t j) {
          const std::uint64_t index = (row0 + static_cast<std::uint64_t>(i)) * global_cols + col0 +
                                      static_cast<std::uint64_t>(j);
          y(i, j) = kdist::dropout_keep(key, index, rate) ? x(i, j) / keep_prob : T(0);
        });
  }
}

//! Dropout in place.
template <class V, class Backend = AutoBackend>
void dropout_inplace(const V& x, const DropoutParams& params, Backend b = {}) {
  dropout(x, x, params, b);
}

//! Dropout backward with the forward call's `params`: `dx = dy / (1 - rate)` on kept elements,
//! else 0 (the same mask, recomputed). `dx` may be `dy`. Errors: as dropout.
template <class DYV, class DXV, class Backend = AutoBackend>
void dropout_backward(const DYV& dy, const DXV& dx, const DropoutParams& params, Backend b = {}) {
  dropout(dy, dx, params, b);
}

//! Which mask `dropout_block` draws for a block of a rank-R activation: local element (i_0, ...,
//! i_{R-1}) is global element (offsets[0] + i_0, ..., offsets[R-1] + i_{R-1}) of an activation of
//! `global_extents`, whose row-major flat index keys kdist::dropout_keep (for R = 2, the index
//! DropoutParams gives: the same masks).
template <std::size_t R>
struct DropoutBlockParams {
  std::uint64_t seed = 0;                         //!< the model's seed
  std::uint64_t stream = 0;                       //!< the layer's stream
  std::uint64_t step = 0;                         //!< the training step
  double rate = 0.0;                              //!< fraction dropped, in [0, 1)
  std::array<std::uint64_t, R> offsets{};         //!< global index of the local element 0
  std::array<std::uint64_t, R> global_extents{};  //!< the global activation's shape
};

//! `y = dropout(x)` on a contiguous LayoutRight block of any rank: `y = x / (1 - rate)` where
//! kdist::dropout_keep keeps the global element, else 0. `y` may be `x`. Used forward and
//! backward (the same params recompute the mask). Errors: kdist::ValueError for a rate outside
//! [0, 1), a block that does not fit in `global_extents`, mismatched shapes or a View that is not
//! contiguous.
template <class XV, class YV>
void dropout_block(const XV& x, const YV& y,
                   const DropoutBlockParams<static_cast<std::size_t>(XV::rank)>& params) {
  constexpr std::size_t R = static_cast<std::size_t>(XV::rank);
  static_assert(static_cast<std::size_t>(YV::rank) == R && R >= 1 && R <= 8,
                "kdist::ops::dropout_block: x and y of the same rank, 1 to 8");
  static_assert(std::is_same_v<typename XV::array_layout, Kokkos::LayoutRight> &&
                    std::is_same_v<typename YV::array_layout, Kokkos::LayoutRight>,
                "kdist::ops::dropout_block: LayoutRight Views");
  static_assert(detail::check_same_scalar<XV, YV>());
  using T = detail::scalar_t<YV>;
  const std::string op = "kdist::ops::dropout_block: ";
  if (!(params.rate >= 0.0 && params.rate < 1.0)) {
    throw ValueError(op + "rate is " + std::to_string(params.rate) +
                     "; the dropout rate must be in [0, 1)");
  }
  Kokkos::Array<std::uint64_t, R> lo, gext, lext;
  for (std::size_t d = 0; d < R; ++d) {
    if (y.extent(d) != x.extent(d)) {
      throw ValueError(op + "y is " + detail::shape_string(y) + ", expected " +
                       detail::shape_string(x));
    }
    if (params.offsets[d] + x.extent(d) > params.global_extents[d]) {
      throw ValueError(op + "dimension " + std::to_string(d) + ": elements [" +
                       std::to_string(params.offsets[d]) + ", " +
                       std::to_string(params.offsets[d] + x.extent(d)) +
                       ") do not fit in the global extent " +
                       std::to_string(params.global_extents[d]));
    }
    lo[d] = params.offsets[d];
    gext[d] = params.global_extents[d];
    lext[d] = x.extent(d);
  }
  if (!x.span_is_contiguous() || !y.span_is_contiguous()) {
    throw ValueError(op + "x and y must be contiguous Views");
  }
  using XFlat =
      Kokkos::View<const T*, typename XV::memory_space, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
  using YFlat =
      Kokkos::View<T*, typename YV::memory_space, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
  const XFlat xf(x.data(), x.size());
  const YFlat yf(y.data(), y.size());
  const RandomKey key = random_key(params.seed, params.stream, params.step);
  const auto rate = static_cast<float>(params.rate);
  const T keep_prob = T(1) - static_cast<T>(params.rate);
  Kokkos::parallel_for(
      "kdist::ops::dropout_block", detail::range<YV>(x.size()),
      KOKKOS_LAMBDA(const std::int64_t f) {
        std::uint64_t rem = static_cast<std::uint64_t>(f);
        std::uint64_t index = 0;
        std::uint64_t mult = 1;
        for (std::size_t k = R; k-- > 0;) {
          const std::uint64_t c = rem % lext[k];
          rem /= lext[k];
          index += (lo[k] + c) * mult;
          mult *= gext[k];
        }
        yf(f) = kdist::dropout_keep(key, index, rate) ? xf(f) / keep_prob : T(0);
      });
}

}  // namespace kdist::ops
