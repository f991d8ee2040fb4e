#pragma once
//! \file parallel/collective_timeout.hpp
//! The stuck-collective watchdog's setting (docs/reliability.md): how long kdist's collectives
//! (collectives.hpp, mpi::agree) wait for the other processes before they end the job with a
//! message naming the collective, the training step (StepScope), the communicator (mesh axis) and
//! the processes that did not arrive. PyTorch's process-group timeout does the same.
//!
//! - Default: 10 minutes (`default_collective_timeout`, PyTorch's default too): long enough for a
//!   process to write a large checkpoint while the others wait, short enough to free the machines
//!   of a job whose host dropped off.
//! - `KDIST_COLLECTIVE_TIMEOUT` in the environment: seconds (a decimal number, e.g. `120` or
//!   `2.5`), or `0` / `off` to turn the watchdog off. Read when kdist starts MPI
//!   (kdist::initialize, ScopeGuard, run) or at the first collective; any other value is a
//!   kdist::ValueError on every process, naming the value.
//! - `kdist::set_collective_timeout(d)`: from then on, whatever the environment says; zero turns
//!   the watchdog off. Set it alike on every process.
//! With the watchdog off the collectives are MPI's blocking calls; with it on, the non-blocking
//! ones polled with MPI_Test until they complete (benchmarks/bench_collectives.cpp: the cost).
//!
//! \code
//! kdist::set_collective_timeout(std::chrono::minutes(2));
//! kdist::set_collective_timeout(std::chrono::seconds(0));  // off
//! \endcode

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <kdist/core/error.hpp>
#include <optional>
#include <string>

namespace kdist {

//! The watchdog's timeout when neither the environment nor the program sets one.
inline constexpr std::chrono::seconds default_collective_timeout{600};

namespace detail::watchdog {

//! Longest timeout accepted, in seconds (about 115 days; nanoseconds fit in 64 bits).
inline constexpr double max_seconds = 1e7;

struct Settings {
  std::int64_t timeout_ns = -1;  // -1: not read yet; 0: off
  bool set_by_program = false;
};
inline Settings& settings() noexcept {
  static Settings s;
  return s;
}

//! A timeout setting as the environment gives it, in nanoseconds: a decimal number of seconds from
//! 0 to max_seconds (no space, sign or hex), or "off" (0); nothing for any other text. Shared by
//! KDIST_COLLECTIVE_TIMEOUT and KDIST_IO_TIMEOUT (io/detail/io_watch.hpp).
inline std::optional<std::int64_t> timeout_setting(const char* v) {
  const std::string s = v;
  if (s == "off" || s == "OFF" || s == "Off") return 0;
  char* end = nullptr;
  const double seconds = std::strtod(v, &end);
  const bool starts_as_number = (*v >= '0' && *v <= '9') || *v == '.';
  if (!starts_as_number || s.starts_with("0x") || s.starts_with("0X") || end == v || *end != '\0' ||
      !std::isfinite(seconds) || seconds < 0 || seconds > max_seconds) {
    return std::nullopt;
  }
  return static_cast<std::int64_t>(std::llround(seconds * 1e9));
}

//! The timeout KDIST_COLLECTIVE_TIMEOUT asks for, in nanoseconds (0: off; the default when the
//! variable is unset or empty). Errors: kdist::ValueError for any other value.
inline std::int64_t timeout_from_environment() {
  const char* v = std::getenv("KDIST_COLLECTIVE_TIMEOUT");
  if (v == nullptr || *v == '\0') {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(default_collective_timeout).count();
  }
  const auto timeout = timeout_setting(v);
  if (!timeout) {
    const std::string s = v;
    throw ValueError("KDIST_COLLECTIVE_TIMEOUT is '" + s +
                     "', not a number of seconds from 0 to 10000000 or 'off'; set it to the "
                     "seconds a collective may wait for the other processes (e.g. 600), or to 0 "
                     "or off to turn the stuck-collective watchdog off");
  }
  return *timeout;
}

//! Reads (and checks) the environment; it sets the timeout unless the program set one.
inline void read_environment() {
  const std::int64_t t = timeout_from_environment();
  if (!settings().set_by_program) settings().timeout_ns = t;
}

//! The timeout in nanoseconds, 0 when off; reads the environment the first time.
inline std::int64_t timeout_ns() {
  Settings& s = settings();
  if (s.timeout_ns < 0) [[unlikely]] {
    read_environment();
  }
  return s.timeout_ns;
}

}  // namespace detail::watchdog

//! How long a collective waits for the other processes before the watchdog ends the job; zero
//! when the watchdog is off. Errors: kdist::ValueError for a bad KDIST_COLLECTIVE_TIMEOUT when
//! it was not read yet.
[[nodiscard]] inline std::chrono::nanoseconds collective_timeout() {
  return std::chrono::nanoseconds(detail::watchdog::timeout_ns());
}

//! Sets the watchdog's timeout from now on, over KDIST_COLLECTIVE_TIMEOUT; zero turns it off.
//! Call it alike on every process. Errors: kdist::ValueError for a negative duration or one over
//! 10^7 seconds.
template <class Rep, class Period>
void set_collective_timeout(std::chrono::duration<Rep, Period> timeout) {
  const double seconds = std::chrono::duration<double>(timeout).count();
  if (!(seconds >= 0) || seconds > detail::watchdog::max_seconds) {
    throw ValueError("kdist::set_collective_timeout: the timeout is " + std::to_string(seconds) +
                     " s; give a duration from 0 (no timeout) to 10000000 s");
  }
  auto& s = detail::watchdog::settings();
  s.timeout_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(timeout).count();
  s.set_by_program = true;
}

}  // namespace kdist
