#pragma once
//! \file nn/layers/conv_transpose.hpp
//! `kdist::layers::Conv2DTranspose` and `Conv3DTranspose`: Keras' transposed convolutions
//! (channels_last; padding "valid" or "same", strides, dilation_rate; kernel (k..., filters,
//! in_channels) as Keras stores it), a U-Net's learned way back up. Each input position spreads its
//! kernel over outputs i * stride + t * dilation (cropped by "same"): the gradient of a convolution
//! with the same kernel, so the three products are the convolution's
//! (kdist/ops/convolution.hpp) with their roles swapped - forward `conv_backward_input`, input
//! gradient `conv`, kernel gradient `conv_backward_kernel` - and agree with Keras' (JAX's
//! conv_transpose with transpose_kernel, TensorFlow's conv2d_transpose).
//!
//! Spatially sharded, as the convolutions are (kdist/nn/layers/convolution.hpp): each process
//! computes its block of the output from the inputs whose kernels reach it - its own block and the
//! edge of a neighbour's, by the halo exchange - crops the block out of what they spread over, and
//! in the backward pass sends the gradient of the neighbours' inputs back. The kernel is used whole
//! (gathered when a rule shards it); its and the bias's gradients are pending sums over the batch
//! and spatial axes. The output keeps the input's batch and spatial axes, unless a rule on
//! "<name>/output" says otherwise. Keras' output_padding is not provided.

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <Kokkos_Core.hpp>

#include <kdist/core/detail/data_type_extents.hpp>
#include <kdist/nn/gradients.hpp>
#include <kdist/nn/layer.hpp>
#include <kdist/nn/layer_buffers.hpp>
#include <kdist/nn/layers/activation.hpp>
#include <kdist/nn/layers/convolution.hpp>
#include <kdist/nn/layers/spatial_halos.hpp>
#include <kdist/nn/layers/spatial_window.hpp>
#include <kdist/nn/weight_gather.hpp>
#include <kdist/ops/activations.hpp>
#include <kdist/ops/convolution.hpp>
#include <kdist/ops/random.hpp>
#include <kdist/ops/shifted_copy.hpp>
#include <kdist/strategy/distribution.hpp>
#include <kdist/tensor/redistribute.hpp>
#include <kdist/tensor/reusable_views.hpp>
#include <kdist/tensor/tensor.hpp>

namespace kdist::layers {

template <class T, std::size_t S>
class BasicConvTranspose {
  static_assert(S == 2 || S == 3, "kdist::layers::BasicConvTranspose: 2 or 3 spatial axes");

 public:
  using value_type = T;
  using Images = DistributedTensor<typename kdist::detail::dynamic_data_type<T, S + 2>::type>;
  using Vector = DistributedTensor<T*>;
  using Extents = std::array<std::size_t, S>;

  //! Errors: ValueError for 0 filters, a 0 kernel extent, stride or dilation, padding
  //! "periodic", or a softmax or gelu activation.
  BasicConvTranspose(std::size_t filters, Extents kernel_size, Activation activation, bool use_bias,
                     std::string name, ConvOptions<S> options = {})
      : filters_(filters),
        kernel_size_(kernel_size),
        activation_(activation),
        use_bias_(use_bias),
        name_(std::move(name)),
        options_(options) {
    check_convolution_arguments<S>(prefix(), filters, kernel_size, options, activation);
    if (options.padding == Padding::periodic) {
      throw ValueError(prefix() +
                       "padding 'periodic' is not defined for a transposed convolution; give "
                       "'valid' or 'same'");
    }
  }

  static constexpr std::string_view keras_class = S == 2 ? "Conv2DTranspose" : "Conv3DTranspose";
  const std::string& name() const { return name_; }
  std::size_t filters() const { return filters_; }
  const Extents& kernel_size() const { return kernel_size_; }
  const ConvOptions<S>& options() const { return options_; }

