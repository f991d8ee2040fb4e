#pragma once
//! \file nn/layers/concatenate.hpp
//! `kdist::layers::Concatenate`: `y = concatenate([x, f(x)], axis=-1)` where `f` is a list of
//! layers applied in order - Keras' `layers.Concatenate()([x, f(x)])` in the functional API, the
//! skip connection of a U-Net, written as kdist::layers::Residual writes `x + f(x)`. One level of
//! a U-Net:
//!
//! \code
//! using namespace kdist::layers;
//! std::vector<kdist::Sequential::Layer> unet;
//! unet.emplace_back(Conv2D(8, {3, 3}, Activation::relu, true, "conv", {.padding = Padding::same}));
//! unet.emplace_back(Concatenate("skip", {MaxPooling2D({2, 2}, "pool"),
//!                                        Conv2D(16, {3, 3}, Activation::relu, true, "conv_1",
//!                                               {.padding = Padding::same}),
//!                                        UpSampling2D({2, 2}, "up")}));
//! unet.emplace_back(Conv2D(8, {3, 3}, Activation::relu, true, "conv_2", {.padding = Padding::same}));
//! \endcode
//!
//! Levels nest: the inner list may hold a Concatenate of its own. `f` must keep every dimension
//! but the last (the features, or an image's channels). Both parts are brought to `x`'s layout with
//! the last dimension whole (a spatially sharded image stays sharded: the concatenation is local to
//! each block), unless a LayoutMap rule names `<name>/output`. Backward: the gradient is split at
//! the join; `x`'s part plus f's input gradient is dL/dx.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include <kdist/core/error.hpp>
#include <kdist/nn/autocast.hpp>
#include <kdist/nn/layer.hpp>
#include <kdist/nn/layer_buffers.hpp>
#include <kdist/nn/shape.hpp>
#include <kdist/ops/concatenate.hpp>
#include <kdist/ops/elementwise.hpp>
#include <kdist/strategy/distribution.hpp>
#include <kdist/tensor/redistribute.hpp>
#include <kdist/tensor/tensor.hpp>

namespace kdist::layers {

template <class T>
class BasicConcatenate {
 public:
  using value_type = T;

  //! `y = [x, inner(x)]` along the last axis; `name` names the join (`<name>/output` is its
  //! LayoutMap key). Errors: kdist::ValueError for an empty inner list.
  BasicConcatenate(std::string name, std::vector<AnyLayer<T>> inner)
      : name_(std::move(name)), inner_(std::move(inner)) {
    if (inner_.empty()) {
      throw ValueError("kdist::layers::Concatenate '" + name_ +
                       "': give at least one inner layer (y = concatenate([x, f(x)]))");
    }
  }
  static constexpr std::string_view keras_class = "Concatenate";
  const std::string& name() const { return name_; }
  std::vector<AnyLayer<T>>& layers() { return inner_; }

  //! Errors: kdist::ValueError when the inner layers change a dimension but the last.
  Shape build(const Shape& input_shape, const Distribution& dist, std::uint64_t seed) {
    Shape s = input_shape;
    for (auto& l : inner_) s = l.build(s, dist, seed);
    bool joins = s.size() == input_shape.size() && !s.empty();
    for (std::size_t d = 0; joins && d + 1 < s.size(); ++d) joins = s[d] == input_shape[d];
    if (!joins) {
      throw ValueError("kdist::layers::Concatenate '" + name_ +
                       "': its layers map examples of "
                       "shape " +
                       kdist::detail::shape_repr(input_shape) + " to " +
                       kdist::detail::shape_repr(s) +
                       "; a concatenation along the last axis needs every other dimension equal "
                       "(a U-Net level ends with the UpSampling2D that undoes its pooling)");
    }
    input_features_ = input_shape.back();
    inner_features_ = s.back();
    output_layout_ = dist.get_tensor_layout(name_ + "/output");
    s.back() += input_shape.back();
    return s;
  }

  LayerTensor<T> forward(const LayerTensor<T>& x, const StepContext& context) {
    ActivationTensor<T> flow = x;
    for (auto& l : inner_) flow = l.forward_autocast(flow, context);
    const LayerTensor<T> h = widened_(flow);
    return std::visit(
        [&](const auto& xt) -> LayerTensor<T> {
          using Tensor = std::decay_t<decltype(xt)>;
          const auto* ht = std::get_if<Tensor>(&h);
          if (ht == nullptr) {
            throw ValueError("kdist::layers::Concatenate '" + name_ +
                             "': f(x) has another rank than x");
          }
          input_layout_ = xt.layout();
          inner_layout_ = ht->layout();
          auto axes = xt.layout().axes();
          axes.back() = DimAxes();
          join_layout_ = RuntimeTensorLayout(axes, xt.layout().device_mesh());
          const Tensor a = contiguous(redistribute(xt, *join_layout_, x_moved_), packed_);
          const Tensor b = contiguous(redistribute(*ht, *join_layout_, h_moved_), packed_);
          auto shape = xt.shape();
          shape.back() += ht->shape().back();
          const auto y = block_like(outputs_, name_ + "/y", a.local(), shape.back());
          ops::concatenate_columns(as_rows(a.local()), as_rows(b.local()), as_rows(y));
          const Tensor joined = Tensor::from_local(y, shape, *join_layout_);
          if (output_layout_ && output_layout_->axes().size() == Tensor::rank) {
            return redistribute(joined, *output_layout_, y_moved_);
          }
          return joined;
        },
        x);
  }

