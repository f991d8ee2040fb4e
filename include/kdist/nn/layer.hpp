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
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include <kdist/core/concepts.hpp>
#include <kdist/core/error.hpp>
#include <kdist/nn/autocast.hpp>
#include <kdist/nn/dtype_policy.hpp>
#include <kdist/nn/gradients.hpp>
#include <kdist/nn/layer_tensor.hpp>
#include <kdist/nn/remat.hpp>
#include <kdist/nn/shape.hpp>
#include <kdist/nn/sixteen_bit_variables.hpp>
#include <kdist/nn/variable.hpp>
#include <kdist/strategy/distribution.hpp>
#include <kdist/tensor/tensor.hpp>

namespace kdist {

class DeviceChecks;  // kdist/nn/device_checks.hpp

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
  //! FSDP weights gathered moving bfloat16 (GradientSyncOptions::bfloat16_gathers): layers pass
  //! it to their kdist::WeightGather.
  bool bfloat16_gathers = false;
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
  //! The layer takes the global dtype policy (kdist::mixed_precision::global_policy; errors: see
  //! set_dtype_policy).
  template <DifferentFrom<AnyLayer> L>
  AnyLayer(const RematSettings* settings, L&& layer)
      : self_(make_model<std::remove_cvref_t<L>>(std::forward<L>(layer))) {
    if (self_) {
      self_->set_remat(Remat::select(settings, self_->name()));
      set_dtype_policy(mixed_precision::global_policy());
    }
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
  //! The layer's output in T (widened from its compute dtype under a 16-bit policy).
  LayerTensor<T> forward(const LayerTensor<T>& x, const StepContext& context) {
    return self_->forward(x, context);
  }
  std::optional<LayerTensor<T>> backward(const LayerTensor<T>& dy, bool need_input_grad,
                                         Gradients<T>& gradients) {
    return self_->backward(dy, need_input_grad, gradients);
  }
  //! As forward and backward, between the layers of a model: the input in any dtype (converted to
  //! the layer's compute dtype), the result in the compute dtype (kdist/nn/autocast.hpp).
  ActivationTensor<T> forward_autocast(const ActivationTensor<T>& x, const StepContext& context) {
    return self_->forward_autocast(x, context);
  }
  std::optional<ActivationTensor<T>> backward_autocast(const ActivationTensor<T>& dy,
                                                       bool need_input_grad,
                                                       Gradients<T>& gradients) {
    return self_->backward_autocast(dy, need_input_grad, gradients);
  }

  //! Keras' `layer.dtype_policy`, `compute_dtype`, `variable_dtype`.
  const DTypePolicy& dtype_policy() const { return self_->dtype_policy(); }
  std::string_view compute_dtype() const { return dtype_policy().compute_dtype(); }
  std::string_view variable_dtype() const { return dtype_policy().variable_dtype(); }
  //! Gives the layer `policy` (Keras' `dtype=` argument; kdist::with_dtype_policy). A full-precision
  //! policy means the model's scalars: "float32" (the default) on a model of double computes in
  //! float64. Under "bfloat16" and "float16" the layer's variables are 16 bits wide
  //! (kdist/nn/sixteen_bit_variables.hpp). Errors (kdist::ValueError): a 16-bit policy on a model
  //! of double, "float64" on a float32 model.
  void set_dtype_policy(const DTypePolicy& policy) {
    self_->set_dtype_policy(policy_for_model(policy, self_->name()));
  }
  //! How many tensors the layer keeps in 16 bits from its last forward pass (for tests).
  std::size_t kept_in_sixteen_bits() const { return self_->kept_in_sixteen_bits(); }
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
    virtual ActivationTensor<T> forward_autocast(const ActivationTensor<T>&,
                                                 const StepContext&) = 0;
    virtual std::optional<ActivationTensor<T>> backward_autocast(const ActivationTensor<T>&, bool,
                                                                 Gradients<T>&) = 0;
    virtual const DTypePolicy& dtype_policy() const = 0;
    virtual void set_dtype_policy(const DTypePolicy& policy) = 0;
    virtual std::size_t kept_in_sixteen_bits() const = 0;
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
      m->set_dtype_policy(policy);
      return m;
    }
    void set_remat(std::optional<Remat> r) override { remat = std::move(r); }
    const RematSettings* remat_settings() const override {
      return remat ? &remat->settings() : nullptr;
    }
    std::string name() const override { return std::string(layer.name()); }
    Shape build(const Shape& s, const Distribution& d, std::uint64_t seed) override {
      Shape out = layer.build(s, d, seed);
      // a layer holding layers (Residual): each of them gave its own variables their dtype
      if constexpr (!requires(L & l) { l.layers(); }) {
        detail::give_variable_dtype<T>(layer.variables(), policy.variable());
      }
      if (remat) remat->built(out);
      return out;
    }
    LayerTensor<T> forward(const LayerTensor<T>& x, const StepContext& c) override {
      if (sixteen.index() != 0) return widened_outputs(forward_autocast(ActivationTensor<T>(x), c));
      return remat ? remat->forward(layer, x, c) : layer.forward(x, c);
    }
    std::optional<LayerTensor<T>> backward(const LayerTensor<T>& dy, bool need,
                                           Gradients<T>& gradients) override {
      if (sixteen.index() != 0) {
        auto dx = backward_autocast(ActivationTensor<T>(dy), need, gradients);
        if (!dx) return std::nullopt;
        return widened_outputs(*dx);
      }
      return remat ? remat->backward(layer, dy, need, gradients)
                   : layer.backward(dy, need, gradients);
    }
    ActivationTensor<T> forward_autocast(const ActivationTensor<T>& x,
                                         const StepContext& c) override {
      const auto run = [&](const LayerTensor<T>& in) {
        return remat ? remat->forward(layer, in, c) : layer.forward(in, c);
      };
      return std::visit(
          [&](auto& s) -> ActivationTensor<T> {
            if constexpr (std::is_same_v<std::remove_cvref_t<decltype(s)>, std::monostate>) {
              return ActivationTensor<T>(run(widened_inputs(x)));
            } else {
              return s.forward(layer, x, !remat.has_value(), run);
            }
          },
          sixteen);
    }
    std::optional<ActivationTensor<T>> backward_autocast(const ActivationTensor<T>& dy, bool need,
                                                         Gradients<T>& gradients) override {
      const auto run = [&](const LayerTensor<T>& d, const auto& prepare) {
        if (remat) return remat->backward(layer, d, need, gradients, prepare);
        prepare();
        return layer.backward(d, need, gradients);
      };
      return std::visit(
          [&](auto& s) -> std::optional<ActivationTensor<T>> {
            if constexpr (std::is_same_v<std::remove_cvref_t<decltype(s)>, std::monostate>) {
              auto dx = run(widened_gradients(dy), [] {});
              if (!dx) return std::nullopt;
              return ActivationTensor<T>(std::move(*dx));
            } else {
              return s.backward(layer, dy, run);
            }
          },
          sixteen);
    }
    const DTypePolicy& dtype_policy() const override { return policy; }
    void set_dtype_policy(const DTypePolicy& p) override {
      policy = p;
      if (p.compute() == DType::bfloat16) {
        sixteen.template emplace<1>();
      } else if (p.compute() == DType::float16) {
        sixteen.template emplace<2>();
      } else {
        sixteen.template emplace<0>();
      }
    }
    std::size_t kept_in_sixteen_bits() const override {
      return std::visit(
          [](const auto& s) -> std::size_t {
            if constexpr (std::is_same_v<std::remove_cvref_t<decltype(s)>, std::monostate>) {
              return 0;
            } else {
              return s.kept();
            }
          },
          sixteen);
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
    DTypePolicy policy{"float32"};
    //! Under a 16-bit policy, what runs around the layer (kdist/nn/autocast.hpp).
    std::variant<std::monostate, detail::SixteenBitCompute<T, bfloat16>,
                 detail::SixteenBitCompute<T, float16>>
        sixteen;
    //! Under a policy of T: 16-bit inputs and gradients widened; and under a 16-bit policy, the
    //! outputs of forward / backward (which are in T).
    detail::WidenedInputs<T> widened_inputs, widened_gradients, widened_outputs;
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

  //! `policy` as the layer of a model on T takes it (see set_dtype_policy).
  static DTypePolicy policy_for_model(const DTypePolicy& policy, const std::string& name) {
    constexpr DType model = dtype_of<T>();
    const std::string who =
        "kdist: layer '" + name + "' has the dtype policy \"" + policy.name() + "\", ";
    if (!is_sixteen_bit(policy.compute())) {
      if (policy.compute() == model || policy.compute() == DType::float32) {
        return DTypePolicy(dtype_name(model));
      }
      throw ValueError(who + "but the model computes in " + std::string(dtype_name(model)) +
                       " (its scalar type): a float64 model is kdist::BasicSequential<double>");
    }
    if (model != DType::float32) {
      throw ValueError(who + "which computes in " + std::string(policy.compute_dtype()) +
                       ", but the model is of " + std::string(dtype_name(model)) +
                       ": kdist computes in 16 bits in float32 models "
                       "(kdist::Sequential, kdist::BasicSequential<float>)");
    }
    return policy;
  }

  std::unique_ptr<Concept> self_;
};

//! `layer` with the dtype policy `policy` whatever the global one (Keras' `dtype=` argument of a
//! layer), e.g. a model's last Dense in "float32" under "mixed_bfloat16" (Keras' advice for a
//! softmax output). Errors: as kdist::AnyLayer::set_dtype_policy.
template <class L>
AnyLayer<typename std::remove_cvref_t<L>::value_type> with_dtype_policy(const DTypePolicy& policy,
                                                                        L&& layer) {
  const mixed_precision::PolicyScope scope(policy);
  return AnyLayer<typename std::remove_cvref_t<L>::value_type>(std::forward<L>(layer));
}

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

namespace detail {
//! Rounds every 16-bit variable of `layers` to its dtype (after values were written into it: a
//! load; kdist/nn/sixteen_bit_variables.hpp).
template <class T>
void round_variables_to_their_dtypes(std::vector<AnyLayer<T>>& layers) {
  for_each_variable(layers, [](auto& v) { round_to_dtype(v.value.local(), v.dtype); });
}
}  // namespace detail

}  // namespace kdist
