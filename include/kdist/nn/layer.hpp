#pragma once
//! \file nn/layer.hpp
//! The `kdist::Layer` concept: what a class needs so that `kdist::Sequential` can train it on any
//! mesh. A layer creates its variables through the distribution (`build`), maps a distributed
//! tensor to a distributed tensor (`forward`), and maps the gradient of its output to the gradient
//! of its input while handing its variables' gradients back, unresolved (`backward`, into a
//! kdist::Gradients: the training step sums them, overlapped with the rest of the pass). What flows between layers is
//! a `LayerTensor<T>`: a distributed matrix (batch, features) or a distributed NHWC image batch
//! (batch, height, width, channels). `AnyLayer<T>` holds any Layer by value (type erasure), so a
//! model is a list of layers of any type, the user's own included (docs/guide/06-custom-training.md).
//!
//! \code
//! struct Scale {                       // y = 2 x, no variables
//!   using value_type = float;
//!   std::string name() const { return "scale"; }
//!   kdist::Shape build(const kdist::Shape& in, const kdist::Distribution&, std::uint64_t) {
//!     return in;
//!   }
//!   kdist::LayerTensor<float> forward(const kdist::LayerTensor<float>& x,
//!                                     const kdist::StepContext&) { ... }
//!   std::optional<kdist::LayerTensor<float>> backward(const kdist::LayerTensor<float>& dy,
//!                                                     bool need_input_grad,
//!                                                     kdist::Gradients<float>& grads) { ... }
//!   std::vector<kdist::VariableRef<float>> variables() { return {}; }
//! };
//! static_assert(kdist::Layer<Scale>);
//! \endcode

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include <kdist/core/concepts.hpp>
#include <kdist/core/error.hpp>
#include <kdist/nn/gradients.hpp>
#include <kdist/nn/remat.hpp>
#include <kdist/nn/shape.hpp>
#include <kdist/nn/variable.hpp>
#include <kdist/strategy/distribution.hpp>
#include <kdist/tensor/tensor.hpp>

namespace kdist {

class DeviceChecks;  // kdist/nn/device_checks.hpp

//! What flows between layers: (batch, features), (batch, sequence, features) or (batch, height,
//! width, channels).
template <class T>
using LayerTensor =
    std::variant<DistributedTensor<T**>, DistributedTensor<T***>, DistributedTensor<T****>>;

//! What a forward pass needs besides its input.
struct StepContext {
  bool training = true;        //!< fit (dropout active) or evaluate / predict
  std::uint64_t seed = 0;      //!< the model's seed (dropout masks)
  std::uint64_t step = 0;      //!< the optimizer's iteration count (dropout masks)
  bool output_logits = false;  //!< a final softmax is left to the loss (fused cross-entropy)
  //! The step count in the memory of the model's Views, when the step keeps one there
  //! (kdist::detail::DeviceIterations): kernels that draw random numbers read it themselves, so
  //! that a step captured once as a device graph draws each replay's own masks.
  const std::int64_t* step_at = nullptr;
  //! Where a step kept on the device checks its inputs (kdist::DeviceChecks): layers that check
  //! ids (an Embedding's) record failures there instead of reading them back; nullptr: on the host.
  DeviceChecks* checks = nullptr;
};

//! The requirements on a layer on scalars `T`.
template <class L, class T = typename L::value_type>
concept Layer = std::copy_constructible<L> &&
    requires(L& layer, const L& const_layer, const Shape& input_shape,
             const Distribution& distribution, std::uint64_t seed, const LayerTensor<T>& tensor,
             const StepContext& context, Gradients<T>& gradients) {
  { const_layer.name() } -> std::convertible_to<std::string>;
  //! Creates the variables for inputs of `input_shape`; returns the output shape.
  { layer.build(input_shape, distribution, seed) } -> std::same_as<Shape>;
  //! The output; keeps what backward needs.
  { layer.forward(tensor, context) } -> std::same_as<LayerTensor<T>>;
  //! Given dL/d(output), hands each variable's gradient to `gradients` (any layout, maybe a
  //! pending sum) and returns dL/d(input) when asked.
  { layer.backward(tensor, bool{}, gradients) } -> std::same_as<std::optional<LayerTensor<T>>>;
  { layer.variables() } -> std::same_as<std::vector<VariableRef<T>>>;
};

namespace error {
//! A Sequential (kdist::AnyLayer) given a type `L` that does not satisfy kdist::Layer on scalars
//! `T` (a missing or mistyped member, or a layer of another scalar type).
template <class L, class T>
struct type_is_not_a_layer_on;
}  // namespace error

namespace detail {

//! "Dense 'd1' takes (batch, features) inputs but was given a tensor of rank 4; ..."
template <class Want, class T>
const Want& layer_input_as(const LayerTensor<T>& x, const std::string& who, const char* fix) {
  if (const auto* t = std::get_if<Want>(&x)) return *t;
  const std::size_t rank = std::visit([](const auto& v) { return v.rank; }, x);
  throw ValueError("kdist::layers::" + who + " takes tensors of rank " +
                   std::to_string(Want::rank) + " but was given one of rank " +
                   std::to_string(rank) + "; " + fix);
}

//! Whether the layer ends in a softmax a cross-entropy loss may fuse (it has activation() and
//! it is softmax).
template <class L>
bool ends_in_softmax(const L& layer) {
  if constexpr (requires { layer.ends_in_softmax(); }) {
    return layer.ends_in_softmax();
  } else {
    return false;
  }
}

}  // namespace detail

//! Any `Layer` on scalars `T`, held by value (copying copies the layer). A layer held while a
//! kdist::RematScope lives is rematerialised as the scope says (kdist/nn/remat.hpp).
template <class T>
class AnyLayer {
 public:
  using value_type = T;

