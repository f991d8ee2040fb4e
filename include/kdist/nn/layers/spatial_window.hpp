#pragma once
//! \file nn/layers/spatial_window.hpp
//! Where a window (a convolution's kernel, a pooling window) reads along one spatial axis: Keras'
//! output extents for padding "valid" and "same" (and kdist's "periodic"), the padding before the
//! first position, and the input positions a block of outputs reads - what a process holding that
//! block of a spatially sharded output must have of the input (its block and the halos of its
//! neighbours, kdist/core/halo_plan.hpp).

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include <kdist/core/detail/shard_math.hpp>
#include <kdist/core/halo_plan.hpp>

namespace kdist::layers {

//! Keras' `padding` of a convolution or a pooling window, and kdist's periodic one.
enum class Padding {
  valid,     //!< no padding: windows lie inside the input
  same,      //!< zeros around the input so that the output has ceil(extent / stride) positions
  periodic,  //!< as "same", with the positions of the other end in place of zeros (a periodic
             //!< domain; PyTorch's padding_mode="circular"); kdist's, not Keras'
};

inline const char* padding_name(Padding p) {
  return p == Padding::valid ? "valid" : p == Padding::same ? "same" : "periodic";
}

//! One spatial axis of a window: input `extent`, window `size`, `stride`, `dilation`, `padding`.
struct WindowAxis {
  std::size_t extent = 0;
  std::size_t size = 1;
  std::size_t stride = 1;
  std::size_t dilation = 1;
  Padding padding = Padding::valid;

  //! The positions one window covers: (size - 1) * dilation + 1.
  std::size_t span() const { return (size - 1) * dilation + 1; }
  //! Keras' output extent: (extent - span) / stride + 1 for "valid" (0 when the window does not
  //! fit), ceil(extent / stride) otherwise.
  std::size_t output_extent() const {
    if (padding == Padding::valid) return extent < span() ? 0 : (extent - span()) / stride + 1;
    return extent / stride + (extent % stride != 0 ? 1 : 0);
  }
  //! Padding before the first position: half the total, rounded down (TensorFlow's and JAX's
  //! "SAME", which Keras uses).
  std::int64_t pad_before() const {
    if (padding == Padding::valid || output_extent() == 0) return 0;
    const auto need = static_cast<std::int64_t>((output_extent() - 1) * stride + span());
    return std::max<std::int64_t>(need - static_cast<std::int64_t>(extent), 0) / 2;
  }
  //! The input positions outputs [out.offset, out.offset + out.extent) read (outside [0, extent)
  //! where they read padding); empty for no outputs.
  HaloRange input_range(Block out) const {
    if (out.extent == 0) return {0, 0};
    const auto first = static_cast<std::int64_t>(out.offset * stride) - pad_before();
    const auto last = static_cast<std::int64_t>((out.offset + out.extent - 1) * stride) -
                      pad_before() + static_cast<std::int64_t>(span());
    return {first, last};
  }
  Boundary boundary() const {
    return padding == Padding::periodic ? Boundary::periodic : Boundary::zeros;
  }
};

//! One spatial axis of a transposed convolution (Keras' Conv2DTranspose; padding "valid" or
//! "same"): input position i spreads its kernel over outputs i * stride + t * dilation - before.
//! Output extent: extent * stride, plus max(span - stride, 0) for "valid"; "same" crops
//! max(span - stride, 0) // 2 before (TensorFlow's and JAX's split, as the gradient of a "same"
//! convolution).
struct TransposedWindowAxis {
  std::size_t extent = 0;
  std::size_t size = 1;
  std::size_t stride = 1;
  std::size_t dilation = 1;
  Padding padding = Padding::valid;

  std::size_t span() const { return (size - 1) * dilation + 1; }
  std::size_t overhang() const { return span() > stride ? span() - stride : 0; }
  std::size_t output_extent() const {
    return extent * stride + (padding == Padding::valid ? overhang() : 0);
  }
  std::int64_t pad_before() const {
    return padding == Padding::valid ? 0 : static_cast<std::int64_t>(overhang() / 2);
  }
  //! The inputs whose kernels reach outputs [out.offset, out.offset + out.extent) (within the
  //! input: beyond it there is nothing to spread).
  HaloRange input_range(Block out) const {
    if (out.extent == 0) return {0, 0};
    const auto s = static_cast<std::int64_t>(stride);
    const auto a = static_cast<std::int64_t>(out.offset) + pad_before();
    const auto b = a + static_cast<std::int64_t>(out.extent);  // outputs [a, b) before the crop
    const std::int64_t reach = static_cast<std::int64_t>(span()) - 1;
    // i * s <= p and p <= i * s + reach for some p in [a, b)
    const std::int64_t first =
        std::max<std::int64_t>(a - reach <= 0 ? 0 : (a - reach + s - 1) / s, 0);
    const std::int64_t last =
        std::min<std::int64_t>((b - 1) / s + 1, static_cast<std::int64_t>(extent));
    return first < last ? HaloRange{first, last} : HaloRange{first, first};
  }
  Boundary boundary() const { return Boundary::zeros; }
};

//! One spatial axis of a nearest-neighbour upsampling by `size` (Keras' UpSampling2D): output
//! position i repeats input position i / size. The same questions as a WindowAxis answers, so a
//! sharded upsampling exchanges halos the same way (a block of outputs may start inside a
//! neighbour's last input position when the blocks do not line up).
struct UpsamplingAxis {
  std::size_t extent = 0;
  std::size_t size = 1;

  std::size_t output_extent() const { return extent * size; }
  HaloRange input_range(Block out) const {
    if (out.extent == 0) return {0, 0};
    const auto first = static_cast<std::int64_t>(out.offset / size);
    const auto last = static_cast<std::int64_t>((out.offset + out.extent - 1) / size) + 1;
    return {first, last};
  }
  Boundary boundary() const { return Boundary::zeros; }
};

}  // namespace kdist::layers