  //! dL/dx = dL/dy's first part + f'(x)^T (dL/dy's second part).
  std::optional<LayerTensor<T>> backward(const LayerTensor<T>& dy, bool need_input_grad,
                                         Gradients<T>& grads) {
    return std::visit(
        [&](const auto& dyt) -> std::optional<LayerTensor<T>> {
          using Tensor = std::decay_t<decltype(dyt)>;
          if (!join_layout_) {
            throw ValueError("kdist::layers::Concatenate '" + name_ + "': backward before forward");
          }
          const Tensor whole = contiguous(redistribute(dyt, *join_layout_, dy_moved_), packed_);
          auto part = [&](std::size_t features, const char* label) {
            auto s = whole.shape();
            s.back() = features;
            return Tensor::from_local(block_like(parts_, name_ + label, whole.local(), features), s,
                                      *join_layout_);
          };
          const Tensor dx_direct = part(input_features_, "/dx");
          const Tensor dh = part(inner_features_, "/dh");
          ops::split_columns(as_rows(whole.local()), as_rows(dx_direct.local()),
                             as_rows(dh.local()));
          ActivationTensor<T> flow = LayerTensor<T>(redistribute(dh, *inner_layout_, dh_moved_));
          for (std::size_t i = inner_.size(); i-- > 0;) {
            auto d = inner_[i].backward_autocast(flow, need_input_grad || i > 0, grads);
            grads.ready();  // this layer's sums may start under the next one's backward
            if (d) flow = std::move(*d);
          }
          if (!need_input_grad) return std::nullopt;
          const LayerTensor<T> df = widened_(flow);
          const auto* dft = std::get_if<Tensor>(&df);
          if (dft == nullptr) {
            throw ValueError("kdist::layers::Concatenate '" + name_ +
                             "': the gradient of f has another rank than x");
          }
          const Tensor a = redistribute(dx_direct, *input_layout_, dx_moved_);
          const Tensor b = redistribute(*dft, *input_layout_, df_moved_);
          const auto sum = gradients_.get_like("kdist::Concatenate::dx", a.local());
          ops::add(a.local(), b.local(), sum);
          return LayerTensor<T>(Tensor::from_local(sum, a.shape(), a.layout()));
        },
        dy);
  }

  std::vector<VariableRef<T>> variables() {
    std::vector<VariableRef<T>> out;
    for (auto& l : inner_) {
      auto v = l.variables();
      out.insert(out.end(), v.begin(), v.end());
    }
    return out;
  }

 private:
  //! A kept View of `like`'s extents but the last, which is `last`.
  template <class View>
  static View block_like(LayerBuffers<T>& buffers, const std::string& label, const View& like,
                         std::size_t last) {
    auto& views = buffers.template of_rank<View::rank>();
    if constexpr (View::rank == 2) {
      return views.get(label, like.extent(0), last);
    } else if constexpr (View::rank == 3) {
      return views.get(label, like.extent(0), like.extent(1), last);
    } else if constexpr (View::rank == 4) {
      return views.get(label, like.extent(0), like.extent(1), like.extent(2), last);
    } else {
      return views.get(label, like.extent(0), like.extent(1), like.extent(2), like.extent(3), last);
    }
  }

  std::string name_;
  std::vector<AnyLayer<T>> inner_;
  std::size_t input_features_ = 0, inner_features_ = 0;
  std::optional<RuntimeTensorLayout> output_layout_, input_layout_, inner_layout_, join_layout_;
  // A step's buffers, kept for the next steps (no allocation per step): the joined output, the
  // gradient's parts and sum, packed copies and what the redistributions write.
  LayerBuffers<T> outputs_, parts_, gradients_, packed_;
  LayerBuffers<T> x_moved_, h_moved_, y_moved_, dy_moved_, dh_moved_, dx_moved_, df_moved_;
  //! f(x) and its input's gradient in T when the inner layers compute in 16 bits.
  detail::WidenedInputs<T> widened_;
};

using Concatenate = BasicConcatenate<float>;

}  // namespace kdist::layers
