#pragma once
//! \file parallel/run.hpp
//! `kdist::run(argc, argv, body)`: a `main` for kdist programs in which one process' error ends
//! the whole job, with its message, within seconds, and no process is left waiting.
//!
//! It starts MPI and Kokkos (a kdist::ScopeGuard, inside its `try`, so a bad
//! KERAS_DISTRIBUTION_* value is an error message, not std::terminate), calls `body(argc, argv)`
//! and returns what it returns. When `body` (or the start-up) throws:
//!  - on every process alike (an error every process agrees on: a bad flag, a mesh that does not
//!    fit the processes): process 0 prints `error: <message>` once and every process returns 2;
//!  - on some processes only (a file missing on one node, a size wrong on one rank): each failing
//!    process prints `error: process R of N failed: <message>` and the job ends by MPI_Abort
//!    (exit status 2), whatever the other processes were doing.
//! The grace period that tells the two apart is KDIST_FAILURE_GRACE_SECONDS (default 2 s).
//! When `body` returns, the processes end together: each tells process 0, which answers once all
//! have; a process that has not returned within the collective timeout (KDIST_COLLECTIVE_TIMEOUT,
//! kdist::set_collective_timeout) ends the job, named by process 0 (`error: process 0 of N failed:
//! kdist::run: this process returned from its main, and process 2 did not within 2 s ...`), where
//! MPI_Finalize would wait for it forever.
//! An exception that escapes any other `main` while a ScopeGuard is alive ends the job too, by
//! ScopeGuard's std::terminate handler (MPI_Abort, with the message and rank).
//!
//! \code
//! int main(int argc, char** argv) {
//!   return kdist::run(argc, argv, [](int argc, char** argv) {
//!     auto mesh = kdist::RuntimeDeviceMesh({2, 4}, {"data", "model"}, kdist::list_devices());
//!     ...
//!     return 0;
//!   });
//! }
//! \endcode

#include <mpi.h>

#include <chrono>
#include <cstdint>
#include <exception>
#include <kdist/core/concepts.hpp>
#include <kdist/parallel/detail/failure.hpp>
#include <kdist/parallel/detail/watchdog.hpp>
#include <kdist/parallel/initialize.hpp>
#include <optional>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

namespace kdist {

namespace detail::failure {

//! The tags of end_together's messages on the error communicator (point-to-point: they match no
//! collective a failing process starts there).
inline constexpr int end_arrived_tag = 0x6b64;
inline constexpr int end_confirmed_tag = 0x6b65;

//! Every process of kdist's communicator reaches the end of kdist::run within the collective
//! timeout, or the job ends: a process that returns while another is stuck would wait in
//! MPI_Finalize (collective on most MPIs) forever, and a launcher that lost a process's MPI_Abort
//! (Open MPI 4.1.4, one run in ten of reliability.watchdog.halo_gather) would never end the job.
//! Each process tells process 0 it arrived; process 0 answers once all have, or names those that
//! did not.
inline void end_together() {
  const State& s = state();
  if (!kdist::detail::mpi_running() || s.comm == MPI_COMM_NULL || s.size <= 1) return;
  const std::int64_t timeout = watchdog::timeout_ns();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::nanoseconds(timeout);
  const auto completes = [&](std::vector<MPI_Request>& requests) {
    for (unsigned i = 1;; ++i) {
      int done = 0;
      MPI_Testall(static_cast<int>(requests.size()), requests.data(), &done, MPI_STATUSES_IGNORE);
      if (done) return true;
      if (timeout != 0 && std::chrono::steady_clock::now() >= deadline) return false;
      if ((i & 63U) == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  };
  const std::string how =
      " (stopped, or still working): the job ends. The timeout is KDIST_COLLECTIVE_TIMEOUT "
      "(seconds; 0 or off: no timeout) or kdist::set_collective_timeout";
  if (s.rank == 0) {
    std::vector<MPI_Request> arrived(static_cast<std::size_t>(s.size - 1), MPI_REQUEST_NULL);
    for (int q = 1; q < s.size; ++q) {
      MPI_Irecv(nullptr, 0, MPI_BYTE, q, end_arrived_tag, s.comm,
                &arrived[static_cast<std::size_t>(q - 1)]);
    }
    if (!completes(arrived)) {
      std::string missing;
      for (int q = 1; q < s.size; ++q) {
        int done = 0;
        MPI_Test(&arrived[static_cast<std::size_t>(q - 1)], &done, MPI_STATUS_IGNORE);
        if (!done) missing += (missing.empty() ? "" : ", ") + describe_process(q);
      }
      abort_job("kdist::run: this process returned from its main, and " + missing +
                " did not within " + watchdog::seconds_text(timeout) + how);
    }
    std::vector<MPI_Request> confirmed(static_cast<std::size_t>(s.size - 1), MPI_REQUEST_NULL);
    for (int q = 1; q < s.size; ++q) {
      MPI_Isend(nullptr, 0, MPI_BYTE, q, end_confirmed_tag, s.comm,
                &confirmed[static_cast<std::size_t>(q - 1)]);
    }
    if (!completes(confirmed)) {
      abort_job("kdist::run: the processes' end could not be confirmed within " +
                watchdog::seconds_text(timeout) + how);
    }
    return;
  }
  std::vector<MPI_Request> end(2, MPI_REQUEST_NULL);
  MPI_Isend(nullptr, 0, MPI_BYTE, 0, end_arrived_tag, s.comm, &end[0]);
  MPI_Irecv(nullptr, 0, MPI_BYTE, 0, end_confirmed_tag, s.comm, &end[1]);
  if (!completes(end)) {
    abort_job(
        "kdist::run: this process returned from its main, and process 0 did not confirm "
        "that every process did within " +
        watchdog::seconds_text(timeout) + how);
  }
}

}  // namespace detail::failure

//! kdist::run on the caller's communicator `comm` (a group of a larger job; MPI initialised by
//! the caller): kdist runs on `comm` (kdist::ScopeGuard(argc, argv, comm)). An error, shared by
//! the group or not, still ends the whole job (MPI_Abort), so that the job's other processes are
//! not left waiting for the group.
template <MainFunction Body>
int run(int argc, char** argv, MPI_Comm comm, Body&& body) noexcept {
  // ScopeGuard's start, except that a start-up error is reported before MPI is finalised.
  struct Guard {
    explicit Guard(detail::runtime::Started s) : started(s) {}
    Guard(const Guard&) = delete;
    Guard& operator=(const Guard&) = delete;
    detail::runtime::Started started;
    ~Guard() { detail::runtime::stop_runtime(started.mpi, started.kokkos, started.communicator); }
  };
  std::optional<Guard> guard;
  try {
    guard.emplace(detail::runtime::start_checked(&argc, &argv, comm, {}, {}, {}, true));
    const int status = body(argc, argv);
    detail::failure::end_together();
    return status;
  } catch (const detail::failure::Reported&) {
    return detail::failure::exit_status;
  } catch (const std::exception& e) {
    return detail::failure::end_job(e.what());
  } catch (...) {
    return detail::failure::end_job("an exception of a type not derived from std::exception");
  }
}

//! Runs `body(argc, argv)` (returning int) under a ScopeGuard; see the file comment for errors.
template <MainFunction Body>
int run(int argc, char** argv, Body&& body) noexcept {
  return run(argc, argv, MPI_COMM_WORLD, std::forward<Body>(body));
}

}  // namespace kdist