  //! Builds for examples (spatial..., channels); returns (out..., filters): Keras' extents,
  //! extent * stride (+ max(span - stride, 0) for "valid"). The kernel (k..., filters, in_channels)
  //! is glorot_uniform with Keras' fans for it (prod(k) * filters, prod(k) * in_channels); bias
  //! zeros.
  Shape build(const Shape& input_shape, const Distribution& dist, std::uint64_t seed) {
    if (input_shape.size() != S + 1) {
      throw ValueError(prefix() + "takes examples of shape " +
                       (S == 2 ? "(height, width, channels)" : "(depth, height, width, channels)") +
                       ", not " + kdist::detail::shape_repr(input_shape));
    }
    const std::size_t cin = input_shape[S];
    std::array<std::size_t, S + 2> kshape{};
    std::size_t taps = 1;
    for (std::size_t a = 0; a < S; ++a) {
      kshape[a] = kernel_size_[a];
      taps *= kernel_size_[a];
    }
    kshape[S] = filters_;
    kshape[S + 1] = cin;
    const std::string kpath = name_ + "/kernel";
    const auto klayout = dist.get_variable_layout(
        VariableInfo(kpath, std::vector<std::size_t>(kshape.begin(), kshape.end())));
    kernel_.path = kpath;
    kernel_.value = kdist::detail::glorot_kernel<T, S>(kshape, klayout, seed, stream_id(kpath),
                                                       taps * filters_, taps * cin);
    kernel_.grad = Images::zeros(kshape, klayout, kpath + "/grad");
    if (use_bias_) {
      const std::string bpath = name_ + "/bias";
      const auto blayout = dist.get_variable_layout(VariableInfo(bpath, {filters_}));
      bias_ = TrainableVariable<T*>{bpath, Vector::zeros({filters_}, blayout, bpath),
                                    Vector::zeros({filters_}, blayout, bpath + "/grad")};
    }
    output_layout_ = dist.get_tensor_layout(name_ + "/output");
    Shape out;
    for (const auto& a : windows(input_shape)) out.push_back(a.output_extent());
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
    // Computed in the input's batch and spatial axes, the channels whole.
    auto axes = x0.layout().axes();
    axes[S + 1] = DimAxes();
    x_ = contiguous(redistribute(x0, RuntimeTensorLayout(axes, mesh), x_moved_), packed_views_);
    const RuntimeTensorLayout whole(std::vector<DimAxes>(S + 2), mesh);
    k_ = kernel_.value.layout() == whole
             ? kernel_.value
             : contiguous(kernel_moved_(kernel_.value, whole, context.bfloat16_gathers),
                          packed_views_);
    const auto& s = x_.shape();
    const auto w = windows(Shape(s.begin() + 1, s.begin() + 1 + S));
    halos_.plan(std::vector<std::size_t>(s.begin(), s.end()), x_.layout(), w);
    xe_ = halos_.gather(x_.local());
    typename Images::shape_type yshape{}, yblock{};
    yshape[0] = s[0];
    yblock[0] = x_.local().extent(0);
    reads_anything_ = true;
    for (std::size_t a = 0; a < S; ++a) {
      yshape[a + 1] = w[a].output_extent();
      yblock[a + 1] = halos_.output_block(a).extent;
      reads_anything_ = reads_anything_ && halos_.reads(a).size() > 0 && yblock[a + 1] > 0;
      // where the block of outputs starts in what the gathered inputs spread over
      offsets_[a] = static_cast<std::int64_t>(halos_.output_block(a).offset) + w[a].pad_before() -
                    halos_.reads(a).begin * static_cast<std::int64_t>(w[a].stride);
    }
    yshape[S + 1] = yblock[S + 1] = filters_;
    const auto y = get_block(y_views_, name_ + "/y", yblock);
    if (reads_anything_) {
      const auto spread = get_block(full_views_, name_ + "/spread", spread_extents());
      ops::conv_backward_input(xe_, k_.local(), spread, window(), ops::AutoBackend{},
                               scratch(spread));
      ops::shifted_copy(spread, y, offsets_);
    } else {
      Kokkos::deep_copy(y, T(0));
    }
    const auto& out_axes = x_.layout().axes();
    std::vector<DimAxes> yaxes(out_axes.begin(), out_axes.end());
    yaxes[S + 1] = DimAxes();
    const RuntimeTensorLayout ylayout(yaxes, mesh);
    if (use_bias_) ops::bias_add(as_rows(y), bias_whole(mesh));
    if (activation_ == Activation::relu) ops::relu_inplace(as_rows(y));
    y_ = Images::from_local(y, yshape, ylayout, {});
    if (output_layout_) return redistribute(y_, *output_layout_, y_moved_);
    return y_;
  }

  std::optional<LayerTensor<T>> backward(const LayerTensor<T>& dy_in, bool need_input_grad,
                                         Gradients<T>& grads) {
    const auto& dy0 = kdist::detail::layer_input_as<Images>(
        dy_in, std::string(keras_class) + " '" + name_ + "'", "its gradient has its output's rank");
    Images dy = contiguous(redistribute(dy0, y_.layout(), dy_moved_), packed_views_);
    if (dy.local().data() == dy0.local().data()) dy = copy_of(dy, dy_views_);
    if (activation_ == Activation::relu) {
      ops::relu_backward_inplace(as_rows(y_.local()), as_rows(dy.local()));
    }
    std::vector<std::string> summed;
    for (std::size_t d = 0; d <= S; ++d) {
      for (const auto& a : y_.layout().axes()[d].names()) summed.push_back(a);
    }
    const auto& mesh = y_.layout().device_mesh();
    const auto& ks = kernel_.value.shape();
    const auto dk = get_block(dk_views_, name_ + "/dk", ks);
    const auto dxe = dx_views_.get_like(name_ + "/dx", xe_);
    if (reads_anything_) {
      // The gradient of what the gathered inputs spread over: this block's, zeros around it.
      const auto dfull = get_block(full_grad_views_, name_ + "/dspread", spread_extents());
      std::array<std::int64_t, S> back{};
      for (std::size_t a = 0; a < S; ++a) back[a] = -offsets_[a];
      ops::shifted_copy(dy.local(), dfull, back);
      ops::conv_backward_kernel(dfull, xe_, dk, window(), ops::AutoBackend{}, scratch(dfull));
      if (need_input_grad)
        ops::conv(dfull, k_.local(), dxe, window(), ops::AutoBackend{}, scratch(dfull));
    } else {
      Kokkos::deep_copy(dk, T(0));
      if (need_input_grad) Kokkos::deep_copy(dxe, T(0));
    }
    grads.add(kernel_, Images::from_local(
                           dk, ks, RuntimeTensorLayout(std::vector<DimAxes>(S + 2), mesh), summed));
    if (use_bias_) {
      const auto db = db_views_.get(name_ + "/db", filters_);
      ops::bias_grad(as_rows(dy.local()), db);
      grads.add(*bias_,
                Vector::from_local(db, {filters_}, RuntimeTensorLayout({DimAxes()}, mesh), summed));
    }
    if (!need_input_grad) return std::nullopt;
    const auto dx = Images::from_local(halos_.scatter_add(dxe), x_.shape(), x_.layout(), {});
    return LayerTensor<T>(redistribute(dx, *input_layout_, dx_moved_));
  }