  //! Holds a copy of `layer`, rematerialised when the innermost kdist::RematScope selects it. A
  //! type that is not a kdist::Layer on T does not compile (kdist::error::type_is_not_a_layer_on<L,
  //! T>); see the concept for what it needs.
  template <DifferentFrom<AnyLayer> L>
  AnyLayer(L&& layer) : AnyLayer(RematScope::current(), std::forward<L>(layer)) {}

  //! Holds a copy of `layer`, rematerialised as `settings` say (nullptr: not at all), whatever
  //! scope lives (kdist::remat).
  template <DifferentFrom<AnyLayer> L>
  AnyLayer(const RematSettings* settings, L&& layer)
      : self_(make_model<std::remove_cvref_t<L>>(std::forward<L>(layer))) {
    if (self_) self_->set_remat(Remat::select(settings, self_->name()));
  }
  AnyLayer(const AnyLayer& other) : self_(other.self_->clone()) {}
  AnyLayer(AnyLayer&&) noexcept = default;
  AnyLayer& operator=(const AnyLayer& other) {
    if (this != &other) self_ = other.self_->clone();
    return *this;
  }
  AnyLayer& operator=(AnyLayer&&) noexcept = default;

  std::string name() const { return self_->name(); }
  Shape build(const Shape& input_shape, const Distribution& dist, std::uint64_t seed) {
    return self_->build(input_shape, dist, seed);
  }
  LayerTensor<T> forward(const LayerTensor<T>& x, const StepContext& context) {
    return self_->forward(x, context);
  }
  std::optional<LayerTensor<T>> backward(const LayerTensor<T>& dy, bool need_input_grad,
                                         Gradients<T>& gradients) {
    return self_->backward(dy, need_input_grad, gradients);
  }
  std::vector<VariableRef<T>> variables() { return self_->variables(); }
  bool ends_in_softmax() const { return self_->ends_in_softmax(); }
  //! The Keras class the layer mirrors (`L::keras_class`, e.g. "Dense"), or "" for a layer that
  //! names none; kdist::save_keras_weights needs it to name the layer's group.
  std::string keras_class() const { return self_->keras_class(); }

  //! The RematScope settings the layer is rematerialised under; nullptr when it is not.
  const RematSettings* remat_settings() const { return self_->remat_settings(); }

  //! The layer as its own type, or nullptr if it holds another type.
  template <class L>
  L* get_if() {
    auto* m = dynamic_cast<Model<L>*>(self_.get());
    return m ? &m->layer : nullptr;
  }

 private:
  using Remat = detail::Rematerializer<T, LayerTensor<T>, StepContext>;

