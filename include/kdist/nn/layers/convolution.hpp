#pragma once
//! \file nn/layers/convolution.hpp
//! `kdist::layers::Conv2D` and `Conv3D`: Keras' Conv2D and Conv3D (channels_last; padding "valid"
//! or "same", strides, dilation_rate; kdist's padding "periodic") on distributed NHWC and NDHWC
//! tensors, one class template over the S spatial axes (`BasicConvolution<T, S>`). The kernel
//! (k..., in_channels, filters) and the bias (filters,) are created with the layouts the
//! distribution gives "<name>/kernel" and "<name>/bias"; the ModelParallel page's rules
//! `conv2d.*kernel: (None, None, None, "model")`, `conv2d.*bias: ("model",)` shard the filters:
//! - forward: each process convolves its examples (the batch axes of the input) with its block of
//!   filters; the output is (batch axes, spatial axes, None, filter axes);
//! - backward: the kernel and bias gradients are pending sums over the batch (and spatial) axes,
//!   resolved into the variables' layouts; the input gradient is a pending sum over the filter
//!   axes, resolved into the input's layout.
//! Spatial sharding (issue 38): when the input arrives with its depth, height or width sharded over mesh
//! axes (a rule on the layer before's output, or a field as a simulation decomposes it), or the
//! rule on "<name>/output" shards them (the seeds' `layout_map["conv1/output"] = ("batch",
//! "model", None, None)`), each process computes its block of output rows and columns: the halos
//! of its neighbours come by point-to-point messages (kdist/nn/layers/spatial_halos.hpp), and in
//! the backward pass the gradients of those halos go back to their owners. Uneven blocks, 2-D and
//! 3-D process grids (each spatial axis on its own mesh axes) and periodic boundaries are allowed.
//! A kernel sharded otherwise (on a spatial extent or in_channels, or on a batch or spatial axis) is gathered
//! for the computation: correct, with more communication.

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <Kokkos_Core.hpp>

#include <kdist/nn/explicit_instantiation.hpp>
#include <kdist/nn/gradients.hpp>
#include <kdist/nn/layer.hpp>
#include <kdist/nn/layer_buffers.hpp>
#include <kdist/nn/layers/activation.hpp>
#include <kdist/nn/layers/spatial_halos.hpp>
#include <kdist/nn/layers/spatial_window.hpp>
#include <kdist/nn/weight_gather.hpp>
#include <kdist/ops/activations.hpp>
#include <kdist/ops/convolution.hpp>
#include <kdist/ops/random.hpp>
#include <kdist/strategy/distribution.hpp>
#include <kdist/tensor/distribute_tensor.hpp>
#include <kdist/tensor/redistribute.hpp>
#include <kdist/tensor/reusable_views.hpp>
#include <kdist/tensor/tensor.hpp>

namespace kdist::detail {

//! A convolution kernel of `shape` (k..., in, out) drawn from glorot_uniform with Keras' fans,
//! keyed by (seed, stream, row-major index): Conv and ConvTranspose layers.
template <class T, std::size_t S>
DistributedTensor<typename kdist::detail::dynamic_data_type<T, S + 2>::type> glorot_kernel(
    const std::array<std::size_t, S + 2>& shape, const RuntimeTensorLayout& layout,
    std::uint64_t seed, std::uint64_t stream, std::size_t fan_in, std::size_t fan_out) {
  const std::size_t cin = shape[S], f = shape[S + 1];
  if constexpr (S == 2) {
    const std::size_t kw = shape[1];
    return distribute_tensor<T****>(
        KOKKOS_LAMBDA(std::size_t i, std::size_t j, std::size_t c, std::size_t o) {
          const std::size_t flat = ((i * kw + j) * cin + c) * f + o;
          return static_cast<T>(glorot_uniform(seed, stream, fan_in, fan_out, flat));
        },
        shape, layout);
  } else {
    const std::size_t kh = shape[1], kw = shape[2];
    return distribute_tensor<T*****>(
        KOKKOS_LAMBDA(std::size_t d, std::size_t i, std::size_t j, std::size_t c, std::size_t o) {
          const std::size_t flat = (((d * kh + i) * kw + j) * cin + c) * f + o;
          return static_cast<T>(glorot_uniform(seed, stream, fan_in, fan_out, flat));
        },
        shape, layout);
  }
}

}  // namespace kdist::detail

