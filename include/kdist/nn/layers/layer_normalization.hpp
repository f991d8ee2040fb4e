#pragma once
//! \file nn/layers/layer_normalization.hpp
//! `kdist::layers::LayerNormalization`: Keras' LayerNormalization over the last axis (epsilon
//! 1e-3, center and scale) on distributed (batch, features) or (batch, seq, features) tensors.
//! The variables "<name>/gamma" (ones) and "<name>/beta" (zeros), (features,), take the layouts
//! the distribution gives them. Each process normalises the rows it holds: the rows may be
//! sharded over any axes (batch, and sequence under sequence parallelism), the features are
//! gathered when sharded. The gradients of gamma and beta are sums over the rows: pending sums
//! over the axes that shard the rows, resolved into the variables' layouts. The output keeps the
//! input's rows layout with the features whole, or takes the distribution's layout for
//! "<name>/output".

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <variant>
#include <vector>

#include <Kokkos_Core.hpp>

#include <kdist/nn/explicit_instantiation.hpp>
#include <kdist/nn/gradients.hpp>
#include <kdist/nn/layer.hpp>
#include <kdist/nn/layer_buffers.hpp>
#include <kdist/ops/layer_norm.hpp>
#include <kdist/strategy/distribution.hpp>
#include <kdist/tensor/redistribute.hpp>
#include <kdist/tensor/reusable_views.hpp>
#include <kdist/tensor/tensor.hpp>

namespace kdist::layers {

//! LayerNormalization on scalars `T` (float or double).
template <class T>
class BasicLayerNormalization {
 public:
  using value_type = T;
  using Matrix = DistributedTensor<T**>;
  using Sequence = DistributedTensor<T***>;
  using Vector = DistributedTensor<T*>;

  //! Errors: ValueError for an epsilon that is not > 0.
  explicit BasicLayerNormalization(std::string name = "layer_normalization", double epsilon = 1e-3,
                                   bool center = true, bool scale = true)
      : name_(std::move(name)), epsilon_(epsilon), center_(center), scale_(scale) {
    if (!(epsilon > 0)) {
      throw ValueError(who() + "epsilon must be > 0 (Keras' default is 1e-3), got " +
                       std::to_string(epsilon));
    }
  }

  const std::string& name() const { return name_; }
  //! The Keras class this layer mirrors (its group in a Keras `.weights.h5` file).
  static constexpr std::string_view keras_class = "LayerNormalization";

  //! What the backward pass reads, for a 16-bit dtype policy to keep in 16 bits
  //! (kdist/nn/autocast.hpp): the input (its mean and reciprocal deviation stay float32).
  template <class F>
  void for_each_kept_activation(F&& f) {
    std::visit(
        [&](auto& x) {
          if constexpr (!std::is_same_v<std::remove_cvref_t<decltype(x)>, std::monostate>) {
            f(x);
            x_rows_ = x.local().data() != nullptr ? as_rows(x.local()) : Rows();  // its alias
          }
        },
        x_);
  }
  double epsilon() const { return epsilon_; }
  bool center() const { return center_; }
  bool scale() const { return scale_; }

  // ---- kdist::Layer -----------------------------------------------------------------------------
  //! Builds for examples (features,) or (seq, features); returns the same shape.
  //! Errors: ValueError for examples of another rank or 0 features.
  Shape build(const Shape& input_shape, const Distribution& dist, std::uint64_t /*seed*/) {
    if (input_shape.size() != 1 && input_shape.size() != 2) {
      throw ValueError(who() + "takes examples of shape (features,) or (sequence, features), not " +
                       kdist::detail::shape_repr(input_shape));
    }
    build(input_shape.back(), dist);
    return input_shape;
  }
  LayerTensor<T> forward(const LayerTensor<T>& x, const StepContext&) {
    if (const auto* m = std::get_if<Matrix>(&x)) return forward(*m);
    return forward(kdist::detail::layer_input_as<Sequence>(
        x, "LayerNormalization '" + name_ + "'",
        "give it (batch, features) or (batch, sequence, features) tensors"));
  }
  std::optional<LayerTensor<T>> backward(const LayerTensor<T>& dy, bool need_input_grad,
                                         Gradients<T>& grads) {
    if (const auto* m = std::get_if<Matrix>(&dy)) {
      auto dx = backward(*m, need_input_grad, grads);
      if (!dx) return std::nullopt;
      return LayerTensor<T>(std::move(*dx));
    }
    auto dx =
        backward(kdist::detail::layer_input_as<Sequence>(dy, "LayerNormalization '" + name_ + "'",
                                                         "its gradient has its output's rank"),
                 need_input_grad, grads);
    if (!dx) return std::nullopt;
    return LayerTensor<T>(std::move(*dx));
  }
  std::vector<VariableRef<T>> variables() {
    std::vector<VariableRef<T>> out;
    if (gamma_) out.push_back(&*gamma_);
    if (beta_) out.push_back(&*beta_);
    return out;
  }
  // -----------------------------------------------------------------------------------------------

