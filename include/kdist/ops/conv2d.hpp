#pragma once
//! \file ops/conv2d.hpp
//! Local kernels of Keras' Conv2D (channels_last, padding "valid", strides 1, dilation 1) on
//! rank-4 LayoutRight Views, the three products of a convolution layer:
//! - forward `y[n, oh, ow, co] = sum_{i, j, c} x[n, oh + i, ow + j, c] * k[i, j, c, co]`,
//! - kernel gradient `dk[i, j, c, co] = sum_{n, oh, ow} x[n, oh + i, ow + j, c] * dy[n, oh, ow, co]`,
//! - input gradient `dx[n, h, w, c] = sum_{i, j, co} dy[n, h - i, w - j, co] * k[i, j, c, co]`.
//! Each is an im2col (the (n * oh * ow, kh * kw * c) matrix of input patches, a Kokkos kernel in
//! the Views' memory space) and one kdist::ops::matmul: Eigen's GEMM on the host, cuBLAS on CUDA
//! devices. The kernel (kh, kw, c, co) in LayoutRight is already the (kh * kw * c, co) matrix,
//! and y the (n * oh * ow, co) one. The input gradient scatters back by gathering (col2im over
//! dx's elements), so no atomics. The patch matrix is a scratch View allocated per call.

#include <Kokkos_Core.hpp>
#include <array>
#include <cstddef>
#include <cstdint>
#include <kdist/core/error.hpp>
#include <kdist/ops/backend.hpp>
#include <kdist/ops/detail/views.hpp>
#include <kdist/ops/matmul.hpp>
#include <string>
#include <type_traits>

