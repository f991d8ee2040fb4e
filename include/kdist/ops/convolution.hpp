#pragma once
//! \file ops/convolution.hpp
//! Local kernels of Keras' convolutions over S = 1, 2 or 3 spatial dimensions (Conv1D, Conv2D,
//! Conv3D; channels_last), with strides and dilation, on rank S + 2 LayoutRight Views: images
//! (batch, spatial..., channels), kernels (k_0, ..., k_{S-1}, in_channels, out_channels). The
//! three products of a convolution layer, with p = (o * stride + t * dilation) per axis:
//! - forward `y[n, o, co] = sum_{t, c} x[n, p, c] * k[t, c, co]`,
//! - kernel gradient `dk[t, c, co] = sum_{n, o} x[n, p, c] * dy[n, o, co]`,
//! - input gradient `dx[n, p, c] = sum_{o, t, co : p = o * stride + t * dilation} dy[n, o, co]
//!   k[t, c, co]`.
//! Padding is the caller's: these take the padded input (padding "valid" on what they are given),
//! so that a spatially sharded layer passes its block with the halos its neighbours sent
//! (kdist/nn/layers/conv.hpp). Each op is an im2col (the (n * prod(o), prod(k) * c) matrix of input
//! patches, a Kokkos kernel in the Views' memory space) and one kdist::ops::matmul: OpenBLAS or
//! Eigen on the host, cuBLAS on CUDA devices. The kernel in LayoutRight is already the (prod(k) * c,
//! co) matrix, and y the (n * prod(o), co) one. The input gradient gathers back (col2im over dx's
//! elements), so no atomics.

#include <Kokkos_Core.hpp>
#include <array>
#include <cstddef>
#include <cstdint>
#include <kdist/core/error.hpp>
#include <kdist/ops/backend.hpp>
#include <kdist/ops/detail/images.hpp>
#include <kdist/ops/detail/views.hpp>
#include <kdist/ops/matmul.hpp>
#include <string>
#include <type_traits>

namespace kdist::ops {

//! How a convolution's window moves over S spatial axes: Keras' `strides` and `dilation_rate`
//! (each >= 1; Keras refuses strides > 1 together with dilation > 1 in a layer, these ops do not).
template <std::size_t S>
struct ConvWindow {
  std::array<std::size_t, S> strides = ones();
  std::array<std::size_t, S> dilation_rate = ones();