namespace kdist::layers {

//! Keras' Conv2D / Conv3D arguments beyond filters, kernel_size, activation and use_bias.
template <std::size_t S>
struct ConvOptions {
  std::array<std::size_t, S> strides = ones();
  Padding padding = Padding::valid;
  std::array<std::size_t, S> dilation_rate = ones();

  static constexpr std::array<std::size_t, S> ones() {
    std::array<std::size_t, S> a{};
    for (auto& e : a) e = 1;
    return a;
  }
};
using Conv2DOptions = ConvOptions<2>;
using Conv3DOptions = ConvOptions<3>;

//! The checks a convolution and a transposed one share (`who` starts the message): filters,
//! kernel extents, strides and dilation >= 1, no softmax or gelu over a feature map.
template <std::size_t S>
void check_convolution_arguments(const std::string& who, std::size_t filters,
                                 const std::array<std::size_t, S>& kernel_size,
                                 const ConvOptions<S>& options, Activation activation) {
  const char* every =
      S == 2 ? " must be >= 1 in both dimensions" : " must be >= 1 in every dimension";
  if (filters == 0) throw ValueError(who + "filters must be >= 1");
  for (std::size_t a = 0; a < S; ++a) {
    if (kernel_size[a] == 0) {
      throw ValueError(who + "kernel_size " + kdist::detail::shape_repr(kernel_size) + every);
    }
  }
  for (std::size_t a = 0; a < S; ++a) {
    if (options.strides[a] == 0 || options.dilation_rate[a] == 0) {
      throw ValueError(who + "strides " + kdist::detail::shape_repr(options.strides) +
                       " and dilation_rate " + kdist::detail::shape_repr(options.dilation_rate) +
                       every);
    }
  }
  if (activation == Activation::softmax || activation == Activation::gelu) {
    throw ValueError(who + (activation == Activation::softmax ? "a softmax" : "a gelu") +
                     " activation over a feature map is not supported; use "
                     "Activation::linear or Activation::relu");
  }
}

template <class T, std::size_t S>
class BasicConvolution {
  static_assert(S == 2 || S == 3, "kdist::layers::BasicConvolution: 2 or 3 spatial axes");

 public:
  using value_type = T;
  //! (batch, spatial..., channels) and the kernel (k..., in_channels, filters): rank S + 2.
  using Images = DistributedTensor<typename kdist::detail::dynamic_data_type<T, S + 2>::type>;
  using Vector = DistributedTensor<T*>;
  using Extents = std::array<std::size_t, S>;

  //! Errors: ValueError for 0 filters, a 0 kernel extent, a 0 stride or dilation, strides > 1
  //! with a dilation_rate > 1 (as Keras), or a softmax or gelu activation.
  BasicConvolution(std::size_t filters, Extents kernel_size, Activation activation, bool use_bias,
                   std::string name, ConvOptions<S> options = {})
      : filters_(filters),
        kernel_size_(kernel_size),
        activation_(activation),
        use_bias_(use_bias),
        name_(std::move(name)),
        options_(options) {
    const std::string who = prefix();
    check_convolution_arguments<S>(who, filters, kernel_size, options, activation);
    const auto& st = options.strides;
    const auto& dil = options.dilation_rate;
    const auto above_one = [](std::size_t e) { return e > 1; };
    if (any(st, above_one) && any(dil, above_one)) {
      throw ValueError(who +
                       "strides > 1 not supported in conjunction with dilation_rate > 1 (as "
                       "in Keras); received strides " +
                       kdist::detail::shape_repr(st) + " and dilation_rate " +
                       kdist::detail::shape_repr(dil));
    }
  }

  const std::string& name() const { return name_; }
  //! The Keras class this layer mirrors (its group in a Keras `.weights.h5` file).
  static constexpr std::string_view keras_class = S == 2 ? "Conv2D" : "Conv3D";
  std::size_t filters() const { return filters_; }
  const Extents& kernel_size() const { return kernel_size_; }
  const ConvOptions<S>& options() const { return options_; }
  Activation activation() const { return activation_; }
  bool use_bias() const { return use_bias_; }

