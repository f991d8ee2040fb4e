#pragma once
//! \file ops/detail/images.hpp
//! What the kernels over images with S spatial axes share (convolutions, pooling, upsampling):
//! rank S + 2 LayoutRight Views (batch, spatial..., channels), element access by a position array,
//! an odometer over a box of positions, and extents for error messages.

#include <Kokkos_Core.hpp>
#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>

#include <kdist/ops/detail/views.hpp>

namespace kdist::ops::detail {

//! Checks (at compile time) that `V` is a rank-R LayoutRight View of float or double.
template <class V, int R>
constexpr bool check_image_view() {
  static_assert(Kokkos::is_view<V>::value, "kdist::ops: expected a Kokkos::View");
  static_assert(static_cast<int>(V::rank) == R,
                "kdist::ops: expected images of rank S + 2 for S spatial axes: (batch, spatial..., "
                "channels)");
  static_assert(std::is_same_v<typename V::array_layout, Kokkos::LayoutRight>,
                "kdist::ops: expected Kokkos::LayoutRight images (channels last, as Keras)");
  static_assert(std::is_same_v<scalar_t<V>, float> || std::is_same_v<scalar_t<V>, double>,
                "kdist::ops: expected images of float or double");
  return true;
}

//! The number of spatial axes of images `XV`: rank 3, 4 or 5 (1, 2 or 3 spatial axes).
template <class XV>
constexpr std::size_t spatial_axes_of() {
  static_assert(Kokkos::is_view<XV>::value && XV::rank >= 3 && XV::rank <= 5,
                "kdist::ops: images are rank 3, 4 or 5 Views (1, 2 or 3 spatial axes)");
  return XV::rank - 2;
}

//! "(2, 7, 5, 3)": a View's extents.
template <class V>
std::string extents_of(const V& v) {
  std::string s = "(";
  for (std::size_t d = 0; d < V::rank; ++d) s += (d ? ", " : "") + std::to_string(v.extent(d));
  return s + ")";
}

//! Element (b, p..., ch) of a rank S + 2 View.
template <std::size_t S, class V>
KOKKOS_INLINE_FUNCTION auto& image_at(const V& v, std::int64_t b, const std::int64_t* p,
                                      std::int64_t ch) {
  if constexpr (S == 1) {
    return v(b, p[0], ch);
  } else if constexpr (S == 2) {
    return v(b, p[0], p[1], ch);
  } else {
    return v(b, p[0], p[1], p[2], ch);
  }
}

//! min and max on the device (Kokkos 3.4 has neither).
KOKKOS_INLINE_FUNCTION std::int64_t min_of(std::int64_t a, std::int64_t b) {
  return a < b ? a : b;
}
KOKKOS_INLINE_FUNCTION std::int64_t max_of(std::int64_t a, std::int64_t b) {
  return a < b ? b : a;
}

//! The next position of the box [lo, hi) after `at`, last axis fastest; false (and `at` back at
//! `lo`) after the last one.
template <std::size_t S>
KOKKOS_INLINE_FUNCTION bool next_in_box(std::int64_t* at, const std::int64_t* lo,
                                        const std::int64_t* hi) {
  for (std::size_t a = S; a-- > 0;) {
    if (++at[a] < hi[a]) return true;
    at[a] = lo[a];
  }
  return false;
}

//! Splits a flat index of (batch, positions..., channels) in `extents` (the spatial ones) into
//! the example, the position and the channel.
template <std::size_t S, class Extents>
KOKKOS_INLINE_FUNCTION void split_index(std::int64_t i, std::int64_t channels,
                                        const Extents& extents, std::int64_t& b, std::int64_t* p,
                                        std::int64_t& ch) {
  ch = i % channels;
  i /= channels;
  for (std::size_t a = S; a-- > 0;) {
    p[a] = i % extents[a];
    i /= extents[a];
  }
  b = i;
}

}  // namespace kdist::ops::detail