namespace kdist::ops {

namespace detail {

//! Checks (at compile time) that `V` is a rank-4 LayoutRight View of float or double.
template <class V>
constexpr bool check_nhwc() {
  static_assert(Kokkos::is_view<V>::value, "kdist::ops::conv2d: expected a Kokkos::View");
  static_assert(static_cast<int>(V::rank) == 4,
                "kdist::ops::conv2d: expected rank-4 Views: inputs and outputs (batch, height, "
                "width, channels), kernels (kh, kw, in_channels, out_channels)");
  static_assert(std::is_same_v<typename V::array_layout, Kokkos::LayoutRight>,
                "kdist::ops::conv2d: expected Kokkos::LayoutRight Views (channels last, as Keras)");
  static_assert(std::is_same_v<scalar_t<V>, float> || std::is_same_v<scalar_t<V>, double>,
                "kdist::ops::conv2d: expected Views of float or double");
  return true;
}

inline std::string shape4(std::size_t a, std::size_t b, std::size_t c, std::size_t d) {
  return "(" + std::to_string(a) + ", " + std::to_string(b) + ", " + std::to_string(c) + ", " +
         std::to_string(d) + ")";
}
template <class V>
std::string shape4(const V& v) {
  return shape4(v.extent(0), v.extent(1), v.extent(2), v.extent(3));
}

//! The shapes of one convolution, checked: x (n, h, w, c), kernel (kh, kw, c, co), y (n, h - kh
//! + 1, w - kw + 1, co). `what` names the View that carries y's shape (y or dy).
struct ConvShape {
  std::size_t n, h, w, c, kh, kw, co, oh, ow;
  std::size_t rows() const { return n * oh * ow; }
  std::size_t patch() const { return kh * kw * c; }
};

template <class XV, class KV, class YV>
ConvShape conv_shape(const char* op, const XV& x, const KV& k, const YV& y, const char* y_name) {
  const std::string who = std::string("kdist::ops::") + op + ": ";
  if (k.extent(2) != x.extent(3)) {
    throw ValueError(who + "the kernel " + shape4(k) + " takes " + std::to_string(k.extent(2)) +
                     " input channels but x " + shape4(x) + " has " + std::to_string(x.extent(3)));
  }
  if (k.extent(0) == 0 || k.extent(1) == 0 || k.extent(0) > x.extent(1) ||
      k.extent(1) > x.extent(2)) {
    throw ValueError(who + "the kernel " + shape4(k) + " does not fit images of " + shape4(x) +
                     " (padding 'valid': kh <= height, kw <= width, both >= 1)");
  }
  ConvShape s{x.extent(0),
              x.extent(1),
              x.extent(2),
              x.extent(3),
              k.extent(0),
              k.extent(1),
              k.extent(3),
              x.extent(1) - k.extent(0) + 1,
              x.extent(2) - k.extent(1) + 1};
  if (y.extent(0) != s.n || y.extent(1) != s.oh || y.extent(2) != s.ow || y.extent(3) != s.co) {
    throw ValueError(who + y_name + " is " + shape4(y) + ", expected " +
                     shape4(s.n, s.oh, s.ow, s.co) + " for x " + shape4(x) + " and the kernel " +
                     shape4(k));
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

//! A contiguous rank-4 View seen as the (rows, cols) matrix of its memory.
template <class V>
auto as_matrix(const V& v, std::size_t rows, std::size_t cols) {
  using M = Kokkos::View<typename V::value_type**, Kokkos::LayoutRight, typename V::memory_space,
                         Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
  return M(v.data(), rows, cols);
}

//! The patch matrix of x: row (n, oh, ow), column (i, j, c) holds x[n, oh + i, ow + j, c].
// (Not `auto`: nvcc rejects an extended lambda in a function with a deduced return type.)
template <class XV, class CV>
void im2col(const XV& x, const ConvShape& s, const CV& cols) {
  const auto oh = static_cast<std::int64_t>(s.oh), ow = static_cast<std::int64_t>(s.ow);
  const auto kw = static_cast<std::int64_t>(s.kw), c = static_cast<std::int64_t>(s.c);
  Kokkos::parallel_for(
      "kdist::ops::conv2d/im2col", md_range<XV>(s.rows(), s.patch()),
      KOKKOS_LAMBDA(const std::int64_t r, const std::int64_t q) {
        const std::int64_t b = r / (oh * ow), i = (r / ow) % oh, j = r % ow;
        const std::int64_t di = q / (kw * c), dj = (q / c) % kw, ch = q % c;
        cols(r, q) = x(b, i + di, j + dj, ch);
      });
}

//! The (rows, patch) scratch of a convolution: `cols` when given (a View the caller keeps, of
//! conv2d_scratch_extents), else a new one.
template <class T, class Space, class CV>
auto scratch_or_new(const CV& cols, const ConvShape& s, const char* op) {
  using M = Kokkos::View<T**, Kokkos::LayoutRight, Space>;
  if constexpr (std::is_same_v<CV, std::nullptr_t>) {
    return M(Kokkos::view_alloc(Kokkos::WithoutInitializing, "kdist::ops::conv2d/scratch"),
             s.rows(), s.patch());
  } else {
    static_assert(Kokkos::is_view<CV>::value && static_cast<int>(CV::rank) == 2,
                  "kdist::ops::conv2d: the scratch is a rank-2 View");
    static_assert(std::is_same_v<typename CV::memory_space, Space>,
                  "kdist::ops::conv2d: the scratch View must be in the memory space of the images "
                  "(x for conv2d and conv2d_backward_kernel, dx for conv2d_backward_input)");
    if (cols.extent(0) != s.rows() || cols.extent(1) != s.patch() || !cols.span_is_contiguous()) {
      throw ValueError(std::string("kdist::ops::") + op + ": the scratch View is (" +
                       std::to_string(cols.extent(0)) + ", " + std::to_string(cols.extent(1)) +
                       ") but the shapes need a contiguous (" + std::to_string(s.rows()) + ", " +
                       std::to_string(s.patch()) +
                       ") one (kdist::ops::conv2d_scratch_extents gives them)");
    }
    return cols;
  }
}

}  // namespace detail

//! The extents of the scratch View the three ops below take (the (n * oh * ow, kh * kw * c) patch
//! matrix) for images `x` (or the input gradient, of x's shape) and `kernel`, to keep one from
//! step to step: `kdist::ops::conv2d(x, k, y, kdist::ops::AutoBackend{}, scratch)`.
template <class XV, class KV>
std::array<std::size_t, 2> conv2d_scratch_extents(const XV& x, const KV& kernel) {
  const std::size_t oh = x.extent(1) >= kernel.extent(0) ? x.extent(1) - kernel.extent(0) + 1 : 0;
  const std::size_t ow = x.extent(2) >= kernel.extent(1) ? x.extent(2) - kernel.extent(1) + 1 : 0;
  return {x.extent(0) * oh * ow, kernel.extent(0) * kernel.extent(1) * x.extent(3)};
}

//! `y = conv2d(x, kernel)`: x (n, h, w, c), kernel (kh, kw, c, co), y (n, h - kh + 1, w - kw + 1,
//! co), overwritten. The patch matrix goes in `scratch` when given (a rank-2 View of
//! conv2d_scratch_extents the caller keeps), else in a new View. Errors: kdist::ValueError for
//! shapes that do not fit (the message gives the three shapes), non-contiguous Views, or a scratch
//! of other extents.
template <class XV, class KV, class YV, class Backend = AutoBackend, class SV = std::nullptr_t>
void conv2d(const XV& x, const KV& kernel, const YV& y, Backend b = {},
            const SV& scratch = nullptr) {
  static_assert(detail::check_nhwc<XV>() && detail::check_nhwc<KV>() && detail::check_nhwc<YV>());
  static_assert(detail::check_same_scalar<XV, YV>() && detail::check_same_scalar<KV, YV>());
  static_assert(!std::is_const_v<typename YV::value_type>,
                "kdist::ops::conv2d: the output View y must not be const");
  const auto s = detail::conv_shape("conv2d", x, kernel, y, "y");
  detail::require_contiguous("conv2d", "the kernel", kernel);
  detail::require_contiguous("conv2d", "y", y);
  if (s.rows() == 0 || s.co == 0) return;
  const auto cols =
      detail::scratch_or_new<detail::scalar_t<YV>, typename XV::memory_space>(scratch, s, "conv2d");
  detail::im2col(x, s, cols);
  matmul(cols, detail::as_matrix(kernel, s.patch(), s.co), detail::as_matrix(y, s.rows(), s.co),
         Op::none, Op::none, 1, 0, b);
}

//! The kernel gradient: `dkernel = sum over the batch and positions of x patches * dy`, shaped
//! like the kernel (kh, kw, c, co), overwritten; `scratch` as for conv2d. Errors: as conv2d (dy
//! has y's shape).
template <class XV, class DYV, class DKV, class Backend = AutoBackend, class SV = std::nullptr_t>
void conv2d_backward_kernel(const XV& x, const DYV& dy, const DKV& dkernel, Backend b = {},
                            const SV& scratch = nullptr) {
  static_assert(detail::check_nhwc<XV>() && detail::check_nhwc<DYV>() && detail::check_nhwc<DKV>());
  static_assert(detail::check_same_scalar<XV, DKV>() && detail::check_same_scalar<DYV, DKV>());
  static_assert(!std::is_const_v<typename DKV::value_type>,
                "kdist::ops::conv2d_backward_kernel: the kernel gradient View must not be const");
  const auto s = detail::conv_shape("conv2d_backward_kernel", x, dkernel, dy, "dy");
  detail::require_contiguous("conv2d_backward_kernel", "dy", dy);
  detail::require_contiguous("conv2d_backward_kernel", "the kernel gradient", dkernel);
  if (s.patch() == 0 || s.co == 0) return;
  if (s.rows() == 0) {
    Kokkos::deep_copy(dkernel, detail::scalar_t<DKV>(0));  // an empty sum
    return;
  }
  const auto cols = detail::scratch_or_new<detail::scalar_t<DKV>, typename XV::memory_space>(
      scratch, s, "conv2d_backward_kernel");
  detail::im2col(x, s, cols);
  matmul(cols, detail::as_matrix(dy, s.rows(), s.co), detail::as_matrix(dkernel, s.patch(), s.co),
         Op::transpose, Op::none, 1, 0, b);
}

//! The input gradient: `dx[n, h, w, c] = sum_{i, j, co} dy[n, h - i, w - j, co] k[i, j, c, co]`
//! over the positions inside dy, shaped like x, overwritten; `scratch` (the patches' gradients) as
//! for conv2d. Errors: as conv2d.
template <class DYV, class KV, class DXV, class Backend = AutoBackend, class SV = std::nullptr_t>
void conv2d_backward_input(const DYV& dy, const KV& kernel, const DXV& dx, Backend b = {},
                           const SV& scratch = nullptr) {
  static_assert(detail::check_nhwc<DYV>() && detail::check_nhwc<KV>() && detail::check_nhwc<DXV>());
  static_assert(detail::check_same_scalar<DYV, DXV>() && detail::check_same_scalar<KV, DXV>());
  static_assert(!std::is_const_v<typename DXV::value_type>,
                "kdist::ops::conv2d_backward_input: the input gradient View must not be const");
  const auto s = detail::conv_shape("conv2d_backward_input", dx, kernel, dy, "dy");
  detail::require_contiguous("conv2d_backward_input", "dy", dy);
  detail::require_contiguous("conv2d_backward_input", "the kernel", kernel);
  detail::require_contiguous("conv2d_backward_input", "the input gradient", dx);
  using T = detail::scalar_t<DXV>;
  if (dx.size() == 0) return;
  if (s.rows() == 0 || s.co == 0) {
    Kokkos::deep_copy(dx, T(0));
    return;
  }
  // dcols = dy * K^T: the gradient of each patch entry; dx gathers the entries of its element.
  const auto dcols =
      detail::scratch_or_new<T, typename DXV::memory_space>(scratch, s, "conv2d_backward_input");
  matmul(detail::as_matrix(dy, s.rows(), s.co), detail::as_matrix(kernel, s.patch(), s.co), dcols,
         Op::none, Op::transpose, 1, 0, b);
  const auto oh = static_cast<std::int64_t>(s.oh), ow = static_cast<std::int64_t>(s.ow);
  const auto kh = static_cast<std::int64_t>(s.kh), kw = static_cast<std::int64_t>(s.kw);
  const auto h = static_cast<std::int64_t>(s.h), w = static_cast<std::int64_t>(s.w);
  const auto c = static_cast<std::int64_t>(s.c);
  auto flat = detail::as_matrix(dx, s.n * s.h * s.w, s.c);
  Kokkos::parallel_for(
      "kdist::ops::conv2d/col2im", detail::md_range<DXV>(s.n * s.h * s.w, s.c),
      KOKKOS_LAMBDA(const std::int64_t p, const std::int64_t ch) {
        const std::int64_t bn = p / (h * w), y0 = (p / w) % h, x0 = p % w;
        T sum = 0;
        for (std::int64_t di = 0; di < kh; ++di) {
          const std::int64_t i = y0 - di;
          if (i < 0 || i >= oh) continue;
          for (std::int64_t dj = 0; dj < kw; ++dj) {
            const std::int64_t j = x0 - dj;
            if (j < 0 || j >= ow) continue;
            sum += dcols((bn * oh + i) * ow + j, (di * kw + dj) * c + ch);
          }
        }
        flat(p, ch) = sum;
      });
}

}  // namespace kdist::ops
