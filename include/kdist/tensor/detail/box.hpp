#pragma once
// Hyper-rectangles of a global index space and copies between row-major buffers: the geometry
// behind distribute_tensor, full_tensor and redistribute.

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstring>

namespace kdist::detail {

template <std::size_t R>
struct Box {
  std::array<std::size_t, R> lo{};   // global offset
  std::array<std::size_t, R> ext{};  // extent per dimension

  std::size_t volume() const {
    std::size_t v = 1;
    for (auto e : ext) v *= e;
    return v;
  }
};

template <std::size_t R>
Box<R> intersect(const Box<R>& a, const Box<R>& b) {
  Box<R> out;
  for (std::size_t d = 0; d < R; ++d) {
    const std::size_t lo = std::max(a.lo[d], b.lo[d]);
    const std::size_t hi = std::min(a.lo[d] + a.ext[d], b.lo[d] + b.ext[d]);
    out.lo[d] = lo;
    out.ext[d] = hi > lo ? hi - lo : 0;
  }
  return out;
}

//! Copies `box` (global coordinates) between two row-major arrays that hold the boxes `src_box`
//! and `dst_box` of the global index space; `box` must lie in both. Runs of the last dimension
//! are copied with memcpy.
template <std::size_t R, class T>
void copy_box(const T* src, const Box<R>& src_box, T* dst, const Box<R>& dst_box,
              const Box<R>& box) {
  if (box.volume() == 0) return;
  if constexpr (R == 0) {
    *dst = *src;
    return;
  } else {
    std::array<std::size_t, R> src_stride{}, dst_stride{};
    src_stride[R - 1] = dst_stride[R - 1] = 1;
    for (std::size_t d = R - 1; d-- > 0;) {
      src_stride[d] = src_stride[d + 1] * src_box.ext[d + 1];
      dst_stride[d] = dst_stride[d + 1] * dst_box.ext[d + 1];
    }
    std::array<std::size_t, R> i{};  // odometer over all but the last dimension
    const std::size_t run = box.ext[R - 1];
    while (true) {
      std::size_t s = 0, t = 0;
      for (std::size_t d = 0; d < R; ++d) {
        const std::size_t g = box.lo[d] + (d + 1 < R ? i[d] : 0);
        s += (g - src_box.lo[d]) * src_stride[d];
        t += (g - dst_box.lo[d]) * dst_stride[d];
      }
      std::memcpy(dst + t, src + s, run * sizeof(T));
      std::size_t d = R - 1;
      while (d-- > 0) {
        if (++i[d] < box.ext[d]) break;
        i[d] = 0;
      }
      if (d == static_cast<std::size_t>(-1)) break;
    }
  }
}

}  // namespace kdist::detail
