#pragma once
//! \file ops/upsampling.hpp
//! Local kernels of Keras' UpSampling1D/2D/3D with interpolation "nearest" (channels_last) over
//! S = 1, 2 or 3 spatial axes, on rank S + 2 LayoutRight Views: output position i along an axis
//! repeats input position floor(i / size). A spatially sharded layer holds a block of the outputs
//! and the input positions it reads (its own block and perhaps a neighbour's edge), so both Views
//! carry where they start in the whole field (UpsamplingWindow::input_begin, output_begin). The
//! backward pass gathers: each input position sums the outputs that repeat it (no atomics).

#include <Kokkos_Core.hpp>
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

#include <kdist/core/error.hpp>
#include <kdist/ops/detail/images.hpp>
#include <kdist/ops/detail/views.hpp>

namespace kdist::ops {

//! The repeat factor per axis, and where the Views given start in the whole field.
template <std::size_t S>
struct UpsamplingWindow {
  std::array<std::size_t, S> size{};
  std::array<std::int64_t, S> input_begin{};   //!< the field position of x's first position
  std::array<std::int64_t, S> output_begin{};  //!< the field position of y's first position
};

namespace detail {

template <std::size_t S>
struct UpsamplingShape {
  std::int64_t n = 0, c = 0;
  Kokkos::Array<std::int64_t, S> in{}, out{}, size{}, first{};  // first: y's start - x's * size
  std::int64_t count(const Kokkos::Array<std::int64_t, S>& e) const {
    std::int64_t p = n * c;
    for (std::size_t a = 0; a < S; ++a) p *= e[a];
    return p;
  }
};

template <std::size_t S, class XV, class YV>
UpsamplingShape<S> upsampling_shape(const char* op, const XV& x, const YV& y,
                                    const UpsamplingWindow<S>& w) {
  const std::string who = std::string("kdist::ops::") + op + ": ";
  if (x.extent(0) != y.extent(0) || x.extent(S + 1) != y.extent(S + 1)) {
    throw ValueError(who + "x " + extents_of(x) + " and y " + extents_of(y) +
                     " differ in examples or channels");
  }
  UpsamplingShape<S> s;
  s.n = static_cast<std::int64_t>(x.extent(0));
  s.c = static_cast<std::int64_t>(x.extent(S + 1));
  for (std::size_t a = 0; a < S; ++a) {
    if (w.size[a] == 0) throw ValueError(who + "size must be >= 1 on every spatial axis");
    s.in[a] = static_cast<std::int64_t>(x.extent(a + 1));
    s.out[a] = static_cast<std::int64_t>(y.extent(a + 1));
    s.size[a] = static_cast<std::int64_t>(w.size[a]);
    s.first[a] = w.output_begin[a] - w.input_begin[a] * s.size[a];
    // y's positions read x's [floor(output_begin / size), floor((output_begin + out - 1) / size)]
    const bool inside =
        s.out[a] == 0 || (s.first[a] >= 0 && (s.first[a] + s.out[a] - 1) / s.size[a] < s.in[a]);
    if (!inside) {
      throw ValueError(who + "y " + extents_of(y) + " from field position " +
                       std::to_string(w.output_begin[a]) + " on axis " + std::to_string(a + 1) +
                       " reads positions x " + extents_of(x) + " from field position " +
                       std::to_string(w.input_begin[a]) + " does not hold");
    }
  }
  return s;
}

}  // namespace detail

//! y[n, i, c] = x[n, (output_begin + i) / size - input_begin, c] per axis.
template <class XV, class YV, std::size_t S = detail::spatial_axes_of<XV>()>
void upsample_nearest(const XV& x, const YV& y, const UpsamplingWindow<S>& window) {
  constexpr int R = static_cast<int>(S) + 2;
  static_assert(detail::check_image_view<XV, R>() && detail::check_image_view<YV, R>() &&
                detail::check_same_scalar<XV, YV>());
  const auto s = detail::upsampling_shape<S>("upsample_nearest", x, y, window);
  Kokkos::parallel_for(
      "kdist::ops::upsample_nearest", detail::range<YV>(s.count(s.out)),
      KOKKOS_LAMBDA(const std::int64_t i) {
        std::int64_t b, ch, o[S], p[S];
        detail::split_index<S>(i, s.c, s.out, b, o, ch);
        for (std::size_t a = 0; a < S; ++a) p[a] = (s.first[a] + o[a]) / s.size[a];
        detail::image_at<S>(y, b, o, ch) = detail::image_at<S>(x, b, p, ch);
      });
}

//! dx = the gradient of upsample_nearest(x, y, window) given dy: each position of dx sums the
//! outputs of dy that repeat it.
template <class DYV, class DXV, std::size_t S = detail::spatial_axes_of<DXV>()>
void upsample_nearest_backward(const DYV& dy, const DXV& dx, const UpsamplingWindow<S>& window) {
  constexpr int R = static_cast<int>(S) + 2;
  static_assert(detail::check_image_view<DYV, R>() && detail::check_image_view<DXV, R>() &&
                detail::check_same_scalar<DYV, DXV>());
  const auto s = detail::upsampling_shape<S>("upsample_nearest_backward", dx, dy, window);
  using T = detail::scalar_t<DXV>;
  Kokkos::parallel_for(
      "kdist::ops::upsample_nearest_backward", detail::range<DXV>(s.count(s.in)),
      KOKKOS_LAMBDA(const std::int64_t i) {
        std::int64_t b, ch, p[S], lo[S], hi[S];
        detail::split_index<S>(i, s.c, s.in, b, p, ch);
        T g = 0;
        bool any = true;
        for (std::size_t a = 0; a < S; ++a) {  // outputs o with (first + o) / size == p
          lo[a] = detail::max_of(p[a] * s.size[a] - s.first[a], 0);
          hi[a] = detail::min_of((p[a] + 1) * s.size[a] - s.first[a], s.out[a]);
          any = any && lo[a] < hi[a];
        }
        if (any) {
          std::int64_t o[S];
          for (std::size_t a = 0; a < S; ++a) o[a] = lo[a];
          do {
            g += detail::image_at<S>(dy, b, o, ch);
          } while (detail::next_in_box<S>(o, lo, hi));
        }
        detail::image_at<S>(dx, b, p, ch) = g;
      });
}

}  // namespace kdist::ops