  static constexpr std::array<std::size_t, S> ones() {
    std::array<std::size_t, S> a{};
    for (auto& v : a) v = 1;
    return a;
  }
  //! The output extent of an axis of `extent` positions for a kernel of `k`: 0 when it does not fit.
  constexpr std::size_t output_extent(std::size_t axis, std::size_t extent, std::size_t k) const {
    const std::size_t span = (k - 1) * dilation_rate[axis] + 1;  // the dilated kernel
    return k == 0 || extent < span ? 0 : (extent - span) / strides[axis] + 1;
  }
};

namespace detail {

//! Checks (at compile time) that `V` is a rank-R LayoutRight View of float or double.
template <class V, int R>
constexpr bool check_conv_view() {
  static_assert(Kokkos::is_view<V>::value, "kdist::ops::conv: expected a Kokkos::View");
  static_assert(static_cast<int>(V::rank) == R,
                "kdist::ops::conv: expected Views of rank S + 2 for S spatial axes: inputs and "
                "outputs (batch, spatial..., channels), kernels (spatial..., in_channels, "
                "out_channels)");
  static_assert(std::is_same_v<typename V::array_layout, Kokkos::LayoutRight>,
                "kdist::ops::conv: expected Kokkos::LayoutRight Views (channels last, as Keras)");
  static_assert(std::is_same_v<scalar_t<V>, float> || std::is_same_v<scalar_t<V>, double>,
                "kdist::ops::conv: expected Views of float or double");
  return true;
}

//! The sizes of one convolution over S spatial axes, checked.
template <std::size_t S>
struct ConvShape {
  std::size_t n = 0, c = 0, co = 0;
  // Kokkos::Array, not std::array: the kernels capture these on the device
  Kokkos::Array<std::int64_t, S> in{}, k{}, out{}, stride{}, dilation{};
  std::size_t outputs() const {  // positions per example
    std::size_t p = 1;
    for (std::size_t a = 0; a < S; ++a) p *= static_cast<std::size_t>(out[a]);
    return p;
  }
  std::size_t inputs() const {
    std::size_t p = 1;
    for (std::size_t a = 0; a < S; ++a) p *= static_cast<std::size_t>(in[a]);
    return p;
  }
  std::size_t taps() const {  // kernel positions
    std::size_t p = 1;
    for (std::size_t a = 0; a < S; ++a) p *= static_cast<std::size_t>(k[a]);
    return p;
  }
  std::size_t rows() const { return n * outputs(); }
  std::size_t patch() const { return taps() * c; }
};

//! `op`'s shapes: x (n, in..., c), kernel (k..., c, co), y (n, out..., co) with out from the
//! window. `y_name` names the View that carries y's shape (y or dy).
template <std::size_t S, class XV, class KV, class YV>
ConvShape<S> conv_shape(const char* op, const XV& x, const KV& k, const YV& y, const char* y_name,
                        const ConvWindow<S>& window) {
  const std::string who = std::string("kdist::ops::") + op + ": ";
  for (std::size_t a = 0; a < S; ++a) {
    if (window.strides[a] == 0 || window.dilation_rate[a] == 0) {
      throw ValueError(who + "strides and dilation_rate must be >= 1 on every spatial axis");
    }
  }
  if (k.extent(S) != x.extent(S + 1)) {
    throw ValueError(who + "the kernel " + extents_of(k) + " takes " + std::to_string(k.extent(S)) +
                     " input channels but x " + extents_of(x) + " has " +
                     std::to_string(x.extent(S + 1)));
  }
  ConvShape<S> s;
  s.n = x.extent(0);
  s.c = x.extent(S + 1);
  s.co = k.extent(S + 1);
  for (std::size_t a = 0; a < S; ++a) {
    s.in[a] = static_cast<std::int64_t>(x.extent(a + 1));
    s.k[a] = static_cast<std::int64_t>(k.extent(a));
    s.stride[a] = static_cast<std::int64_t>(window.strides[a]);
    s.dilation[a] = static_cast<std::int64_t>(window.dilation_rate[a]);
    s.out[a] = static_cast<std::int64_t>(window.output_extent(a, x.extent(a + 1), k.extent(a)));
    if (s.out[a] == 0) {
      throw ValueError(who + "the kernel " + extents_of(k) + " does not fit images of " +
                       extents_of(x) +
                       " (padding 'valid' on the View given: each (kernel extent - 1) * "
                       "dilation_rate + 1 must be <= the image's extent, and kernel extents >= 1)");
    }
  }
  bool fits = y.extent(0) == s.n && y.extent(S + 1) == s.co;
  std::string want = "(" + std::to_string(s.n);
  for (std::size_t a = 0; a < S; ++a) {
    fits = fits && y.extent(a + 1) == static_cast<std::size_t>(s.out[a]);
    want += ", " + std::to_string(s.out[a]);
  }
  want += ", " + std::to_string(s.co) + ")";
  if (!fits) {
    throw ValueError(who + y_name + " is " + extents_of(y) + ", expected " + want + " for x " +
                     extents_of(x) + " and the kernel " + extents_of(k));
  }
  return s;
}

template <class V>
void require_contiguous(const char* op, const char* what, const V& v) {
  if (!v.span_is_contiguous()) {
    throw ValueError(std::string("kdist::ops::") + op + ": " + what +
                     " is not contiguous; convolutions take whole (packed) Views");
  }
}

//! A contiguous View seen as the (rows, cols) matrix of its memory.
template <class V>
auto as_matrix(const V& v, std::size_t rows, std::size_t cols) {
  using M = Kokkos::View<typename V::value_type**, Kokkos::LayoutRight, typename V::memory_space,
                         Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
  return M(v.data(), rows, cols);
}

//! The patch matrix of x: row (n, o...), column (t..., c) holds x[n, o * stride + t * dilation, c].
//! One thread per row: its coordinates are decomposed once, the taps walked as an odometer, and
//! each tap's channels copied in a run (divisions per element cost more than the copy).
// (Not `auto`: nvcc rejects an extended lambda in a function with a deduced return type.)
template <std::size_t S, class XV, class CV>
void im2col(const XV& x, const ConvShape<S>& s, const CV& cols) {
  const auto c = static_cast<std::int64_t>(s.c);
  const auto taps = static_cast<std::int64_t>(s.taps());
  Kokkos::parallel_for(
      "kdist::ops::conv/im2col", range<XV>(s.rows()), KOKKOS_LAMBDA(const std::int64_t r) {
        std::int64_t first[S], tap[S], p[S];
        std::int64_t rest = r;
        for (std::size_t a = S; a-- > 0;) {
          first[a] = (rest % s.out[a]) * s.stride[a];
          rest /= s.out[a];
          tap[a] = 0;
        }
        for (std::int64_t t = 0; t < taps; ++t) {
          for (std::size_t a = 0; a < S; ++a) p[a] = first[a] + tap[a] * s.dilation[a];
          for (std::int64_t ch = 0; ch < c; ++ch) cols(r, t * c + ch) = image_at<S>(x, rest, p, ch);
          for (std::size_t a = S; a-- > 0;) {  // the next tap, last axis fastest
            if (++tap[a] < s.k[a]) break;
            tap[a] = 0;
          }
        }
      });
}

//! dx from the patches' gradients: dx[n, p, c] sums dcols[(n, o), (t, c)] over p = o * stride +
//! t * dilation. One thread per input position (no atomics), its taps walked as an odometer.
template <std::size_t S, class DXV, class CV>
void col2im(const CV& dcols, const ConvShape<S>& s, const DXV& dx) {
  using T = scalar_t<DXV>;
  const auto c = static_cast<std::int64_t>(s.c);
  const auto taps = static_cast<std::int64_t>(s.taps());
  const auto outputs = static_cast<std::int64_t>(s.outputs());  // per example
  auto flat = as_matrix(dx, s.n * s.inputs(), s.c);
  Kokkos::parallel_for(
      "kdist::ops::conv/col2im", range<DXV>(s.n * s.inputs()), KOKKOS_LAMBDA(const std::int64_t e) {
        std::int64_t p[S], tap[S];
        std::int64_t rest = e;
        for (std::size_t a = S; a-- > 0;) {
          p[a] = rest % s.in[a];
          rest /= s.in[a];
          tap[a] = 0;
        }
        for (std::int64_t ch = 0; ch < c; ++ch) flat(e, ch) = T(0);
        for (std::int64_t t = 0; t < taps; ++t) {
          // the output position o with o * stride + tap * dilation = p, if there is one
          std::int64_t o_flat = 0;
          bool inside = true;
          for (std::size_t a = 0; a < S && inside; ++a) {
            const std::int64_t num = p[a] - tap[a] * s.dilation[a];
            const std::int64_t o = s.stride[a] == 1 ? num : num / s.stride[a];
            inside = num >= 0 && o < s.out[a] && (s.stride[a] == 1 || o * s.stride[a] == num);
            o_flat = o_flat * s.out[a] + o;
          }
          if (inside) {
            const std::int64_t row = rest * outputs + o_flat;
            for (std::int64_t ch = 0; ch < c; ++ch) flat(e, ch) += dcols(row, t * c + ch);
          }
          for (std::size_t a = S; a-- > 0;) {
            if (++tap[a] < s.k[a]) break;
            tap[a] = 0;
          }
        }
      });
}

//! The (rows, patch) scratch of a convolution: `cols` when given (a View the caller keeps, of
//! conv_scratch_extents), else a new one.
template <class T, class Space, std::size_t S, class CV>
auto scratch_or_new(const CV& cols, const ConvShape<S>& s, const char* op) {
  using M = Kokkos::View<T**, Kokkos::LayoutRight, Space>;
  if constexpr (std::is_same_v<CV, std::nullptr_t>) {
    return M(Kokkos::view_alloc(Kokkos::WithoutInitializing, "kdist::ops::conv/scratch"), s.rows(),
             s.patch());
  } else {
    static_assert(Kokkos::is_view<CV>::value && static_cast<int>(CV::rank) == 2,
                  "kdist::ops::conv: the scratch is a rank-2 View");
    static_assert(std::is_same_v<typename CV::memory_space, Space>,
                  "kdist::ops::conv: the scratch View must be in the memory space of the images "
                  "(x for the forward and kernel gradient, dx for the input gradient)");
    if (cols.extent(0) != s.rows() || cols.extent(1) != s.patch() || !cols.span_is_contiguous()) {
      throw ValueError(std::string("kdist::ops::") + op + ": the scratch View is (" +
                       std::to_string(cols.extent(0)) + ", " + std::to_string(cols.extent(1)) +
                       ") but the shapes need a contiguous (" + std::to_string(s.rows()) + ", " +
                       std::to_string(s.patch()) +
                       ") one (kdist::ops::conv_scratch_extents gives them)");
    }
    return cols;
  }
}

//! The forward convolution; `op` names it in errors.
template <std::size_t S, class XV, class KV, class YV, class Backend, class SV>
void conv_forward(const char* op, const XV& x, const KV& kernel, const YV& y,
                  const ConvWindow<S>& window, Backend b, const SV& scratch) {
  constexpr int R = static_cast<int>(S) + 2;
  static_assert(check_conv_view<XV, R>() && check_conv_view<KV, R>() && check_conv_view<YV, R>());
  static_assert(check_same_scalar<XV, YV>() && check_same_scalar<KV, YV>());
  static_assert(!std::is_const_v<typename YV::value_type>,
                "kdist::ops::conv: the output View y must not be const");
  const auto s = conv_shape(op, x, kernel, y, "y", window);
  require_contiguous(op, "the kernel", kernel);
  require_contiguous(op, "y", y);
  if (s.rows() == 0 || s.co == 0) return;
  const auto cols = scratch_or_new<scalar_t<YV>, typename XV::memory_space>(scratch, s, op);
  im2col(x, s, cols);
  matmul(cols, as_matrix(kernel, s.patch(), s.co), as_matrix(y, s.rows(), s.co), Op::none, Op::none,
         1, 0, b);
}

template <std::size_t S, class XV, class DYV, class DKV, class Backend, class SV>
void conv_kernel_gradient(const char* op, const XV& x, const DYV& dy, const DKV& dkernel,
                          const ConvWindow<S>& window, Backend b, const SV& scratch) {
  constexpr int R = static_cast<int>(S) + 2;
  static_assert(check_conv_view<XV, R>() && check_conv_view<DYV, R>() && check_conv_view<DKV, R>());
  static_assert(check_same_scalar<XV, DKV>() && check_same_scalar<DYV, DKV>());
  static_assert(!std::is_const_v<typename DKV::value_type>,
                "kdist::ops::conv_backward_kernel: the kernel gradient View must not be const");
  const auto s = conv_shape(op, x, dkernel, dy, "dy", window);
  require_contiguous(op, "dy", dy);
  require_contiguous(op, "the kernel gradient", dkernel);
  if (s.patch() == 0 || s.co == 0) return;
  if (s.rows() == 0) {
    Kokkos::deep_copy(dkernel, scalar_t<DKV>(0));  // an empty sum
    return;
  }
  const auto cols = scratch_or_new<scalar_t<DKV>, typename XV::memory_space>(scratch, s, op);
  im2col(x, s, cols);
  matmul(cols, as_matrix(dy, s.rows(), s.co), as_matrix(dkernel, s.patch(), s.co), Op::transpose,
         Op::none, 1, 0, b);
}

template <std::size_t S, class DYV, class KV, class DXV, class Backend, class SV>
void conv_input_gradient(const char* op, const DYV& dy, const KV& kernel, const DXV& dx,
                         const ConvWindow<S>& window, Backend b, const SV& scratch) {
  constexpr int R = static_cast<int>(S) + 2;
  static_assert(check_conv_view<DYV, R>() && check_conv_view<KV, R>() && check_conv_view<DXV, R>());
  static_assert(check_same_scalar<DYV, DXV>() && check_same_scalar<KV, DXV>());
  static_assert(!std::is_const_v<typename DXV::value_type>,
                "kdist::ops::conv_backward_input: the input gradient View must not be const");
  const auto s = conv_shape(op, dx, kernel, dy, "dy", window);
  require_contiguous(op, "dy", dy);
  require_contiguous(op, "the kernel", kernel);
  require_contiguous(op, "the input gradient", dx);
  using T = scalar_t<DXV>;
  if (dx.size() == 0) return;
  if (s.rows() == 0 || s.co == 0) {
    Kokkos::deep_copy(dx, T(0));
    return;
  }
  // dcols = dy * K^T: the gradient of each patch entry; dx gathers the entries of its element.
  const auto dcols = scratch_or_new<T, typename DXV::memory_space>(scratch, s, op);
  matmul(as_matrix(dy, s.rows(), s.co), as_matrix(kernel, s.patch(), s.co), dcols, Op::none,
         Op::transpose, 1, 0, b);
  col2im(dcols, s, dx);
}

}  // namespace detail

//! The extents of the scratch View the three ops below take (the (n * prod(out), prod(k) * c)
//! patch matrix) for images `x` (or the input gradient, of x's shape), `kernel` and `window`, to
//! keep one from step to step.
template <class XV, class KV, std::size_t S = detail::spatial_axes_of<XV>()>
std::array<std::size_t, 2> conv_scratch_extents(const XV& x, const KV& kernel,
                                                const ConvWindow<S>& window = {}) {
  std::size_t rows = x.extent(0), patch = x.extent(S + 1);
  for (std::size_t a = 0; a < S; ++a) {
    rows *= window.output_extent(a, x.extent(a + 1), kernel.extent(a));
    patch *= kernel.extent(a);
  }
  return {rows, patch};
}

//! `y = conv(x, kernel)` over the S = rank - 2 spatial axes of x (n, in..., c) with kernel
//! (k..., c, co): y (n, out..., co), overwritten, out = (in - (k - 1) * dilation - 1) / stride + 1.
//! The patch matrix goes in `scratch` when given (a rank-2 View of conv_scratch_extents the caller
//! keeps), else in a new View. Errors: kdist::ValueError for shapes that do not fit (the message
//! gives the three shapes), a 0 stride or dilation, non-contiguous Views, or a scratch of other
//! extents.
template <class XV, class KV, class YV, std::size_t S = detail::spatial_axes_of<XV>(),
          class Backend = AutoBackend, class SV = std::nullptr_t>
void conv(const XV& x, const KV& kernel, const YV& y, const ConvWindow<S>& window = {},
          Backend b = {}, const SV& scratch = nullptr) {
  detail::conv_forward("conv", x, kernel, y, window, b, scratch);
}

//! The kernel gradient of conv: `dkernel = sum over the batch and positions of x patches * dy`,
//! shaped like the kernel, overwritten; `scratch` as for conv. Errors: as conv (dy has y's shape).
template <class XV, class DYV, class DKV, std::size_t S = detail::spatial_axes_of<XV>(),
          class Backend = AutoBackend, class SV = std::nullptr_t>
void conv_backward_kernel(const XV& x, const DYV& dy, const DKV& dkernel,
                          const ConvWindow<S>& window = {}, Backend b = {},
                          const SV& scratch = nullptr) {
  detail::conv_kernel_gradient("conv_backward_kernel", x, dy, dkernel, window, b, scratch);
}

//! The input gradient of conv, shaped like x, overwritten: positions no window reads (the last
//! ones when the stride skips them) get 0; `scratch` (the patches' gradients) as for conv.
//! Errors: as conv.
template <class DYV, class KV, class DXV, std::size_t S = detail::spatial_axes_of<DXV>(),
          class Backend = AutoBackend, class SV = std::nullptr_t>
void conv_backward_input(const DYV& dy, const KV& kernel, const DXV& dx,
                         const ConvWindow<S>& window = {}, Backend b = {},
                         const SV& scratch = nullptr) {
  detail::conv_input_gradient("conv_backward_input", dy, kernel, dx, window, b, scratch);
}

}  // namespace kdist::ops
