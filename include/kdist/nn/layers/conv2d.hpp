#pragma once
//! \file nn/layers/conv2d.hpp
//! `kdist::layers::Conv2D`: Keras' Conv2D (channels_last; padding "valid" or "same", strides,
//! dilation_rate; kdist's padding "periodic") on distributed NHWC tensors. The kernel (kh, kw,
//! in_channels, filters) and the bias (filters,) are created with the layouts the distribution
//! gives "<name>/kernel" and "<name>/bias"; the ModelParallel page's rules `conv2d.*kernel: (None,
//! None, None, "model")`, `conv2d.*bias: ("model",)` shard the filters:
//! - forward: each process convolves its examples (the batch axes of the input) with its block of
//!   filters; the output is (batch axes, spatial axes, None, filter axes);
//! - backward: the kernel and bias gradients are pending sums over the batch (and spatial) axes,
//!   resolved into the variables' layouts; the input gradient is a pending sum over the filter
//!   axes, resolved into the input's layout.
//! Spatial sharding (issue 38): when the input arrives with its height or width sharded over mesh
//! axes (a rule on the layer before's output, or a field as a simulation decomposes it), or the
//! rule on "<name>/output" shards them (the seeds' `layout_map["conv1/output"] = ("batch",
//! "model", None, None)`), each process computes its block of output rows and columns: the halos
//! of its neighbours come by point-to-point messages (kdist/nn/layers/spatial_halos.hpp), and in
//! the backward pass the gradients of those halos go back to their owners. Uneven blocks, 2-D
//! process grids (height and width on different axes) and periodic boundaries are allowed.
//! A kernel sharded otherwise (on kh, kw or in_channels, or on a batch or spatial axis) is gathered
//! for the computation: correct, with more communication.

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

namespace kdist::layers {

//! Keras' Conv2D arguments beyond filters, kernel_size, activation and use_bias.
struct Conv2DOptions {
  std::array<std::size_t, 2> strides{1, 1};
  Padding padding = Padding::valid;
  std::array<std::size_t, 2> dilation_rate{1, 1};
};

template <class T>
class BasicConv2D {
 public:
  using value_type = T;
  using Images = DistributedTensor<T****>;
  using Vector = DistributedTensor<T*>;

  //! Errors: ValueError for 0 filters, a 0 kernel extent, a 0 stride or dilation, strides > 1
  //! with a dilation_rate > 1 (as Keras), or a softmax or gelu activation.
  BasicConv2D(std::size_t filters, std::array<std::size_t, 2> kernel_size, Activation activation,
              bool use_bias, std::string name, Conv2DOptions options = {})
      : filters_(filters),
        kernel_size_(kernel_size),
        activation_(activation),
        use_bias_(use_bias),
        name_(std::move(name)),
        options_(options) {
    const std::string who = "kdist::layers::Conv2D '" + name_ + "': ";
    if (filters == 0) throw ValueError(who + "filters must be >= 1");
    if (kernel_size[0] == 0 || kernel_size[1] == 0) {
      throw ValueError(who + "kernel_size " + kdist::detail::shape_repr(kernel_size) +
                       " must be >= 1 in both dimensions");
    }
    const auto& st = options.strides;
    const auto& dil = options.dilation_rate;
    if (st[0] == 0 || st[1] == 0 || dil[0] == 0 || dil[1] == 0) {
      throw ValueError(who + "strides " + kdist::detail::shape_repr(st) + " and dilation_rate " +
                       kdist::detail::shape_repr(dil) + " must be >= 1 in both dimensions");
    }
    if ((st[0] > 1 || st[1] > 1) && (dil[0] > 1 || dil[1] > 1)) {
      throw ValueError(who +
                       "strides > 1 not supported in conjunction with dilation_rate > 1 (as "
                       "in Keras); received strides " +
                       kdist::detail::shape_repr(st) + " and dilation_rate " +
                       kdist::detail::shape_repr(dil));
    }
    if (activation == Activation::softmax || activation == Activation::gelu) {
      throw ValueError(who + (activation == Activation::softmax ? "a softmax" : "a gelu") +
                       " activation over a feature map is not supported; use "
                       "Activation::linear or Activation::relu");
    }
  }

  const std::string& name() const { return name_; }
  //! The Keras class this layer mirrors (its group in a Keras `.weights.h5` file).
  static constexpr std::string_view keras_class = "Conv2D";
  std::size_t filters() const { return filters_; }
  const std::array<std::size_t, 2>& kernel_size() const { return kernel_size_; }
  const Conv2DOptions& options() const { return options_; }

