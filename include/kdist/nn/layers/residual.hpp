#pragma once
//! \file nn/layers/residual.hpp
//! `kdist::layers::Residual`: `y = x + f(x)` where `f` is a list of layers applied in order (Keras'
//! `layers.Add()([x, f(x)])` in the functional API). A transformer block is two of them:
//!
//! \code
//! using namespace kdist::layers;
//! std::vector<kdist::Sequential::Layer> block;
//! block.emplace_back(Residual("block0/attn", {LayerNormalization("block0/ln1"),
//!                                             MultiHeadAttention(4, 32, "block0/mha")}));
//! block.emplace_back(Residual("block0/mlp", {LayerNormalization("block0/ln2"),
//!                                            Dense(512, Activation::gelu, true, "block0/up"),
//!                                            Dense(128, Activation::none, true, "block0/down")}));
//! \endcode
//!
//! A user's block is written the same way, from any kdist::Layer, the user's own included. The
//! sum is laid out like `x` unless a LayoutMap rule names `<name>/output` (sequence parallelism:
//! `.*block.*/output` -> ("data", "model", None)); `f(x)` is redistributed to that layout first, so
//! a pending sum that `f` leaves (a row-parallel Dense) is resolved by the same redistribute
//! (all-reduce, or reduce-scatter onto sequence shards). Backward: dx = dy + df/dx(dy), each
//! term brought to x's layout.

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include <kdist/core/error.hpp>
#include <kdist/nn/explicit_instantiation.hpp>
#include <kdist/nn/layer.hpp>
#include <kdist/nn/layer_buffers.hpp>
#include <kdist/nn/shape.hpp>
#include <kdist/ops/elementwise.hpp>
#include <kdist/strategy/distribution.hpp>
#include <kdist/tensor/redistribute.hpp>
#include <kdist/tensor/tensor.hpp>

namespace kdist::layers {

template <class T>
class BasicResidual {
 public:
  using value_type = T;

  //! `y = x + inner(x)`; `name` names the sum (`<name>/output` is its LayoutMap key).
  //! Errors: kdist::ValueError for an empty inner list.
  BasicResidual(std::string name, std::vector<AnyLayer<T>> inner)
      : name_(std::move(name)), inner_(std::move(inner)) {
    if (inner_.empty()) {
      throw ValueError("kdist::layers::Residual '" + name_ +
                       "': give at least one inner layer (y = x + f(x))");
    }
  }
  const std::string& name() const { return name_; }
  std::vector<AnyLayer<T>>& layers() { return inner_; }

  // ---- kdist::Layer -------------------------------------------------------------------------
  //! Errors: kdist::ValueError when the inner layers change the shape (x + f(x) needs one shape).
  Shape build(const Shape& input_shape, const Distribution& dist, std::uint64_t seed) {
    Shape s = input_shape;
    for (auto& l : inner_) s = l.build(s, dist, seed);
    if (s != input_shape) {
      throw ValueError(
          "kdist::layers::Residual '" + name_ + "': its layers map examples of shape " +
          kdist::detail::shape_repr(input_shape) + " to " + kdist::detail::shape_repr(s) +
          "; a residual connection adds tensors of one shape (end f with a layer "
          "that projects back, e.g. Dense(" +
          std::to_string(input_shape.back()) + "))");
    }
    output_layout_ = dist.get_tensor_layout(name_ + "/output");
    return s;
  }

  LayerTensor<T> forward(const LayerTensor<T>& x, const StepContext& context) {
    // Between the inner layers flows what each computes in (16 bits under a mixed policy).
    ActivationTensor<T> flow = x;
    for (auto& l : inner_) flow = l.forward_autocast(flow, context);
    const LayerTensor<T> h = widened_(flow);
    return std::visit(
        [&](const auto& xt) -> LayerTensor<T> {
          using Tensor = std::decay_t<decltype(xt)>;
          const auto* ht = std::get_if<Tensor>(&h);
          if (ht == nullptr) {
            throw ValueError("kdist::layers::Residual '" + name_ +
                             "': f(x) has another rank than x");
          }
          input_layout_ = xt.layout();
          inner_layout_ = ht->layout();
          const RuntimeTensorLayout target =
              output_layout_ && output_layout_->axes().size() == Tensor::rank ? *output_layout_
                                                                              : xt.layout();
          return LayerTensor<T>(sum(redistribute(xt, target, x_moved_),
                                    redistribute(*ht, target, h_moved_), outputs_));
        },
        x);
  }

  //! dL/dx = dL/dy + f'(x)^T dL/dy; the inner layers hand their gradients to `grads`.
  std::optional<LayerTensor<T>> backward(const LayerTensor<T>& dy, bool need_input_grad,
                                         Gradients<T>& grads) {
    return std::visit(
        [&](const auto& dyt) -> std::optional<LayerTensor<T>> {
          using Tensor = std::decay_t<decltype(dyt)>;
          if (!inner_layout_ || !input_layout_) {
            throw ValueError("kdist::layers::Residual '" + name_ + "': backward before forward");
          }
          ActivationTensor<T> flow = LayerTensor<T>(redistribute(dyt, *inner_layout_, dh_moved_));
          for (std::size_t i = inner_.size(); i-- > 0;) {
            auto d = inner_[i].backward_autocast(flow, need_input_grad || i > 0, grads);
            grads.ready();  // this layer's sums may start under the next one's backward
            if (d) flow = std::move(*d);
          }
          if (!need_input_grad) return std::nullopt;
          const LayerTensor<T> dh = widened_(flow);
          const auto* dft = std::get_if<Tensor>(&dh);
          if (dft == nullptr) {
            throw ValueError("kdist::layers::Residual '" + name_ +
                             "': the gradient of f has another rank than x");
          }
          return LayerTensor<T>(sum(redistribute(dyt, *input_layout_, dx_moved_),
                                    redistribute(*dft, *input_layout_, df_moved_), gradients_));
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
  // -----------------------------------------------------------------------------------------------

 private:
  //! a + b in a View of the kept buffers `out`.
  template <class Tensor>
  static Tensor sum(const Tensor& a, const Tensor& b, LayerBuffers<T>& out) {
    const auto local = out.get_like("kdist::Residual::sum", a.local());
    ops::add(a.local(), b.local(), local);
    return Tensor::from_local(local, a.shape(), a.layout());
  }

  std::string name_;
  std::vector<AnyLayer<T>> inner_;
  std::optional<RuntimeTensorLayout> output_layout_;
  std::optional<RuntimeTensorLayout> input_layout_;
  std::optional<RuntimeTensorLayout> inner_layout_;
  LayerBuffers<T> outputs_, gradients_;  //!< the sums, kept across steps: no allocation per step
  //! What the redistributions write (x, f(x) and the gradients in the sums' layouts), kept too.
  LayerBuffers<T> x_moved_, h_moved_, dh_moved_, dx_moved_, df_moved_;
  //! f(x) and its input's gradient in T when the inner layers compute in 16 bits.
  detail::WidenedInputs<T> widened_;
};

using Residual = BasicResidual<float>;

}  // namespace kdist::layers

KDIST_EXTERN_LAYER(BasicResidual)
