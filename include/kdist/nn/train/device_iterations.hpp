#pragma once
//! \file nn/train/device_iterations.hpp
//! `detail::DeviceIterations`: the optimizer's count of completed steps (Keras'
//! `optimizer.iterations`) kept in the memory of the model's Views too, and advanced there by the
//! step's last kernel. The kernels whose work changes from step to step read it there instead of
//! taking it from the host as an argument - Adam's bias correction (kdist::Adam,
//! read_iterations_from), dropout's masks (StepContext::step_at) - so a step recorded once as a
//! device graph replays with each step's own count. On the CPU backends it is host memory, the
//! host paths read it too, and CI runs the same code.

#include <cstdint>
#include <optional>

#include <Kokkos_Core.hpp>

namespace kdist::detail {

//! `count() += 1` in one kernel (a free function: nvcc takes no KOKKOS_LAMBDA in a private member).
inline void advance_count(const Kokkos::View<std::int64_t, Kokkos::LayoutRight>& count) {
  Kokkos::parallel_for(
      "kdist::iterations::advance", Kokkos::RangePolicy<Kokkos::DefaultExecutionSpace>(0, 1),
      KOKKOS_LAMBDA(const int) { count() += 1; });
}

class DeviceIterations {
 public:
  using View = Kokkos::View<std::int64_t, Kokkos::LayoutRight>;

  DeviceIterations() = default;
  //! A copy (a copied model) keeps a count of its own, made at its first step.
  DeviceIterations(const DeviceIterations&) {}
  DeviceIterations& operator=(const DeviceIterations& other) {
    if (this != &other) *this = DeviceIterations();
    return *this;
  }
  DeviceIterations(DeviceIterations&&) noexcept = default;
  DeviceIterations& operator=(DeviceIterations&&) noexcept = default;
  ~DeviceIterations() = default;

  //! Makes the device's count `n` (the optimizer's) unless it is already: a copy to the device
  //! only at the first step and after set_iterations or a restored checkpoint.
  void match(std::int64_t n) {
    if (!count_.is_allocated()) count_ = View("kdist::iterations");
    if (known_ == n) return;
    Kokkos::deep_copy(count_, n);
    known_ = n;
  }
  //! Adds one on the device, after the step's other kernels (the optimizer finished its step).
  void advance() {
    advance_count(count_);
    if (known_) ++*known_;
  }
  //! The host's note that a replayed graph advanced the count (its advance() is in the graph).
  void advanced_by_graph() {
    if (known_) ++*known_;
  }
  //! Forgets what the device holds (a capture that failed took its advance() but never ran it):
  //! the next match copies the count again.
  void forget() { known_.reset(); }
  //! The count in device memory (nullptr before the first match).
  const std::int64_t* data() const { return count_.data(); }

 private:
  View count_;
  std::optional<std::int64_t> known_;  //!< what count_ holds, as far as the host knows
};

}  // namespace kdist::detail
