#pragma once
//! \file ops/shifted_copy.hpp
//! `kdist::ops::shifted_copy(src, dst, offsets)`: dst[n, p..., c] = src[n, p + offsets..., c] where
//! that lies inside src, else 0 - a window of a larger image (a crop), or a block placed in a
//! larger zero image (negative offsets), over S = 1, 2 or 3 spatial axes of rank S + 2
//! LayoutRight Views. A transposed convolution crops its block of outputs out of what its inputs
//! spread over, and places its gradient back the same way.

#include <Kokkos_Core.hpp>
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

#include <kdist/core/error.hpp>
#include <kdist/ops/detail/images.hpp>
#include <kdist/ops/detail/views.hpp>

namespace kdist::ops {

template <class SV, class DV, std::size_t S = detail::spatial_axes_of<DV>()>
void shifted_copy(const SV& src, const DV& dst, const std::array<std::int64_t, S>& offsets) {
  constexpr int R = static_cast<int>(S) + 2;
  static_assert(detail::check_image_view<SV, R>() && detail::check_image_view<DV, R>() &&
                detail::check_same_scalar<SV, DV>());
  if (src.extent(0) != dst.extent(0) || src.extent(S + 1) != dst.extent(S + 1)) {
    throw ValueError("kdist::ops::shifted_copy: src " + detail::extents_of(src) + " and dst " +
                     detail::extents_of(dst) + " differ in examples or channels");
  }
  Kokkos::Array<std::int64_t, S> off{}, in{}, out{};
  std::int64_t count = static_cast<std::int64_t>(dst.extent(0) * dst.extent(S + 1));
  for (std::size_t a = 0; a < S; ++a) {
    off[a] = offsets[a];
    in[a] = static_cast<std::int64_t>(src.extent(a + 1));
    out[a] = static_cast<std::int64_t>(dst.extent(a + 1));
    count *= out[a];
  }
  const auto c = static_cast<std::int64_t>(dst.extent(S + 1));
  using T = detail::scalar_t<DV>;
  Kokkos::parallel_for(
      "kdist::ops::shifted_copy", detail::range<DV>(static_cast<std::size_t>(count)),
      KOKKOS_LAMBDA(const std::int64_t i) {
        std::int64_t b, ch, p[S], q[S];
        detail::split_index<S>(i, c, out, b, p, ch);
        bool inside = true;
        for (std::size_t a = 0; a < S; ++a) {
          q[a] = p[a] + off[a];
          inside = inside && q[a] >= 0 && q[a] < in[a];
        }
        detail::image_at<S>(dst, b, p, ch) = inside ? detail::image_at<S>(src, b, q, ch) : T(0);
      });
}

}  // namespace kdist::ops