  //! Builds for examples (spatial..., channels): (height, width, channels) for Conv2D, (depth,
  //! height, width, channels) for Conv3D; returns (out..., filters): Keras' extents for the
  //! padding, strides and dilation (extent - k + 1 for "valid" without them, ceil(extent / stride)
  //! for "same" and "periodic"). The kernel is glorot_uniform keyed by (seed,
  //! stream_id("<name>/kernel"), index), with Keras' fans for a convolution (prod(k) *
  //! in_channels, prod(k) * filters); bias zeros.
  Shape build(const Shape& input_shape, const Distribution& dist, std::uint64_t seed) {
    const std::string who = prefix();
    if (input_shape.size() != S + 1) {
      throw ValueError(who + "takes examples of shape " +
                       (S == 2 ? "(height, width, channels)" : "(depth, height, width, channels)") +
                       ", not " + kdist::detail::shape_repr(input_shape));
    }
    const std::size_t cin = input_shape[S];
    const auto axes = windows(input_shape);
    Extents spans{};
    bool fits = cin > 0;
    for (std::size_t a = 0; a < S; ++a) {
      spans[a] = axes[a].span();
      fits = fits && axes[a].output_extent() > 0;
    }
    if (!fits) {
      const bool dilated = any(options_.dilation_rate, [](std::size_t e) { return e > 1; });
      throw ValueError(
          who + "the kernel " + kdist::detail::shape_repr(kernel_size_) +
          (dilated ? " dilated to " + kdist::detail::shape_repr(spans) : std::string()) +
          " does not fit examples of shape " + kdist::detail::shape_repr(input_shape) +
          " (padding 'valid')");
    }
    const std::string kpath = name_ + "/kernel";
    typename Images::shape_type kshape{};
    std::size_t taps = 1;
    for (std::size_t a = 0; a < S; ++a) {
      kshape[a] = kernel_size_[a];
      taps *= kernel_size_[a];
    }
    kshape[S] = cin;
    kshape[S + 1] = filters_;
    auto klayout = dist.get_variable_layout(
        VariableInfo(kpath, std::vector<std::size_t>(kshape.begin(), kshape.end())));
    kernel_.path = kpath;
    kernel_.value = kdist::detail::glorot_kernel<T, S>(kshape, klayout, seed, stream_id(kpath),
                                                       taps * cin, taps * filters_);
    kernel_.grad = Images::zeros(kshape, klayout, kpath + "/grad");
    if (use_bias_) {
      const std::string bpath = name_ + "/bias";
      auto blayout = dist.get_variable_layout(VariableInfo(bpath, {filters_}));
      bias_ = Variable<T*>{bpath, Vector::zeros({filters_}, blayout, bpath),
                           Vector::zeros({filters_}, blayout, bpath + "/grad")};
    }
    output_layout_ = dist.get_tensor_layout(name_ + "/output");
    Shape out;
    for (const auto& a : axes) out.push_back(a.output_extent());
    out.push_back(filters_);
    return out;
  }

  LayerTensor<T> forward(const LayerTensor<T>& in, const StepContext& context) {
    const auto& x0 = kdist::detail::layer_input_as<Images>(
        in, std::string(keras_class) + " '" + name_ + "'",
        S == 2 ? "give it (batch, height, width, channels) tensors"
               : "give it (batch, depth, height, width, channels) tensors");
    const auto& mesh = x0.layout().device_mesh();
    input_layout_ = x0.layout();
    const DimAxes batch = x0.layout().axes()[0];
    const auto spatial = spatial_axes(x0.layout());
    x_ = contiguous(redistribute(x0, image_layout(batch, spatial, DimAxes(), mesh), x_moved_),
                    packed_views_);
    const DimAxes out_channels = filter_axes(batch, spatial);
    std::vector<DimAxes> kaxes(S + 2);
    kaxes[S + 1] = out_channels;
    compute_kernel_layout_ = RuntimeTensorLayout(std::move(kaxes), mesh);
    k_ = kernel_.value.layout() == *compute_kernel_layout_
             ? kernel_.value
             : contiguous(
                   kernel_moved_(kernel_.value, *compute_kernel_layout_, context.bfloat16_gathers),
                   packed_views_);
    const auto& s = x0.shape();
    const auto axes = windows(Shape(s.begin() + 1, s.begin() + 1 + S));
    halos_.plan(std::vector<std::size_t>(s.begin(), s.end()), x_.layout(), axes);
    // The input positions this process's outputs read: its block, halos, padding.
    xe_ = halos_.start_gather(x_.local());  // the halos travel while convolve() starts
    typename Images::shape_type yshape{}, yblock{};
    yshape[0] = s[0];
    yblock[0] = x_.local().extent(0);
    for (std::size_t a = 0; a < S; ++a) {
      yshape[a + 1] = axes[a].output_extent();
      yblock[a + 1] = halos_.output_block(a).extent;
    }
    yshape[S + 1] = filters_;
    yblock[S + 1] = k_.local().extent(S + 1);
    const auto y = get_block(y_views_, name_ + "/y", yblock);
    if (halos_.has_outputs()) {
      convolve(y);
      if (use_bias_) ops::bias_add(as_rows(y), bias_block(out_channels, mesh));
      if (activation_ == Activation::relu) ops::relu_inplace(as_rows(y));
    } else {
      halos_.finish_gather();
      if (use_bias_) (void)bias_block(out_channels, mesh);  // a collective when the bias moves
    }
    y_ = Images::from_local(y, yshape, image_layout(batch, spatial, out_channels, mesh), {});
    if (output_layout_) return redistribute(y_, *output_layout_, y_moved_);
    return y_;
  }

