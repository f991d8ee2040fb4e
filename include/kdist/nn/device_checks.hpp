#pragma once
//! \file nn/device_checks.hpp
//! `kdist::DeviceChecks`: checks of a step's inputs that a step kept on the device makes without
//! waiting for it (a step captured as a device graph may not wait): a label, a target token or a
//! token id out of range is found by a kernel, the first failure (its check, step, index and
//! value) stays in device memory, and the training step reads it with its metrics
//! (kdist::detail::OutputLoss::take_totals), when the job ends on every process with the failure
//! named. The kernels that read such inputs do not index out of range with them meanwhile.
//! Layers get the step's checks in StepContext::checks (nullptr: check on the host, as before).

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include <Kokkos_Core.hpp>

namespace kdist {

namespace detail {
//! `failure = {1 + step, index, value, check}` from the first index `first_bad()` (< n), unless a
//! failure is already recorded (a free function: nvcc takes no KOKKOS_LAMBDA in a member).
template <class Values>
void record_first_failure(const Kokkos::View<double[4], Kokkos::LayoutRight>& failure,
                          const Kokkos::View<std::int64_t, Kokkos::LayoutRight>& first_bad,
                          const Values& values, double check, const std::int64_t* step_at) {
  Kokkos::parallel_for(
      "kdist::DeviceChecks::record", Kokkos::RangePolicy<Kokkos::DefaultExecutionSpace>(0, 1),
      KOKKOS_LAMBDA(const int) {
        const std::int64_t at = first_bad();
        if (at < 0 || at >= static_cast<std::int64_t>(values.extent(0)) || failure(0) != 0.0) {
          return;
        }
        failure(0) = 1.0 + (step_at != nullptr ? static_cast<double>(*step_at) : -1.0);
        failure(1) = static_cast<double>(at);
        failure(2) = static_cast<double>(values(at));
        failure(3) = check;
      });
}
}  // namespace detail

class DeviceChecks {
 public:
  //! Records, on the device, that `values(first_bad())` failed the check `what` ("label",
  //! "layer 'embedding': token id") of inputs in [0, classes) at step `*step_at`, when
  //! first_bad() is an index of `values` (the largest int64: none failed) and no failure is
  //! recorded yet. `first_bad` is what ops::first_invalid_label_into / first_invalid_token_into
  //! wrote; `values` a rank-1 View of the inputs.
  template <class Values>
  void record_first(const std::string& what, std::size_t classes,
                    const Kokkos::View<std::int64_t, Kokkos::LayoutRight>& first_bad,
                    const Values& values, const std::int64_t* step_at) {
    if (!failure_.is_allocated()) failure_ = Failure("kdist::DeviceChecks");
    std::size_t code = 0;
    while (code < checks_.size() &&
           !(checks_[code].what == what && checks_[code].classes == classes)) {
      ++code;
    }
    if (code == checks_.size()) checks_.push_back({what, classes});
    detail::record_first_failure(failure_, first_bad, values, static_cast<double>(code), step_at);
    pending_ = true;
  }
  //! Whether a check was recorded since the last take().
  bool pending() const noexcept { return pending_; }
  //! Reads the first failure (one copy) and clears it: "" when none, else what failed, where and
  //! at which step, and how to fix it.
  std::string take() {
    if (!pending_) return {};
    pending_ = false;
    double f[4];
    Kokkos::deep_copy(
        Kokkos::View<double[4], Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>(f),
        failure_);
    if (f[0] == 0.0) return {};
    Kokkos::deep_copy(failure_, 0.0);
    const auto& check = checks_.at(static_cast<std::size_t>(f[3]));
    return "kdist: " + check.what + " " + number(f[2]) + " at flat index " +
           std::to_string(static_cast<long long>(f[1])) + " of this process's block (step " +
           std::to_string(static_cast<long long>(f[0] - 1.0)) + ") is out of range [0, " +
           std::to_string(check.classes) + "); give class indices / token ids below " +
           std::to_string(check.classes) +
           " (found on the device, when the step's metrics were read)";
  }

 private:
  static std::string number(double v) {
    if (v != v) return "nan";
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.17g", v);
    return buf;
  }
  using Failure = Kokkos::View<double[4], Kokkos::LayoutRight>;
  struct Check {
    std::string what;
    std::size_t classes;
  };
  Failure failure_;  //!< 1 + step (0: none), index, value, check
  std::vector<Check> checks_;
  bool pending_ = false;
};

}  // namespace kdist
