#pragma once
//! \file parallel/step_scope.hpp
//! `kdist::StepScope`: records which training step this process is in, for the messages of the
//! stuck-collective watchdog (collective_timeout.hpp, docs/reliability.md). Model::fit and
//! Model::evaluate open one per step; a custom training loop may do the same.
//!
//! \code
//! for (std::size_t s = 0; s < steps; ++s) {
//!   kdist::StepScope scope("fit", epoch, s);  // "during fit, epoch 1, step 3" (counted from 1)
//!   ...
//! }
//! \endcode

#include <cstddef>
#include <string>

namespace kdist {

namespace detail::step {

//! The step this thread is in; phase nullptr: outside a training step. Per thread: a background
//! thread (an asynchronous checkpoint's writer) is in no training step, and reads nothing that
//! the training thread writes.
struct Current {
  const char* phase = nullptr;  // a string literal: "fit", "evaluate"
  std::size_t epoch = 0;        // counted from 0
  std::size_t step = 0;         // counted from 0
};
inline Current& current() noexcept {
  static thread_local Current c;
  return c;
}

}  // namespace detail::step

//! While alive, this process is in step `step` of epoch `epoch` (both counted from 0) of `phase`
//! (a string literal, e.g. "fit" or "evaluate"). Restores the previous step on destruction, so
//! scopes nest. Costs two stores: nothing is formatted until a message needs it.
class StepScope {
 public:
  StepScope(const char* phase, std::size_t epoch, std::size_t step) noexcept
      : previous_(detail::step::current()) {
    detail::step::current() = {phase, epoch, step};
  }
  StepScope(const StepScope&) = delete;
  StepScope& operator=(const StepScope&) = delete;
  ~StepScope() { detail::step::current() = previous_; }

 private:
  detail::step::Current previous_;
};

//! "during fit, epoch 1, step 3" (epoch and step counted from 1, as Keras prints them), or
//! "outside a training step".
[[nodiscard]] inline std::string current_step_description() {
  const auto& c = detail::step::current();
  if (c.phase == nullptr) return "outside a training step";
  return std::string("during ") + c.phase + ", epoch " + std::to_string(c.epoch + 1) + ", step " +
         std::to_string(c.step + 1);
}

}  // namespace kdist
