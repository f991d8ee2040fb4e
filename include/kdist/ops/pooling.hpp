#pragma once
//! \file ops/pooling.hpp
//! Local kernels of Keras' pooling layers over S = 1, 2 or 3 spatial axes (MaxPooling1D/2D/3D,
//! AveragePooling1D/2D/3D; channels_last) on rank S + 2 LayoutRight Views (batch, spatial...,
//! channels): `y[n, o, c]` is the maximum or the mean of `x[n, o * stride + t, c]` over the taps t
//! of the pool that lie inside the input. Padding is the caller's, as for the convolutions
//! (kdist/ops/convolution.hpp): these pool the View given ("valid" on it), and PoolWindow says which
//! of its positions are padding - the maximum skips them and the mean does not count them, as
//! Keras' "same" pooling does (TensorFlow's and JAX's). So a spatially sharded layer passes its block
//! with its neighbours' halos and marks the positions beyond the field.
//!
//! The backward passes gather: one thread per element of dx sums the windows that contain it (no
//! atomics, the same result on every run). A maximum's gradient goes to the first maximal position
//! of each window (taps in row-major order), recomputed from x.

#include <Kokkos_Core.hpp>
#include <array>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>

#include <kdist/core/error.hpp>
#include <kdist/ops/detail/images.hpp>
#include <kdist/ops/detail/views.hpp>

namespace kdist::ops {

enum class PoolingKind { max, average };

//! How a pooling window moves over S spatial axes, and which positions of the given View are
//! padding.
template <std::size_t S>
struct PoolWindow {
  std::array<std::size_t, S> pool_size = filled<std::size_t>(1);
  std::array<std::size_t, S> strides = filled<std::size_t>(1);
  //! Per axis, the positions [inside_begin, inside_end) of the View given hold the input; those
  //! outside are padding (clamped to the View: by default nothing is padding).
  std::array<std::int64_t, S> inside_begin = filled<std::int64_t>(0);
  std::array<std::int64_t, S> inside_end =
      filled<std::int64_t>(std::numeric_limits<std::int64_t>::max());