  //! Creates gamma (ones) and beta (zeros), (features,), with the distribution's layouts.
  //! Errors: ValueError for 0 features.
  void build(std::size_t features, const Distribution& dist) {
    if (features == 0) throw ValueError(who() + "the inputs have 0 features; give it >= 1");
    features_ = features;
    if (scale_) {
      const std::string path = name_ + "/gamma";
      auto layout = dist.get_variable_layout(VariableInfo(path, {features}));
      Vector ones = Vector::uninitialized({features}, layout, path);
      Kokkos::deep_copy(ones.local(), T(1));
      gamma_ = Variable<T*>{path, ones, Vector::zeros({features}, layout, path + "/grad")};
    }
    if (center_) {
      const std::string path = name_ + "/beta";
      auto layout = dist.get_variable_layout(VariableInfo(path, {features}));
      beta_ = Variable<T*>{path, Vector::zeros({features}, layout, path),
                           Vector::zeros({features}, layout, path + "/grad")};
    }
    // Without gamma or beta the kernels take constant ones or zeros, made once here.
    ones_ = zeros_ = typename Vector::view_type();
    if (!scale_) {
      ones_ = typename Vector::view_type(
          Kokkos::view_alloc(Kokkos::WithoutInitializing, name_ + "/ones"), features);
      Kokkos::deep_copy(ones_, T(1));
    }
    if (!center_) zeros_ = typename Vector::view_type(name_ + "/zeros", features);
    output_layout_ = dist.get_tensor_layout(name_ + "/output");
  }

  std::optional<Variable<T*>>& gamma() { return gamma_; }
  std::optional<Variable<T*>>& beta() { return beta_; }

  //! The normalised rows of `x` (batch, features), in any layout. Collective.
  Matrix forward(const Matrix& x) { return forward_impl(x); }
  //! The normalised rows of `x` (batch, seq, features), in any layout. Collective.
  Sequence forward(const Sequence& x) { return forward_impl(x); }
  //! Given dL/dy, hands gamma's and beta's gradients to `grads` (pending sums over the rows'
  //! axes) and returns dL/dx (laid out as the input) when `need_input_grad`. Collective.
  std::optional<Matrix> backward(const Matrix& dy, bool need_input_grad, Gradients<T>& grads) {
    return backward_impl(dy, need_input_grad, grads);
  }
  std::optional<Sequence> backward(const Sequence& dy, bool need_input_grad, Gradients<T>& grads) {
    return backward_impl(dy, need_input_grad, grads);
  }

 private:
  using Rows = Kokkos::View<T**, Kokkos::LayoutRight, typename Vector::memory_space,
                            Kokkos::MemoryTraits<Kokkos::Unmanaged>>;

  std::string who() const { return "kdist::layers::LayerNormalization '" + name_ + "': "; }

  //! The layout of `x` with the last dimension whole.
  template <class Tensor>
  static RuntimeTensorLayout rows_layout(const Tensor& x) {
    auto axes = x.layout().axes();
    axes.back() = DimAxes();
    return RuntimeTensorLayout(axes, x.layout().device_mesh());
  }

  //! A new contiguous View of v's extents (contents not initialised).
  template <class View>
  static View alloc_like(const std::string& label, const View& v) {
    Kokkos::LayoutRight layout;
    for (unsigned d = 0; d < static_cast<unsigned>(View::rank); ++d) {
      layout.dimension[d] = v.extent(d);
    }
    return View(Kokkos::view_alloc(Kokkos::WithoutInitializing, label), layout);
  }

  //! `t` with a contiguous local block (a copy when redistribute left a strided one).
  template <class Tensor>
  static Tensor contiguous(const Tensor& t) {
    if (t.local().span_is_contiguous()) return t;
    auto copy = alloc_like("packed", t.local());
    Kokkos::deep_copy(copy, t.local());
    return Tensor::from_local(copy, t.shape(), t.layout(), t.partial_axes());
  }

  //! A contiguous block (rows..., features) seen as (rows, features).
  template <class View>
  static Rows as_rows(const View& v) {
    std::size_t rows = 1;
    constexpr unsigned last = static_cast<unsigned>(View::rank) - 1;
    for (unsigned d = 0; d < last; ++d) rows *= v.extent(d);
    return Rows(v.data(), rows, v.extent(last));
  }

