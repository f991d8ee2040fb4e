#pragma once
//! \file nn/loss_scale_optimizer.hpp
//! Keras' `LossScaleOptimizer`: dynamic loss scaling around another optimizer, for training in
//! 16 bits without gradients that underflow. The training step multiplies the loss's gradient by
//! the loss scale before the backward pass (Keras' `scale_loss`), then, with the gradients summed:
//! - when every gradient on every process is finite, divides them by the scale and lets the inner
//!   optimizer step; after `dynamic_growth_steps` such steps in a row the scale doubles;
//! - else skips the step (no variable, slot or iteration changes on any process) and halves the
//!   scale.
//! All processes agree: whether the gradients are finite comes from one all-reduce of the sums of
//! their squares (kdist/nn/train/train_step.hpp), so every process skips or steps alike.
//!
//! \code
//! model.compile(dist, kdist::Loss::sparse_categorical_crossentropy,
//!               kdist::LossScaleOptimizer(kdist::Adam(1e-3)));  // initial scale 2^15, growth 2000
//! const auto* lso = model.optimizer().loss_scaling();           // lso->loss_scale(), step_counter()
//! \endcode
//!
//! Keras' semantics, from keras/src/optimizers/loss_scale_optimizer.py: the scale is a float32
//! (doubling past float32's range makes it inf, and the next step's non-finite gradients halve it
//! back), the unscaled gradients are the scaled ones divided by the scale of that step (kdist
//! multiplies by its reciprocal: the same for a power-of-two scale, the default and every scale
//! doubling and halving reach from one), the step counter counts finite steps since the scale
//! last changed, `iterations` and `learning_rate` are the inner optimizer's, and the loss a model
//! reports is the unscaled one.

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include <kdist/core/concepts.hpp>
#include <kdist/core/error.hpp>
#include <kdist/ops/optimizers.hpp>

namespace kdist {

template <class T>
class AnyOptimizer;

//! Keras' `LossScaleOptimizer(inner_optimizer, initial_scale=2**15, dynamic_growth_steps=2000)`
//! for a model of scalars `T` (float: `kdist::LossScaleOptimizer(kdist::Adam())`). It holds the
//! inner optimizer (any kdist::Optimizer) and the scale's state; a model's training step uses both
//! (see the file comment).
template <class T = float>
class LossScaleOptimizer {
 public:
  //! Errors: kdist::ValueError for an initial_scale that is not a finite number > 0, a
  //! dynamic_growth_steps below 1, or an inner optimizer that is itself a LossScaleOptimizer (the
  //! loss would be scaled twice).
  template <DifferentFrom<LossScaleOptimizer> Inner>
  explicit LossScaleOptimizer(Inner inner, double initial_scale = 32768.0,
                              std::int64_t dynamic_growth_steps = 2000)
      : inner_(std::make_unique<AnyOptimizer<T>>(std::move(inner))),
        initial_scale_(initial_scale),
        dynamic_growth_steps_(dynamic_growth_steps),
        scale_(static_cast<float>(initial_scale)) {
    if (!(initial_scale > 0.0) || !std::isfinite(initial_scale) || !std::isfinite(scale_)) {
      throw ValueError("kdist::LossScaleOptimizer: initial_scale is " +
                       detail::number_string(initial_scale) +
                       "; it must be a finite number > 0 that a float32 holds (Keras' default "
                       "is 2^15 = 32768)");
    }
    if (dynamic_growth_steps < 1) {
      throw ValueError("kdist::LossScaleOptimizer: dynamic_growth_steps is " +
                       std::to_string(dynamic_growth_steps) +
                       "; it must be at least 1 (the finite steps after which the scale doubles; "
                       "Keras' default is 2000)");
    }
    if (inner_->loss_scaling() != nullptr) {
      throw ValueError(
          "kdist::LossScaleOptimizer: its inner optimizer is a LossScaleOptimizer, which would "
          "scale the loss twice; wrap the inner one's optimizer instead");
    }
  }
  LossScaleOptimizer(const LossScaleOptimizer& o)
      : inner_(std::make_unique<AnyOptimizer<T>>(*o.inner_)),
        initial_scale_(o.initial_scale_),
        dynamic_growth_steps_(o.dynamic_growth_steps_),
        scale_(o.scale_),
        step_counter_(o.step_counter_) {}
  LossScaleOptimizer(LossScaleOptimizer&&) noexcept = default;
  LossScaleOptimizer& operator=(const LossScaleOptimizer& o) {
    if (this != &o) *this = LossScaleOptimizer(o);
    return *this;
  }
  LossScaleOptimizer& operator=(LossScaleOptimizer&&) noexcept = default;
  ~LossScaleOptimizer() = default;