  template <class V>
  static constexpr std::array<V, S> filled(V v) {
    std::array<V, S> a{};
    for (auto& e : a) e = v;
    return a;
  }
  //! The output extent of an axis of `extent` positions: 0 when the pool does not fit.
  constexpr std::size_t output_extent(std::size_t axis, std::size_t extent) const {
    return extent < pool_size[axis] ? 0 : (extent - pool_size[axis]) / strides[axis] + 1;
  }
};

namespace detail {

//! The sizes of one pooling over S spatial axes, checked.
template <std::size_t S>
struct PoolShape {
  std::int64_t n = 0, c = 0;
  // Kokkos::Array, not std::array: the kernels capture these on the device
  Kokkos::Array<std::int64_t, S> in{}, k{}, out{}, stride{}, lo{}, hi{};
  std::int64_t outputs() const {
    std::int64_t p = n * c;
    for (std::size_t a = 0; a < S; ++a) p *= out[a];
    return p;
  }
  std::int64_t inputs() const {
    std::int64_t p = n * c;
    for (std::size_t a = 0; a < S; ++a) p *= in[a];
    return p;
  }
};

template <std::size_t S, class XV, class YV>
PoolShape<S> pool_shape(const char* op, const XV& x, const YV& y, const char* y_name,
                        const PoolWindow<S>& w) {
  const std::string who = std::string("kdist::ops::") + op + ": ";
  PoolShape<S> s;
  s.n = static_cast<std::int64_t>(x.extent(0));
  s.c = static_cast<std::int64_t>(x.extent(S + 1));
  bool fits = y.extent(0) == x.extent(0) && y.extent(S + 1) == x.extent(S + 1);
  std::string want = "(" + std::to_string(x.extent(0));
  for (std::size_t a = 0; a < S; ++a) {
    if (w.pool_size[a] == 0 || w.strides[a] == 0) {
      throw ValueError(who + "pool_size and strides must be >= 1 on every spatial axis");
    }
    s.in[a] = static_cast<std::int64_t>(x.extent(a + 1));
    s.k[a] = static_cast<std::int64_t>(w.pool_size[a]);
    s.stride[a] = static_cast<std::int64_t>(w.strides[a]);
    s.out[a] = static_cast<std::int64_t>(w.output_extent(a, x.extent(a + 1)));
    s.lo[a] = detail::max_of(0, detail::min_of(w.inside_begin[a], s.in[a]));
    s.hi[a] = detail::max_of(s.lo[a], detail::min_of(w.inside_end[a], s.in[a]));
    if (s.out[a] == 0) {
      throw ValueError(who + "the pool " + std::to_string(w.pool_size[a]) + " does not fit axis " +
                       std::to_string(a + 1) + " of images " + extents_of(x) +
                       " (padding 'valid' on the View given)");
    }
    fits = fits && y.extent(a + 1) == static_cast<std::size_t>(s.out[a]);
    want += ", " + std::to_string(s.out[a]);
  }
  want += ", " + std::to_string(x.extent(S + 1)) + ")";
  if (!fits) {
    throw ValueError(who + y_name + " is " + extents_of(y) + ", expected " + want + " for x " +
                     extents_of(x));
  }
  return s;
}

//! The taps of window `o` that lie inside the input: [lo, hi) per axis, in the View's positions.
template <std::size_t S>
KOKKOS_INLINE_FUNCTION std::int64_t window_box(const PoolShape<S>& s, const std::int64_t* o,
                                               std::int64_t* lo, std::int64_t* hi) {
  std::int64_t count = 1;
  for (std::size_t a = 0; a < S; ++a) {
    const std::int64_t first = o[a] * s.stride[a];
    lo[a] = detail::max_of(first, s.lo[a]);
    hi[a] = detail::max_of(lo[a], detail::min_of(first + s.k[a], s.hi[a]));
    count *= hi[a] - lo[a];
  }
  return count;
}

//! The first position of the maximum of x over window `o` (count > 0 taps in [lo, hi)).
template <std::size_t S, class XV>
KOKKOS_INLINE_FUNCTION void window_argmax(const XV& x, std::int64_t b, std::int64_t ch,
                                          const std::int64_t* lo, const std::int64_t* hi,
                                          std::int64_t* best) {
  std::int64_t at[S];
  for (std::size_t a = 0; a < S; ++a) at[a] = best[a] = lo[a];
  auto m = image_at<S>(x, b, at, ch);
  while (next_in_box<S>(at, lo, hi)) {
    const auto v = image_at<S>(x, b, at, ch);
    if (v > m) {
      m = v;
      for (std::size_t a = 0; a < S; ++a) best[a] = at[a];
    }
  }
}

//! The windows that contain position p along each axis: [lo, hi) of output positions.
template <std::size_t S>
KOKKOS_INLINE_FUNCTION bool windows_of(const PoolShape<S>& s, const std::int64_t* p,
                                       std::int64_t* lo, std::int64_t* hi) {
  for (std::size_t a = 0; a < S; ++a) {
    if (p[a] < s.lo[a] || p[a] >= s.hi[a]) return false;  // padding: no gradient
    // o * stride <= p < o * stride + k
    const std::int64_t after = p[a] - s.k[a] + 1;
    lo[a] = after <= 0 ? 0 : (after + s.stride[a] - 1) / s.stride[a];
    hi[a] = detail::min_of(p[a] / s.stride[a] + 1, s.out[a]);
    if (lo[a] >= hi[a]) return false;
  }
  return true;
}

}  // namespace detail

//! y = the pooling of x (kind max or average) with `window`; y is (n, out..., c).
template <class XV, class YV, std::size_t S = detail::spatial_axes_of<XV>()>
void pool(PoolingKind kind, const XV& x, const YV& y, const PoolWindow<S>& window) {
  constexpr int R = static_cast<int>(S) + 2;
  static_assert(detail::check_image_view<XV, R>() && detail::check_image_view<YV, R>() &&
                detail::check_same_scalar<XV, YV>());
  const auto s = detail::pool_shape<S>("pool", x, y, "y", window);
  using T = detail::scalar_t<YV>;
  const bool max = kind == PoolingKind::max;
  Kokkos::parallel_for(
      "kdist::ops::pool", detail::range<XV>(s.outputs()), KOKKOS_LAMBDA(const std::int64_t i) {
        std::int64_t b, ch, o[S], lo[S], hi[S];
        detail::split_index<S>(i, s.c, s.out, b, o, ch);
        const std::int64_t count = detail::window_box<S>(s, o, lo, hi);
        T v = 0;
        if (count > 0 && max) {
          std::int64_t best[S];
          detail::window_argmax<S>(x, b, ch, lo, hi, best);
          v = detail::image_at<S>(x, b, best, ch);
        } else if (count > 0) {
          std::int64_t at[S];
          for (std::size_t a = 0; a < S; ++a) at[a] = lo[a];
          do {
            v += detail::image_at<S>(x, b, at, ch);
          } while (detail::next_in_box<S>(at, lo, hi));
          v /= static_cast<T>(count);
        }
        detail::image_at<S>(y, b, o, ch) = v;
      });
}

//! dx = the gradient of pool(kind, x, y, window) given dy; dx is shaped like x (which a maximum's
//! gradient reads; an average's does not). Positions that are padding get 0.
template <class XV, class DYV, class DXV, std::size_t S = detail::spatial_axes_of<XV>()>
void pool_backward(PoolingKind kind, const XV& x, const DYV& dy, const DXV& dx,
                   const PoolWindow<S>& window) {
  constexpr int R = static_cast<int>(S) + 2;
  static_assert(detail::check_image_view<XV, R>() && detail::check_image_view<DYV, R>() &&
                detail::check_image_view<DXV, R>() && detail::check_same_scalar<DYV, DXV>());
  const auto s = detail::pool_shape<S>("pool_backward", x, dy, "dy", window);
  bool same = true;
  for (std::size_t d = 0; d < XV::rank; ++d) same = same && dx.extent(d) == x.extent(d);
  if (!same) {
    throw ValueError("kdist::ops::pool_backward: dx is " + detail::extents_of(dx) +
                     ", expected x's extents " + detail::extents_of(x));
  }
  using T = detail::scalar_t<DXV>;
  const bool max = kind == PoolingKind::max;
  Kokkos::parallel_for(
      "kdist::ops::pool_backward", detail::range<DXV>(s.inputs()),
      KOKKOS_LAMBDA(const std::int64_t i) {
        std::int64_t b, ch, p[S], wlo[S], whi[S];
        detail::split_index<S>(i, s.c, s.in, b, p, ch);
        T g = 0;
        if (detail::windows_of<S>(s, p, wlo, whi)) {
          std::int64_t o[S];
          for (std::size_t a = 0; a < S; ++a) o[a] = wlo[a];
          do {
            std::int64_t lo[S], hi[S];
            const std::int64_t count = detail::window_box<S>(s, o, lo, hi);
            if (max) {
              std::int64_t best[S];
              detail::window_argmax<S>(x, b, ch, lo, hi, best);
              bool here = true;
              for (std::size_t a = 0; a < S; ++a) here = here && best[a] == p[a];
              if (here) g += detail::image_at<S>(dy, b, o, ch);
            } else {
              g += detail::image_at<S>(dy, b, o, ch) / static_cast<T>(count);
            }
          } while (detail::next_in_box<S>(o, wlo, whi));
        }
        detail::image_at<S>(dx, b, p, ch) = g;
      });
}

}  // namespace kdist::ops