  std::optional<LayerTensor<T>> backward(const LayerTensor<T>& dy_in, bool need_input_grad,
                                         Gradients<T>& grads) {
    const auto& dy0 = kdist::detail::layer_input_as<Images>(
        dy_in, std::string(keras_class) + " '" + name_ + "'", "its gradient has its output's rank");
    // dy in the layout the output was computed in, in a block of its own (relu writes into it).
    Images dy = contiguous(redistribute(dy0, y_.layout(), dy_moved_), packed_views_);
    if (dy.local().data() == dy0.local().data()) dy = copy_of(dy, dy_views_);
    if (activation_ == Activation::relu) {
      ops::relu_backward_inplace(as_rows(y_.local()), as_rows(dy.local()));
    }
    const auto& mesh = y_.layout().device_mesh();
    const DimAxes out_channels = y_.layout().axes()[S + 1];
    // dK and db sum over the batch and the positions: pending sums over the batch and spatial axes.
    std::vector<std::string> summed;
    for (std::size_t d = 0; d <= S; ++d) {
      for (const auto& a : y_.layout().axes()[d].names()) summed.push_back(a);
    }
    const bool outputs = halos_.has_outputs();
    // dx first: each process holds the part of the sum over its filters (pending over the filter
    // axes), and the gradient of the positions gather() read goes back to their owners while the
    // kernel and bias gradients are computed (the halos' messages overlap that work).
    if (need_input_grad) {
      const auto dxe = dx_views_.get_like(name_ + "/dx", xe_);
      if (outputs) {
        ops::conv_backward_input(dy.local(), k_.local(), dxe, window(), ops::AutoBackend{},
                                 scratch());
      } else {
        Kokkos::deep_copy(dxe, T(0));
      }
      halos_.start_scatter_add(dxe);
    }
    const auto& ks = kernel_.value.shape();
    auto dk_block = ks;
    dk_block[S + 1] = k_.local().extent(S + 1);
    const auto dk = get_block(dk_views_, name_ + "/dk", dk_block);
    if (outputs) {
      ops::conv_backward_kernel(xe_, dy.local(), dk, window(), ops::AutoBackend{}, scratch());
    } else {
      Kokkos::deep_copy(dk, T(0));
    }
    grads.add(kernel_, Images::from_local(dk, ks, *compute_kernel_layout_, summed));
    if (use_bias_) {
      const auto db = db_views_.get(name_ + "/db", dy.local().extent(S + 1));
      ops::bias_grad(as_rows(dy.local()), db);
      grads.add(*bias_, Vector::from_local(db, {filters_},
                                           RuntimeTensorLayout({out_channels}, mesh), summed));
    }
    if (!need_input_grad) return std::nullopt;
    const auto dx = halos_.finish_scatter_add();
    auto dx_pending = Images::from_local(dx, x_.shape(), x_.layout(), out_channels.names());
    return LayerTensor<T>(redistribute(dx_pending, *input_layout_, dx_moved_));
  }

  std::vector<VariableRef<T>> variables() {
    std::vector<VariableRef<T>> out{&kernel_};
    if (bias_) out.push_back(&*bias_);
    return out;
  }

  TrainableVariable<typename kdist::detail::dynamic_data_type<T, S + 2>::type>& kernel() {
    return kernel_;
  }
  std::optional<Variable<T*>>& bias() { return bias_; }

