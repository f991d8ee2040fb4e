#pragma once
//! \file nn/optimizer.hpp
//! The `kdist::Optimizer` concept: what a class needs so that `kdist::Sequential` can train with
//! it, checkpoints can save and restore its state and Keras weights files can hold it. An
//! optimizer declares its state once (`slots()`: the slot names and Keras' order of them, a
//! kdist::OptimizerSlots) and steps one variable with it (`update_step`); everything else reads
//! that declaration. `AnyOptimizer<T>` holds any Optimizer by value (type erasure), so a model
//! trains with the library's SGD, Adam, AdamW and RMSprop (kdist/ops/optimizers.hpp) or the user's own
//! (docs/guide/06-custom-training.md).
//!
//! Optimizers are elementwise, as Keras' are: a slot is shaped and sharded like its variable, and
//! `update_step` sees the variable's block, its gradient's block and its slots' blocks as
//! contiguous rank-1 Views of the same length (kdist::OptimizerView).
//!
//! \code
//! struct SGDW {  // SGD with decoupled weight decay, one slot-free step
//!   double learning_rate = 0.1, decay = 0.01;
//!   std::string name() const { return "SGDW"; }
//!   kdist::OptimizerSlots slots() const { return {}; }
//!   void update_step(const kdist::OptimizerView<float>& p, const kdist::OptimizerView<const float>& g,
//!                    std::span<const kdist::OptimizerView<float>>) const { ... }
//! };
//! static_assert(kdist::Optimizer<SGDW>);
//! model.compile(kdist::Loss::mean_squared_error, SGDW{});
//! \endcode
//! Optional members, used when present: `learning_rate()` / `set_learning_rate(double)` (Keras
//! files store it), `iterations()` / `set_iterations(std::int64_t)` / `finish_step()` (else
//! AnyOptimizer counts the steps), `hyperparameters()` (a checkpoint's attributes),
//! `global_clipnorm()` -> std::optional<double> (Keras' global_clipnorm: the model clips all
//! gradients by their global norm first), `update_step(param, grad, slots, variable_path)` (the
//! step told which variable it steps, "d1/bias": AdamW's exclude_from_weight_decay; preferred
//! over the three-argument form when present).

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include <Kokkos_Core.hpp>

#include <kdist/core/concepts.hpp>
#include <kdist/core/error.hpp>
#include <kdist/nn/explicit_instantiation.hpp>
#include <kdist/nn/loss_scale_optimizer.hpp>
#include <kdist/ops/optimizers.hpp>

namespace kdist {

//! A block of a variable, of its gradient or of a slot as an optimizer's `update_step` sees it:
//! its elements, contiguous, in device memory (`T` const for the gradient).
template <class T>
using OptimizerView =
    Kokkos::View<T*, Kokkos::LayoutRight, Kokkos::DefaultExecutionSpace::memory_space,
                 Kokkos::MemoryTraits<Kokkos::Unmanaged>>;

//! The requirements on an optimizer of variables of scalars `T`.
template <class O, class T = float>
concept Optimizer = std::copy_constructible<O> &&
    requires(const O& optimizer, const OptimizerView<T>& param, const OptimizerView<const T>& grad,
             std::span<const OptimizerView<T>> slots) {
  //! Its class name ("Adam"): a checkpoint records it, a Keras file its snake case ("adam").
  { optimizer.name() } -> std::convertible_to<std::string>;
  //! Its state, declared once: slot names in update_step's order, and Keras' order.
  { optimizer.slots() } -> std::convertible_to<OptimizerSlots>;
  //! One variable's step: `slots` as slots() declares them, each of param's length.
  optimizer.update_step(param, grad, slots);
};

namespace error {
//! A Sequential (kdist::AnyOptimizer) given a type `O` that does not satisfy kdist::Optimizer on
//! scalars `T`: it needs name(), slots() -> kdist::OptimizerSlots and update_step(param, grad,
//! slots) (kdist/nn/optimizer.hpp).
template <class O, class T>
struct type_is_not_an_optimizer_on;
}  // namespace error

namespace detail {

//! `optimizer`'s step of the variable at `variable_path`: its four-argument update_step when it
//! has one, else the three-argument one.
template <class O, class T>
void step_variable(const O& optimizer, const OptimizerView<T>& param,
                   const OptimizerView<const T>& grad, std::span<const OptimizerView<T>> slots,
                   std::string_view variable_path) {
  if constexpr (requires { optimizer.update_step(param, grad, slots, variable_path); }) {
    optimizer.update_step(param, grad, slots, variable_path);
  } else {
    optimizer.update_step(param, grad, slots);
  }
}

//! Any Optimizer other than the library's, held by value behind a pointer; it offers every
//! member, the optional ones filled in (a step counter of its own, no learning rate).
template <class T>
class BoxedOptimizer {
 public:
  template <DifferentFrom<BoxedOptimizer> O>
  explicit BoxedOptimizer(O optimizer) : self_(std::make_unique<Model<O>>(std::move(optimizer))) {}
  BoxedOptimizer(const BoxedOptimizer& other) : self_(other.self_->clone()) {}
  BoxedOptimizer(BoxedOptimizer&&) noexcept = default;
  BoxedOptimizer& operator=(const BoxedOptimizer& other) {
    if (this != &other) self_ = other.self_->clone();
    return *this;
  }
  BoxedOptimizer& operator=(BoxedOptimizer&&) noexcept = default;