  //! Builds for examples (height, width, channels); returns (out_h, out_w, filters): Keras'
  //! extents for the padding, strides and dilation (height - kh + 1 for "valid" without them,
  //! ceil(height / stride) for "same" and "periodic"). The kernel is glorot_uniform keyed by (seed, stream_id("<name>/kernel"), index),
  //! with Keras' fans for a convolution (kh * kw * in_channels, kh * kw * filters); bias zeros.
  Shape build(const Shape& input_shape, const Distribution& dist, std::uint64_t seed) {
    const std::string who = "kdist::layers::Conv2D '" + name_ + "': ";
    if (input_shape.size() != 3) {
      throw ValueError(who + "takes examples of shape (height, width, channels), not " +
                       kdist::detail::shape_repr(input_shape));
    }
    const std::size_t kh = kernel_size_[0], kw = kernel_size_[1], cin = input_shape[2];
    const auto axes = windows(input_shape[0], input_shape[1]);
    if (axes[0].output_extent() == 0 || axes[1].output_extent() == 0 || cin == 0) {
      const bool dilated = options_.dilation_rate[0] > 1 || options_.dilation_rate[1] > 1;
      throw ValueError(who + "the kernel " + kdist::detail::shape_repr(kernel_size_) +
                       (dilated
                            ? " dilated to " + kdist::detail::shape_repr(std::array<std::size_t, 2>{
                                                   axes[0].span(), axes[1].span()})
                            : std::string()) +
                       " does not fit examples of shape " + kdist::detail::shape_repr(input_shape) +
                       " (padding 'valid')");
    }
    const std::string kpath = name_ + "/kernel";
    const std::array<std::size_t, 4> kshape{kh, kw, cin, filters_};
    auto klayout = dist.get_variable_layout(VariableInfo(kpath, {kh, kw, cin, filters_}));
    const std::uint64_t stream = stream_id(kpath);
    const std::size_t fan_in = kh * kw * cin, fan_out = kh * kw * filters_, f = filters_;
    kernel_.path = kpath;
    kernel_.value = distribute_tensor<T****>(
        KOKKOS_LAMBDA(std::size_t i, std::size_t j, std::size_t c, std::size_t o) {
          const std::size_t flat = ((i * kw + j) * cin + c) * f + o;
          return static_cast<T>(glorot_uniform(seed, stream, fan_in, fan_out, flat));
        },
        kshape, klayout);
    kernel_.grad = Images::zeros(kshape, klayout, kpath + "/grad");
    if (use_bias_) {
      const std::string bpath = name_ + "/bias";
      auto blayout = dist.get_variable_layout(VariableInfo(bpath, {filters_}));
      bias_ = Variable<T*>{bpath, Vector::zeros({filters_}, blayout, bpath),
                           Vector::zeros({filters_}, blayout, bpath + "/grad")};
    }
    output_layout_ = dist.get_tensor_layout(name_ + "/output");
    return {axes[0].output_extent(), axes[1].output_extent(), filters_};
  }

  LayerTensor<T> forward(const LayerTensor<T>& in, const StepContext& context) {
    const auto& x0 = kdist::detail::layer_input_as<Images>(
        in, "Conv2D '" + name_ + "'", "give it (batch, height, width, channels) tensors");
    const auto& mesh = x0.layout().device_mesh();
    input_layout_ = x0.layout();
    const DimAxes batch = x0.layout().axes()[0];
    const auto spatial = spatial_axes(x0.layout());
    x_ = contiguous(
        redistribute(x0, RuntimeTensorLayout({batch, spatial[0], spatial[1], DimAxes()}, mesh),
                     x_moved_),
        packed_views_);
    const DimAxes out_channels = filter_axes(batch, spatial);
    compute_kernel_layout_ =
        RuntimeTensorLayout({DimAxes(), DimAxes(), DimAxes(), out_channels}, mesh);
    k_ = kernel_.value.layout() == *compute_kernel_layout_
             ? kernel_.value
             : contiguous(
                   kernel_moved_(kernel_.value, *compute_kernel_layout_, context.bfloat16_gathers),
                   packed_views_);
    const auto& s = x0.shape();
    const auto axes = windows(s[1], s[2]);
    halos_.plan(std::vector<std::size_t>(s.begin(), s.end()), x_.layout(), axes);
    // The input positions this process's outputs read: its block, halos, padding.
    xe_ = halos_.gather(x_.local());
    const std::array<std::size_t, 4> yshape{s[0], axes[0].output_extent(), axes[1].output_extent(),
                                            filters_};
    const auto y = y_views_.get(name_ + "/y", x_.local().extent(0), halos_.output_block(0).extent,
                                halos_.output_block(1).extent, k_.local().extent(3));
    if (halos_.has_outputs()) {
      ops::conv(xe_, k_.local(), y, window(), ops::AutoBackend{}, scratch());
      if (use_bias_) ops::bias_add(as_rows(y), bias_block(out_channels, mesh));
      if (activation_ == Activation::relu) ops::relu_inplace(as_rows(y));
    } else if (use_bias_) {
      (void)bias_block(out_channels, mesh);  // a collective when the bias is moved: every process
    }
    y_ = Images::from_local(
        y, yshape, RuntimeTensorLayout({batch, spatial[0], spatial[1], out_channels}, mesh), {});
    if (output_layout_) return redistribute(y_, *output_layout_, y_moved_);
    return y_;
  }