 private:
  //! The axes the filters are computed over: the kernel's when it shards only its last dimension,
  //! over axes that do not already shard the batch or the image; otherwise none (the kernel is
  //! gathered).
  DimAxes filter_axes(const DimAxes& batch, const std::array<DimAxes, S>& spatial) const {
    const auto& k = kernel_.value.layout().axes();
    for (std::size_t d = 0; d <= S; ++d) {
      if (!k[d].is_replicated()) return {};
    }
    for (const auto& a : k[S + 1].names()) {
      for (const auto& b : batch.names()) {
        if (a == b) return {};
      }
      for (const auto& used : spatial) {
        for (const auto& b : used.names()) {
          if (a == b) return {};
        }
      }
    }
    return k[S + 1];
  }

  //! The mesh axes the image's spatial dimensions are computed over: the input's when it comes
  //! spatially sharded, else those the rule on "<name>/output" gives them; never an axis of the
  //! batch (nor the same axis for two dimensions).
  std::array<DimAxes, S> spatial_axes(const RuntimeTensorLayout& input) const {
    const auto& in = input.axes();
    bool sharded = false;
    for (std::size_t a = 1; a <= S; ++a) sharded = sharded || !in[a].is_replicated();
    const bool by_rule = !sharded && output_layout_ && output_layout_->axes().size() == S + 2;
    const auto& from = by_rule ? output_layout_->axes() : in;
    std::array<DimAxes, S> out;
    std::vector<std::string> taken = in[0].names();
    for (std::size_t a = 0; a < S; ++a) {
      std::vector<std::string> names;
      for (const auto& n : from[a + 1].names()) {
        bool used = false;
        for (const auto& t : taken) used = used || t == n;
        if (!used) names.push_back(n);
      }
      taken.insert(taken.end(), names.begin(), names.end());
      out[a] = DimAxes(std::move(names));
    }
    return out;
  }

  //! The windows over spatial extents `extents` (the first S of them).
  std::array<WindowAxis, S> windows(const Shape& extents) const {
    std::array<WindowAxis, S> w;
    for (std::size_t a = 0; a < S; ++a) {
      w[a] = WindowAxis{extents[a], kernel_size_[a], options_.strides[a], options_.dilation_rate[a],
                        options_.padding};
    }
    return w;
  }
  ops::ConvWindow<S> window() const {
    ops::ConvWindow<S> w;
    w.strides = options_.strides;
    w.dilation_rate = options_.dilation_rate;
    return w;
  }

  std::string prefix() const {
    return "kdist::layers::" + std::string(keras_class) + " '" + name_ + "': ";
  }
  template <class A, class P>
  static bool any(const A& a, P p) {
    for (const auto& e : a) {
      if (p(e)) return true;
    }
    return false;
  }
  //! (batch, spatial..., channels) over `mesh`.
  static RuntimeTensorLayout image_layout(const DimAxes& batch,
                                          const std::array<DimAxes, S>& spatial,
                                          const DimAxes& channels,
                                          const std::optional<RuntimeDeviceMesh>& mesh) {
    std::vector<DimAxes> axes{batch};
    axes.insert(axes.end(), spatial.begin(), spatial.end());
    axes.push_back(channels);
    return RuntimeTensorLayout(std::move(axes), mesh);
  }
  //! y = the convolution of the gathered input, whose halos along the first spatial axis may still
  //! be in flight (start_gather): the output rows that read only this process's own rows first,
  //! then, the halos arrived, the rows at the block's edges (kdist::layers::halo_overlap()).
  void convolve(const typename Images::view_type& y) {
    const auto patches = scratch();
    if (halos_.pending_axis() != 0 || !halo_overlap()) {
      halos_.finish_gather();
      ops::conv(xe_, k_.local(), y, window(), ops::AutoBackend{}, patches);
      return;
    }
    const auto own = halos_.own_positions(0);
    const auto stride = static_cast<std::int64_t>(options_.strides[0]);
    const auto span =
        static_cast<std::int64_t>((kernel_size_[0] - 1) * options_.dilation_rate[0] + 1);
    const auto rows = static_cast<std::int64_t>(y.extent(1));
    // outputs o with o * stride >= own.begin and o * stride + span <= own.end
    const std::int64_t lo = std::min((own.begin + stride - 1) / stride, rows);
    const std::int64_t hi =
        std::clamp<std::int64_t>(own.end >= span ? (own.end - span) / stride + 1 : 0, lo, rows);
    if (lo < hi) convolve_rows(y, lo, hi, patches);
    halos_.finish_gather();
    if (lo >= hi) {
      ops::conv(xe_, k_.local(), y, window(), ops::AutoBackend{}, patches);
      return;
    }
    if (lo > 0) convolve_rows(y, 0, lo, patches);
    if (hi < rows) convolve_rows(y, hi, rows, patches);
  }
  //! Output rows [first, last) along the first spatial axis, example by example (each example's
  //! rows are contiguous), the patch matrix in the front of `patches`.
  template <class P>
  void convolve_rows(const typename Images::view_type& y, std::int64_t first, std::int64_t last,
                     const P& patches) {
    // Views of the same types as the whole convolution's, over its memory (a View made from a
    // pointer does not own it): the kernels compiled for them serve these parts too.
    using Unmanaged = typename Images::view_type;
    using Matrix = P;
    const auto stride = static_cast<std::size_t>(options_.strides[0]);
    const std::size_t span = (kernel_size_[0] - 1) * options_.dilation_rate[0] + 1;
    const auto count = static_cast<std::size_t>(last - first);
    const std::size_t in_rows = (count - 1) * stride + span;
    std::size_t positions = count;  // output positions per example in these rows
    for (std::size_t a = 1; a < S; ++a) positions *= y.extent(a + 1);
    const Matrix part(patches.data(), positions, patches.extent(1));
    const auto f = static_cast<std::size_t>(first);
    for (std::size_t n = 0; n < y.extent(0); ++n) {
      // Addresses by strides, not by element: the Views may live on a device.
      T* const x0 = xe_.data() + n * xe_.stride(0) + f * stride * xe_.stride(1);
      T* const y0 = y.data() + n * y.stride(0) + f * y.stride(1);
      if constexpr (S == 2) {
        const Unmanaged xs(x0, 1, in_rows, xe_.extent(2), xe_.extent(3));
        const Unmanaged ys(y0, 1, count, y.extent(2), y.extent(3));
        ops::conv(xs, k_.local(), ys, window(), ops::AutoBackend{}, part);
      } else {
        const Unmanaged xs(x0, 1, in_rows, xe_.extent(2), xe_.extent(3), xe_.extent(4));
        const Unmanaged ys(y0, 1, count, y.extent(2), y.extent(3), y.extent(4));
        ops::conv(xs, k_.local(), ys, window(), ops::AutoBackend{}, part);
      }
    }
  }