  std::vector<VariableRef<T>> variables() {
    std::vector<VariableRef<T>> out{&kernel_};
    if (bias_) out.push_back(&*bias_);
    return out;
  }
  TrainableVariable<typename kdist::detail::dynamic_data_type<T, S + 2>::type>& kernel() {
    return kernel_;
  }
  std::optional<TrainableVariable<T*>>& bias() { return bias_; }

 private:
  std::string prefix() const {
    return "kdist::layers::" + std::string(keras_class) + " '" + name_ + "': ";
  }
  std::array<TransposedWindowAxis, S> windows(const Shape& extents) const {
    std::array<TransposedWindowAxis, S> w;
    for (std::size_t a = 0; a < S; ++a) {
      w[a] = TransposedWindowAxis{extents[a], kernel_size_[a], options_.strides[a],
                                  options_.dilation_rate[a], options_.padding};
    }
    return w;
  }
  ops::ConvWindow<S> window() const {
    ops::ConvWindow<S> w;
    w.strides = options_.strides;
    w.dilation_rate = options_.dilation_rate;
    return w;
  }
  typename Images::shape_type spread_extents() const {
    typename Images::shape_type e{};
    e[0] = xe_.extent(0);
    for (std::size_t a = 0; a < S; ++a) {
      e[a + 1] = (xe_.extent(a + 1) - 1) * options_.strides[a] +
                 (kernel_size_[a] - 1) * options_.dilation_rate[a] + 1;
    }
    e[S + 1] = filters_;
    return e;
  }
  //! The patch matrix for the convolution whose input is `spread` (its kernel: this layer's).
  template <class V>
  auto scratch(const V& spread) {
    const auto e = ops::conv_scratch_extents(spread, k_.local(), window());
    return scratch_views_.get(name_ + "/patches", e[0], e[1]);
  }
  //! The whole bias on this process.
  typename Vector::view_type bias_whole(const std::optional<RuntimeDeviceMesh>& mesh) {
    RuntimeTensorLayout layout({DimAxes()}, mesh);
    if (bias_->value.layout() == layout) return bias_->value.local();
    return redistribute(bias_->value, layout, bias_moved_).local();
  }

  std::size_t filters_;
  Extents kernel_size_;
  Activation activation_;
  bool use_bias_;
  std::string name_;
  ConvOptions<S> options_;
  TrainableVariable<typename kdist::detail::dynamic_data_type<T, S + 2>::type> kernel_;
  std::optional<TrainableVariable<T*>> bias_;
  std::optional<RuntimeTensorLayout> output_layout_, input_layout_;
  Images x_, y_, k_;
  typename Images::view_type xe_;          // the inputs whose kernels reach this process's outputs
  std::array<std::int64_t, S> offsets_{};  // this block's start in what they spread over
  bool reads_anything_ = false;
  SpatialHalos<typename Images::view_type, S> halos_;
  ReusableViews<typename Images::view_type> y_views_, full_views_, full_grad_views_, dy_views_,
      dk_views_, dx_views_, packed_views_, x_moved_, y_moved_, dy_moved_, dx_moved_;
  WeightGather<Images> kernel_moved_;
  ReusableViews<typename Vector::view_type> db_views_, bias_moved_;
  ReusableViews<Kokkos::View<T**, Kokkos::LayoutRight, typename Images::memory_space>>
      scratch_views_;
};

//! Keras' Conv2DTranspose and Conv3DTranspose on scalars T, and on float32.
template <class T>
using BasicConv2DTranspose = BasicConvTranspose<T, 2>;
template <class T>
using BasicConv3DTranspose = BasicConvTranspose<T, 3>;
using Conv2DTranspose = BasicConv2DTranspose<float>;
using Conv3DTranspose = BasicConv3DTranspose<float>;

}  // namespace kdist::layers