  std::optional<LayerTensor<T>> backward(const LayerTensor<T>& dy_in, bool need_input_grad,
                                         Gradients<T>& grads) {
    const auto& dy0 = kdist::detail::layer_input_as<Images>(dy_in, "Conv2D '" + name_ + "'",
                                                            "its gradient has its output's rank");
    // dy in the layout the output was computed in, in a block of its own (relu writes into it).
    Images dy = contiguous(redistribute(dy0, y_.layout(), dy_moved_), packed_views_);
    if (dy.local().data() == dy0.local().data()) dy = copy_of(dy, dy_views_);
    if (activation_ == Activation::relu) {
      ops::relu_backward_inplace(as_rows(y_.local()), as_rows(dy.local()));
    }
    const auto& mesh = y_.layout().device_mesh();
    const DimAxes out_channels = y_.layout().axes()[3];
    // dK and db sum over the batch and the positions: pending sums over the batch and spatial axes.
    std::vector<std::string> summed;
    for (std::size_t d = 0; d < 3; ++d) {
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
    const auto dk = dk_views_.get(name_ + "/dk", ks[0], ks[1], ks[2], k_.local().extent(3));
    if (outputs) {
      ops::conv_backward_kernel(xe_, dy.local(), dk, window(), ops::AutoBackend{}, scratch());
    } else {
      Kokkos::deep_copy(dk, T(0));
    }
    grads.add(kernel_, Images::from_local(dk, ks, *compute_kernel_layout_, summed));
    if (use_bias_) {
      const auto db = db_views_.get(name_ + "/db", dy.local().extent(3));
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

  Variable<T****>& kernel() { return kernel_; }
  std::optional<Variable<T*>>& bias() { return bias_; }

 private:
  //! The axes the filters are computed over: the kernel's when it shards only its last dimension,
  //! over axes that do not already shard the batch or the image; otherwise none (the kernel is
  //! gathered).
  DimAxes filter_axes(const DimAxes& batch, const std::array<DimAxes, 2>& spatial) const {
    const auto& k = kernel_.value.layout().axes();
    if (!k[0].is_replicated() || !k[1].is_replicated() || !k[2].is_replicated()) return {};
    for (const auto& a : k[3].names()) {
      for (const DimAxes* used : {&batch, &spatial[0], &spatial[1]}) {
        for (const auto& b : used->names()) {
          if (a == b) return {};
        }
      }
    }
    return k[3];
  }

  //! The mesh axes the image's height and width are computed over: the input's when it comes
  //! spatially sharded, else those the rule on "<name>/output" gives them; never an axis of the
  //! batch (nor the same axis for both).
  std::array<DimAxes, 2> spatial_axes(const RuntimeTensorLayout& input) const {
    const auto& in = input.axes();
    const bool sharded = !in[1].is_replicated() || !in[2].is_replicated();
    const auto& from = sharded || !output_layout_ ? in : output_layout_->axes();
    std::array<DimAxes, 2> out;
    std::vector<std::string> taken = in[0].names();
    for (std::size_t a = 0; a < 2; ++a) {
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

  std::array<WindowAxis, 2> windows(std::size_t height, std::size_t width) const {
    std::array<WindowAxis, 2> w;
    const std::array<std::size_t, 2> extents{height, width};
    for (std::size_t a = 0; a < 2; ++a) {
      w[a] = WindowAxis{extents[a], kernel_size_[a], options_.strides[a], options_.dilation_rate[a],
                        options_.padding};
    }
    return w;
  }
  ops::ConvWindow<2> window() const {
    ops::ConvWindow<2> w;
    w.strides = options_.strides;
    w.dilation_rate = options_.dilation_rate;
    return w;
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
  std::array<std::size_t, 2> kernel_size_;
  Activation activation_;
  bool use_bias_;
  std::string name_;
  Conv2DOptions options_;
  Variable<T****> kernel_;
  std::optional<Variable<T*>> bias_;
  std::optional<RuntimeTensorLayout> output_layout_, input_layout_, compute_kernel_layout_;
  Images x_, y_, k_;
  typename Images::view_type xe_;  // the input positions this process's outputs read
  SpatialHalos<typename Images::view_type, 2> halos_;
  // A step's buffers, kept for the next steps (kdist::ReusableViews: no allocation per step): the
  // output, the gradients, the patch matrix, packed copies and what the redistributions write.
  ReusableViews<typename Images::view_type> y_views_, dy_views_, dk_views_, dx_views_,
      packed_views_, x_moved_, y_moved_, dy_moved_, dx_moved_;
  WeightGather<Images> kernel_moved_;  // the kernel in its compute layout (FSDP: gathered)
  ReusableViews<typename Vector::view_type> db_views_, bias_moved_;
  ReusableViews<Kokkos::View<T**, Kokkos::LayoutRight, typename Images::memory_space>>
      scratch_views_;
};

//! Keras' Conv2D on float32.
using Conv2D = BasicConv2D<float>;

}  // namespace kdist::layers

KDIST_EXTERN_LAYER(BasicConv2D)