  //! The bias entries of this process's filters.
  typename Vector::view_type bias_block(const DimAxes& out_channels,
                                        const std::optional<RuntimeDeviceMesh>& mesh) {
    RuntimeTensorLayout layout({out_channels}, mesh);
    if (bias_->value.layout() == layout) return bias_->value.local();
    return redistribute(bias_->value, layout, bias_moved_).local();
  }

  //! The patch matrix the three convolutions share (one at a time), for this step's x and kernel.
  auto scratch() {
    const auto e = ops::conv_scratch_extents(xe_, k_.local(), window());
    return scratch_views_.get(name_ + "/patches", e[0], e[1]);
  }

  std::size_t filters_;
  Extents kernel_size_;
  Activation activation_;
  bool use_bias_;
  std::string name_;
  ConvOptions<S> options_;
  TrainableVariable<typename kdist::detail::dynamic_data_type<T, S + 2>::type> kernel_;
  std::optional<Variable<T*>> bias_;
  std::optional<RuntimeTensorLayout> output_layout_, input_layout_, compute_kernel_layout_;
  Images x_, y_, k_;
  typename Images::view_type xe_;  // the input positions this process's outputs read
  SpatialHalos<typename Images::view_type, S> halos_;
  // A step's buffers, kept for the next steps (kdist::ReusableViews: no allocation per step): the
  // output, the gradients, the patch matrix, packed copies and what the redistributions write.
  ReusableViews<typename Images::view_type> y_views_, dy_views_, dk_views_, dx_views_,
      packed_views_, x_moved_, y_moved_, dy_moved_, dx_moved_;
  WeightGather<Images> kernel_moved_;  // the kernel in its compute layout (FSDP: gathered)
  ReusableViews<typename Vector::view_type> db_views_, bias_moved_;
  ReusableViews<Kokkos::View<T**, Kokkos::LayoutRight, typename Images::memory_space>>
      scratch_views_;
};

//! Keras' Conv2D and Conv3D on scalars T, and on float32.
template <class T>
using BasicConv2D = BasicConvolution<T, 2>;
template <class T>
using BasicConv3D = BasicConvolution<T, 3>;
using Conv2D = BasicConv2D<float>;
using Conv3D = BasicConv3D<float>;

}  // namespace kdist::layers

KDIST_EXTERN_LAYER_AT(BasicConvolution, 2)
