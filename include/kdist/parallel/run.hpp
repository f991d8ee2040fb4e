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

#include <exception>
#include <kdist/core/concepts.hpp>
#include <kdist/parallel/detail/failure.hpp>
#include <kdist/parallel/initialize.hpp>
#include <optional>
#include <type_traits>
#include <utility>

namespace kdist {

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
    return body(argc, argv);
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