  std::string name() const { return "LossScaleOptimizer"; }

  // ---- the scale ---------------------------------------------------------------------------
  //! The loss scale the next step multiplies the loss by (Keras' `dynamic_scale`, a float32).
  double loss_scale() const { return scale_; }
  //! Finite steps since the scale last changed (Keras' `step_counter`).
  std::int64_t step_counter() const { return step_counter_; }
  double initial_scale() const { return initial_scale_; }
  std::int64_t dynamic_growth_steps() const { return dynamic_growth_steps_; }
  //! Keras' `scale_loss(loss)`: `loss * loss_scale()`, for a loop of one's own that takes the
  //! gradients of the scaled loss.
  double scale_loss(double loss) const { return loss * static_cast<double>(scale_); }
  //! Advances the scale after a step whose gradients were (all, on every process) `finite`:
  //! Keras' doubling after dynamic_growth_steps finite steps, or halving (and the counter reset)
  //! after a skipped one. Called by the training step once per step, after the inner optimizer's.
  void advance_scale(bool finite) {
    if (!finite) {
      step_counter_ = 0;
      scale_ = scale_ * 0.5F;
    } else if (step_counter_ == dynamic_growth_steps_ - 1) {
      step_counter_ = 0;
      scale_ = scale_ * 2.0F;
    } else {
      ++step_counter_;
    }
  }
  //! Restores the scale's state (a checkpoint's). Errors: kdist::ValueError for a scale that is
  //! not a number > 0 or a negative counter.
  void set_scale_state(double scale, std::int64_t step_counter) {
    if (!(scale > 0.0) || step_counter < 0) {
      throw ValueError("kdist::LossScaleOptimizer: the restored loss scale is " +
                       detail::number_string(scale) + " with step counter " +
                       std::to_string(step_counter) +
                       "; a scale must be > 0 and a counter >= 0 (is the file damaged?)");
    }
    scale_ = static_cast<float>(scale);
    step_counter_ = step_counter;
  }

  // ---- the inner optimizer, whose state and step these are -----------------------------------
  const AnyOptimizer<T>& inner_optimizer() const { return *inner_; }
  AnyOptimizer<T>& inner_optimizer() { return *inner_; }
  auto slots() const { return inner_->slots(); }
  std::size_t slot_count() const { return inner_->slot_count(); }
  //! The inner optimizer's config and the scaling's (Keras' get_config: initial_scale,
  //! dynamic_growth_steps).
  std::vector<std::pair<std::string, double>> hyperparameters() const {
    auto out = inner_->hyperparameters();
    out.emplace_back("initial_scale", initial_scale_);
    out.emplace_back("dynamic_growth_steps", static_cast<double>(dynamic_growth_steps_));
    return out;
  }
  double learning_rate() const { return inner_->learning_rate(); }
  void set_learning_rate(double lr) { inner_->set_learning_rate(lr); }
  std::int64_t iterations() const { return inner_->iterations(); }
  void set_iterations(std::int64_t n) { inner_->set_iterations(n); }
  void finish_step() { inner_->finish_step(); }
  double weight_decay() const { return inner_->weight_decay(); }
  std::optional<double> global_clipnorm() const { return inner_->global_clipnorm(); }
  void read_iterations_from(const std::int64_t* at) { inner_->read_iterations_from(at); }
  bool replays_from_device() const { return inner_->replays_from_device(); }
  //! The inner optimizer's step on gradients the training step has unscaled already.
  template <class P, class G, class S>
  void update_step(const P& param, const G& grad, const S& slots) const {
    inner_->update_step(param, grad, slots);
  }
  template <class P, class G, class S>
  void update_step(const P& param, const G& grad, const S& slots,
                   std::string_view variable_path) const {
    inner_->update_step(param, grad, slots, variable_path);
  }

 private:
  std::unique_ptr<AnyOptimizer<T>> inner_;
  double initial_scale_;
  std::int64_t dynamic_growth_steps_;
  float scale_;  // Keras' dynamic_scale is a float32 variable
  std::int64_t step_counter_ = 0;
};

}  // namespace kdist

// AnyOptimizer, which the class above holds and which holds it (this header alone is enough)
#include <kdist/nn/optimizer.hpp>