  std::string name() const { return self_->name(); }
  OptimizerSlots slots() const { return self_->slots(); }
  std::size_t slot_count() const { return slots().size(); }
  std::vector<std::pair<std::string, double>> hyperparameters() const {
    return self_->hyperparameters();
  }
  double learning_rate() const { return self_->learning_rate(); }
  void set_learning_rate(double lr) { self_->set_learning_rate(lr); }
  std::int64_t iterations() const { return self_->iterations(); }
  void set_iterations(std::int64_t n) { self_->set_iterations(n); }
  void finish_step() { self_->finish_step(); }
  std::optional<double> global_clipnorm() const { return self_->global_clipnorm(); }
  void update_step(const OptimizerView<T>& param, const OptimizerView<const T>& grad,
                   std::span<const OptimizerView<T>> slots) const {
    self_->update_step(param, grad, slots);
  }
  void update_step(const OptimizerView<T>& param, const OptimizerView<const T>& grad,
                   std::span<const OptimizerView<T>> slots, std::string_view variable_path) const {
    self_->update_step_of(param, grad, slots, variable_path);
  }
  template <class O>
  O* get_if() const {
    auto* m = dynamic_cast<Model<O>*>(self_.get());
    return m ? &m->optimizer : nullptr;
  }

 private:
  struct Concept {
    virtual ~Concept() = default;
    virtual std::unique_ptr<Concept> clone() const = 0;
    virtual std::string name() const = 0;
    virtual OptimizerSlots slots() const = 0;
    virtual std::vector<std::pair<std::string, double>> hyperparameters() const = 0;
    virtual double learning_rate() const = 0;
    virtual void set_learning_rate(double) = 0;
    virtual std::int64_t iterations() const = 0;
    virtual void set_iterations(std::int64_t) = 0;
    virtual void finish_step() = 0;
    virtual std::optional<double> global_clipnorm() const = 0;
    virtual void update_step(const OptimizerView<T>&, const OptimizerView<const T>&,
                             std::span<const OptimizerView<T>>) const = 0;
    virtual void update_step_of(const OptimizerView<T>&, const OptimizerView<const T>&,
                                std::span<const OptimizerView<T>>, std::string_view) const = 0;
  };
  template <class O>
  struct Model final : Concept {
    explicit Model(O o) : optimizer(std::move(o)) {}
    std::unique_ptr<Concept> clone() const override { return std::make_unique<Model>(*this); }
    std::string name() const override { return std::string(optimizer.name()); }
    OptimizerSlots slots() const override { return optimizer.slots(); }
    std::vector<std::pair<std::string, double>> hyperparameters() const override {
      if constexpr (requires { optimizer.hyperparameters(); }) {
        return optimizer.hyperparameters();
      } else if constexpr (requires { optimizer.learning_rate(); }) {
        return {{"learning_rate", static_cast<double>(optimizer.learning_rate())}};
      } else {
        return {};
      }
    }
    double learning_rate() const override {
      if constexpr (requires { optimizer.learning_rate(); }) {
        return static_cast<double>(optimizer.learning_rate());
      } else {
        return 0.0;
      }
    }
    void set_learning_rate(double lr) override {
      if constexpr (requires { optimizer.set_learning_rate(lr); }) {
        optimizer.set_learning_rate(lr);
      } else {
        (void)lr;  // an optimizer without a learning rate keeps its own step sizes
      }
    }
    std::int64_t iterations() const override {
      if constexpr (requires { optimizer.iterations(); }) {
        return static_cast<std::int64_t>(optimizer.iterations());
      } else {
        return steps;
      }
    }
    void set_iterations(std::int64_t n) override {
      if constexpr (requires { optimizer.set_iterations(n); }) {
        optimizer.set_iterations(n);
      } else {
        steps = n;
      }
    }
    void finish_step() override {
      if constexpr (requires { optimizer.finish_step(); }) {
        optimizer.finish_step();
      } else {
        ++steps;
      }
    }
    std::optional<double> global_clipnorm() const override {
      if constexpr (requires { optimizer.global_clipnorm(); }) {
        return optimizer.global_clipnorm();
      } else {
        return std::nullopt;
      }
    }
    void update_step(const OptimizerView<T>& param, const OptimizerView<const T>& grad,
                     std::span<const OptimizerView<T>> slots) const override {
      optimizer.update_step(param, grad, slots);
    }
    void update_step_of(const OptimizerView<T>& param, const OptimizerView<const T>& grad,
                        std::span<const OptimizerView<T>> slots,
                        std::string_view variable_path) const override {
      step_variable(optimizer, param, grad, slots, variable_path);
    }
    O optimizer;
    std::int64_t steps = 0;  // Keras' `iterations` for an optimizer that does not count them
  };
  std::unique_ptr<Concept> self_;
};

template <class T>
using OptimizerAlternatives =
    std::variant<SGD, Adam, RMSprop, BoxedOptimizer<T>, AdamW, LossScaleOptimizer<T>>;

template <class O>
inline constexpr bool is_library_optimizer_v =
    std::is_same_v<O, SGD> || std::is_same_v<O, Adam> || std::is_same_v<O, RMSprop> ||
    std::is_same_v<O, AdamW>;

}  // namespace detail

//! Any `Optimizer` of scalars `T`, held by value (copying copies it, its step counter included).
//! The library's SGD, Adam, AdamW and RMSprop are held in place, so `std::get<kdist::Adam>(optimizer)`
//! and `std::visit` see them as before, as is a kdist::LossScaleOptimizer<T> around any of them
//! (loss_scaling()); any other Optimizer is held behind a pointer (`get_if<O>()` finds it). Every
//! member reads the held optimizer's declaration.
template <class T>
class AnyOptimizer : public detail::OptimizerAlternatives<T> {
  using Base = detail::OptimizerAlternatives<T>;