  //! gamma or beta whole on this process, or `constant` (ones_ or zeros_) when the layer has none.
  typename Vector::view_type whole(const std::optional<Variable<T*>>& v,
                                   const typename Vector::view_type& constant,
                                   const std::optional<RuntimeDeviceMesh>& mesh,
                                   ReusableViews<typename Vector::view_type>& buffers) {
    if (!v) return constant;
    RuntimeTensorLayout replicated({DimAxes()}, mesh);
    if (v->value.layout() == replicated) return v->value.local();
    return redistribute(v->value, replicated, buffers).local();
  }

  template <class Tensor>
  Tensor forward_impl(const Tensor& x_in) {
    if (features_ == 0) {
      throw ValueError(who() + "is not built; call build(features, distribution) first");
    }
    if (x_in.shape()[Tensor::rank - 1] != features_) {
      throw ValueError(who() + "was built for " + std::to_string(features_) +
                       " features but the input has " +
                       std::to_string(x_in.shape()[Tensor::rank - 1]));
    }
    const auto& mesh = x_in.layout().device_mesh();
    input_layout_ = x_in.layout();
    const Tensor x = contiguous(redistribute(x_in, rows_layout(x_in), x_moved_));
    x_ = x;
    x_rows_ = as_rows(x.local());
    const std::size_t n = x_rows_.extent(0);
    mean_ = mean_views_.get("mean", n);
    rstd_ = rstd_views_.get("rstd", n);
    gamma_whole_ = whole(gamma_, ones_, mesh, gamma_moved_);
    auto y = outputs_.get_like(name_ + "/y", x.local());
    ops::layer_norm_forward(x_rows_, gamma_whole_, whole(beta_, zeros_, mesh, beta_moved_),
                            epsilon_, as_rows(y), mean_, rstd_);
    auto out = Tensor::from_local(y, x.shape(), x.layout());
    if (output_layout_) return redistribute(out, *output_layout_, y_moved_);
    return out;
  }

  template <class Tensor>
  std::optional<Tensor> backward_impl(const Tensor& dy_in, bool need_input_grad,
                                      Gradients<T>& grads) {
    const Tensor* x = std::get_if<Tensor>(&x_);
    if (!x) {
      throw ValueError(who() +
                       "backward needs the forward pass of a tensor of the gradient's "
                       "rank first");
    }
    const Tensor dy = contiguous(redistribute(dy_in, x->layout(), dy_moved_));
    const auto dy_rows = as_rows(dy.local());
    const auto& mesh = x->layout().device_mesh();
    // gamma's and beta's gradients sum over the rows: a pending sum over the axes sharding them.
    std::vector<std::string> partial;
    for (std::size_t d = 0; d + 1 < Tensor::rank; ++d) {
      for (const auto& a : x->layout().axes()[d].names()) partial.push_back(a);
    }
    const auto dgamma = dgamma_views_.get("dgamma", features_);
    const auto dbeta = dbeta_views_.get("dbeta", features_);
    ops::layer_norm_backward_params(x_rows_, dy_rows, mean_, rstd_, dgamma, dbeta);
    RuntimeTensorLayout replicated({DimAxes()}, mesh);
    if (gamma_) grads.add(*gamma_, Vector::from_local(dgamma, {features_}, replicated, partial));
    if (beta_) grads.add(*beta_, Vector::from_local(dbeta, {features_}, replicated, partial));
    if (!need_input_grad) return std::nullopt;
    auto dx = gradients_.get_like(name_ + "/dx", dy.local());
    ops::layer_norm_backward_input(x_rows_, dy_rows, gamma_whole_, mean_, rstd_, as_rows(dx));
    return redistribute(Tensor::from_local(dx, x->shape(), x->layout()), *input_layout_, dx_moved_);
  }

  std::string name_;
  double epsilon_;
  bool center_, scale_;
  std::size_t features_ = 0;
  std::optional<Variable<T*>> gamma_, beta_;
  std::optional<RuntimeTensorLayout> output_layout_, input_layout_;
  std::variant<std::monostate, Matrix, Sequence> x_;
  Rows x_rows_;
  typename Vector::view_type mean_, rstd_, gamma_whole_;
  typename Vector::view_type ones_, zeros_;  // gamma and beta of a layer without them (constants)
  // A step's buffers, kept for the next steps (kdist::ReusableViews: no allocation per step).
  LayerBuffers<T> outputs_, gradients_;
  ReusableViews<typename Vector::view_type> mean_views_, rstd_views_, dgamma_views_, dbeta_views_;
  // What the redistributions write (the input in rows, the output, the gradients, gathered
  // gamma and beta), kept likewise.
  LayerBuffers<T> x_moved_, y_moved_, dy_moved_, dx_moved_;
  ReusableViews<typename Vector::view_type> gamma_moved_, beta_moved_;
};

//! Keras' LayerNormalization on float32, the default dtype.
using LayerNormalization = BasicLayerNormalization<float>;

}  // namespace kdist::layers

KDIST_EXTERN_LAYER(BasicLayerNormalization)