  struct Concept {
    virtual ~Concept() = default;
    virtual void set_remat(std::optional<Remat> remat) = 0;
    virtual const RematSettings* remat_settings() const = 0;
    virtual std::unique_ptr<Concept> clone() const = 0;
    virtual std::string name() const = 0;
    virtual Shape build(const Shape&, const Distribution&, std::uint64_t) = 0;
    virtual LayerTensor<T> forward(const LayerTensor<T>&, const StepContext&) = 0;
    virtual std::optional<LayerTensor<T>> backward(const LayerTensor<T>&, bool, Gradients<T>&) = 0;
    virtual std::vector<VariableRef<T>> variables() = 0;
    virtual bool ends_in_softmax() const = 0;
    virtual std::string keras_class() const = 0;
  };
  template <class L>
  struct Model final : Concept {
    explicit Model(L l) : layer(std::move(l)) {}
    std::unique_ptr<Concept> clone() const override {
      auto m = std::make_unique<Model>(layer);
      m->remat = remat;
      return m;
    }
    void set_remat(std::optional<Remat> r) override { remat = std::move(r); }
    const RematSettings* remat_settings() const override {
      return remat ? &remat->settings() : nullptr;
    }
    std::string name() const override { return std::string(layer.name()); }
    Shape build(const Shape& s, const Distribution& d, std::uint64_t seed) override {
      Shape out = layer.build(s, d, seed);
      if (remat) remat->built(out);
      return out;
    }
    LayerTensor<T> forward(const LayerTensor<T>& x, const StepContext& c) override {
      return remat ? remat->forward(layer, x, c) : layer.forward(x, c);
    }
    std::optional<LayerTensor<T>> backward(const LayerTensor<T>& dy, bool need,
                                           Gradients<T>& gradients) override {
      return remat ? remat->backward(layer, dy, need, gradients)
                   : layer.backward(dy, need, gradients);
    }
    std::vector<VariableRef<T>> variables() override { return layer.variables(); }
    bool ends_in_softmax() const override { return detail::ends_in_softmax(layer); }
    std::string keras_class() const override {
      if constexpr (requires { L::keras_class; }) {
        return std::string(L::keras_class);
      } else {
        return {};
      }
    }
    L layer;
    std::optional<Remat> remat;  //!< set when a RematScope selected the layer
  };
  template <class L, class Arg>
  static std::unique_ptr<Concept> make_model(Arg&& layer) {
    static_assert(detail::diagnose<Layer<L, T>, error::type_is_not_a_layer_on<L, T>>::value,
                  "kdist::AnyLayer: this type is not a kdist::Layer on the model's scalar type; "
                  "it needs value_type, name(), build(kdist::Shape, const kdist::Distribution&, "
                  "std::uint64_t) -> kdist::Shape, forward(const kdist::LayerTensor<T>&, const "
                  "kdist::StepContext&) -> kdist::LayerTensor<T>, backward(const "
                  "kdist::LayerTensor<T>&, bool, kdist::Gradients<T>&) -> "
                  "std::optional<kdist::LayerTensor<T>>, "
                  "variables() -> std::vector<kdist::VariableRef<T>> (kdist/nn/layer.hpp)");
    if constexpr (Layer<L, T>) {
      return std::make_unique<Model<L>>(std::forward<Arg>(layer));
    } else {
      return nullptr;
    }
  }

  std::unique_ptr<Concept> self_;
};

//! `layer` rematerialised (Keras' `keras.remat(layer)`): its forward pass's buffers are dropped and
//! recomputed before its backward pass, whatever kdist::RematScope lives (kdist/nn/remat.hpp).
template <class T, class L>
AnyLayer<T> remat(L&& layer) {
  RematSettings settings;
  settings.mode = RematMode::full;
  settings.arena = detail::ViewArena::for_this_thread();
  return AnyLayer<T>(&settings, std::forward<L>(layer));
}

//! Calls f(Variable<...>&) for every variable of `layers`, in layer order (kernel before bias).
template <class T, class F>
void for_each_variable(std::vector<AnyLayer<T>>& layers, F&& f) {
  for (auto& l : layers) {
    for (auto& ref : l.variables()) std::visit([&](auto* v) { f(*v); }, ref);
  }
}

}  // namespace kdist