 public:
  using value_type = T;

  //! Keras' SGD() (the default of a variant of the library's optimizers, as before).
  AnyOptimizer() = default;
  //! Holds a copy of `optimizer`. A type that is not a kdist::Optimizer on T does not compile
  //! (kdist::error::type_is_not_an_optimizer_on<O, T>); see the concept for what it needs.
  template <DifferentFrom<AnyOptimizer> O>
  AnyOptimizer(O&& optimizer)  // NOLINT: implicit, as AnyLayer
      : Base(make<std::remove_cvref_t<O>>(std::forward<O>(optimizer))) {}

  //! The held optimizer's class name ("Adam", or the user's).
  std::string name() const {
    return std::visit([](const auto& o) { return std::string(o.name()); }, base());
  }
  //! Its state, as it declares it.
  OptimizerSlots slots() const {
    return std::visit([](const auto& o) { return OptimizerSlots(o.slots()); }, base());
  }
  std::size_t slot_count() const { return slots().size(); }
  //! Its slots in Keras' order: groups of slot indices (OptimizerSlots::keras_order).
  //! Errors: kdist::ValueError for a keras_order that does not name each declared slot once.
  std::vector<std::vector<std::size_t>> keras_slot_groups() const {
    return detail::keras_slot_groups(slots(), "kdist optimizer " + name());
  }
  //! Its hyperparameters (Keras' config), as a checkpoint records them.
  std::vector<std::pair<std::string, double>> hyperparameters() const {
    return std::visit([](const auto& o) { return o.hyperparameters(); }, base());
  }
  double learning_rate() const {
    return std::visit([](const auto& o) { return o.learning_rate(); }, base());
  }
  void set_learning_rate(double lr) {
    std::visit([lr](auto& o) { o.set_learning_rate(lr); }, base());
  }
  //! Completed steps (Keras' `optimizer.iterations`).
  std::int64_t iterations() const {
    return std::visit([](const auto& o) { return o.iterations(); }, base());
  }
  void set_iterations(std::int64_t n) {
    std::visit([n](auto& o) { o.set_iterations(n); }, base());
  }
  //! Ends a training step (after update_step of every variable).
  void finish_step() {
    std::visit([](auto& o) { o.finish_step(); }, base());
  }
  //! Keras' weight_decay of the library's optimizers (0 for a user's that has none).
  double weight_decay() const {
    return std::visit(
        [](const auto& o) {
          if constexpr (requires { o.weight_decay(); }) {
            return static_cast<double>(o.weight_decay());
          } else {
            return 0.0;
          }
        },
        base());
  }
  //! Points the library's optimizers' device kernels at the training step's copy of the completed
  //! steps (kdist::detail::DeviceIterations); a user's optimizer is not told.
  void read_iterations_from(const std::int64_t* at) {
    std::visit(
        [at](auto& o) {
          if constexpr (detail::is_library_optimizer_v<std::remove_cvref_t<decltype(o)>> ||
                        std::is_same_v<std::remove_cvref_t<decltype(o)>, LossScaleOptimizer<T>>) {
            o.read_iterations_from(at);
          }
        },
        base());
  }
  //! Whether its kernels take no value that changes from step to step from the host (the
  //! library's, told read_iterations_from): a step captured once as a device graph replays right.
  bool replays_from_device() const {
    return std::visit(
        [](const auto& o) {
          if constexpr (std::is_same_v<std::remove_cvref_t<decltype(o)>, LossScaleOptimizer<T>>) {
            return o.replays_from_device();
          } else {
            return detail::is_library_optimizer_v<std::remove_cvref_t<decltype(o)>>;
          }
        },
        base());
  }
  //! The held kdist::LossScaleOptimizer (its scale's state), or nullptr when the loss is not
  //! scaled.
  const LossScaleOptimizer<T>* loss_scaling() const {
    return std::get_if<LossScaleOptimizer<T>>(&base());
  }
  LossScaleOptimizer<T>* loss_scaling() { return std::get_if<LossScaleOptimizer<T>>(&base()); }
  //! One variable's step: `slots` as slots() declares them.
  void update_step(const OptimizerView<T>& param, const OptimizerView<const T>& grad,
                   std::span<const OptimizerView<T>> slots) const {
    std::visit([&](const auto& o) { o.update_step(param, grad, slots); }, base());
  }
  //! The step of the variable at `variable_path` ("d1/bias"), for optimizers whose step depends
  //! on the variable (AdamW's exclude_from_weight_decay); the others take the step above.
  void update_step(const OptimizerView<T>& param, const OptimizerView<const T>& grad,
                   std::span<const OptimizerView<T>> slots, std::string_view variable_path) const {
    std::visit([&](const auto& o) { detail::step_variable(o, param, grad, slots, variable_path); },
               base());
  }
  //! Keras' `global_clipnorm` of the held optimizer (std::nullopt: no clipping; also for an
  //! optimizer that does not declare one).
  std::optional<double> global_clipnorm() const {
    return std::visit([](const auto& o) { return std::optional<double>(o.global_clipnorm()); },
                      base());
  }

