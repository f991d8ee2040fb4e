#pragma once
//! \file ops/conv2d.hpp
//! The local kernels of Keras' Conv2D with strides 1 and dilation 1, under the names the layer
//! used first: kdist::ops::conv (kdist/ops/convolution.hpp) on rank-4 NHWC Views.
//! - forward `y[n, oh, ow, co] = sum_{i, j, c} x[n, oh + i, ow + j, c] * k[i, j, c, co]`,
//! - kernel gradient `dk[i, j, c, co] = sum_{n, oh, ow} x[n, oh + i, ow + j, c] * dy[n, oh, ow, co]`,
//! - input gradient `dx[n, h, w, c] = sum_{i, j, co} dy[n, h - i, w - j, co] * k[i, j, c, co]`.

#include <array>
#include <cstddef>
#include <kdist/ops/convolution.hpp>

namespace kdist::ops {

//! conv_scratch_extents for rank-4 images and a (kh, kw, c, co) kernel, strides 1.
template <class XV, class KV>
std::array<std::size_t, 2> conv2d_scratch_extents(const XV& x, const KV& kernel) {
  static_assert(detail::check_conv_view<XV, 4>());
  return conv_scratch_extents(x, kernel, ConvWindow<2>{});
}

//! `y = conv2d(x, kernel)`: x (n, h, w, c), kernel (kh, kw, c, co), y (n, h - kh + 1, w - kw + 1,
//! co), overwritten; `scratch` and errors as kdist::ops::conv.
template <class XV, class KV, class YV, class Backend = AutoBackend, class SV = std::nullptr_t>
void conv2d(const XV& x, const KV& kernel, const YV& y, Backend b = {},
            const SV& scratch = nullptr) {
  detail::conv_forward("conv2d", x, kernel, y, ConvWindow<2>{}, b, scratch);
}

//! The kernel gradient of conv2d, shaped like the kernel (kh, kw, c, co), overwritten.
template <class XV, class DYV, class DKV, class Backend = AutoBackend, class SV = std::nullptr_t>
void conv2d_backward_kernel(const XV& x, const DYV& dy, const DKV& dkernel, Backend b = {},
                            const SV& scratch = nullptr) {
  detail::conv_kernel_gradient("conv2d_backward_kernel", x, dy, dkernel, ConvWindow<2>{}, b,
                               scratch);
}

//! The input gradient of conv2d, shaped like x, overwritten.
template <class DYV, class KV, class DXV, class Backend = AutoBackend, class SV = std::nullptr_t>
void conv2d_backward_input(const DYV& dy, const KV& kernel, const DXV& dx, Backend b = {},
                           const SV& scratch = nullptr) {
  detail::conv_input_gradient("conv2d_backward_input", dy, kernel, dx, ConvWindow<2>{}, b, scratch);
}

}  // namespace kdist::ops