  //! The optimizer as its own type, or nullptr if it holds another type.
  template <class O>
  const O* get_if() const {
    if constexpr (detail::is_library_optimizer_v<O> || std::is_same_v<O, LossScaleOptimizer<T>>) {
      return std::get_if<O>(&base());
    } else if (const auto* box = std::get_if<detail::BoxedOptimizer<T>>(&base())) {
      return box->template get_if<O>();
    } else {
      return nullptr;
    }
  }
  template <class O>
  O* get_if() {
    return const_cast<O*>(std::as_const(*this).template get_if<O>());
  }

 private:
  const Base& base() const { return *this; }
  Base& base() { return *this; }

  template <class O, class Arg>
  static Base make(Arg&& optimizer) {
    if constexpr (detail::is_library_optimizer_v<O> ||
                  std::is_same_v<O, detail::BoxedOptimizer<T>> ||
                  std::is_same_v<O, LossScaleOptimizer<T>>) {
      return Base(std::in_place_type<O>, std::forward<Arg>(optimizer));
    } else {
      static_assert(
          detail::diagnose<Optimizer<O, T>, error::type_is_not_an_optimizer_on<O, T>>::value,
          "kdist::AnyOptimizer: this type is not a kdist::Optimizer on the model's scalar type; "
          "it needs name() -> std::string, slots() -> kdist::OptimizerSlots and "
          "update_step(const kdist::OptimizerView<T>& param, const kdist::OptimizerView<const T>& "
          "grad, std::span<const kdist::OptimizerView<T>> slots) (kdist/nn/optimizer.hpp)");
      if constexpr (Optimizer<O, T>) {
        return Base(std::in_place_type<detail::BoxedOptimizer<T>>, std::forward<Arg>(optimizer));
      } else {
        return Base();
      }
    }
  }
};

}  // namespace kdist

KDIST_EXTERN_CLASS(kdist::detail::BoxedOptimizer)
KDIST_EXTERN_CLASS(kdist::AnyOptimizer)
