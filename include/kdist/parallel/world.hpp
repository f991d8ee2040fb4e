#pragma once
//! \file parallel/world.hpp
//! The processes kdist runs on: `kdist::process_count()`, `kdist::process_id()`, and the one check
//! of whether MPI is running (`detail::mpi_running`, `detail::require_mpi`). Everything in kdist
//! that asks "is MPI up?" or "which process am I?" asks here; strategies take the process count
//! from here without pulling in start-up (parallel/initialize.hpp, the CUDA/HIP runtime headers).

#include <mpi.h>

#include <kdist/core/error.hpp>
#include <string>

namespace kdist {
namespace detail {

//! MPI_Init has been called (it stays true after MPI_Finalize: ask mpi_is_finalized too).
inline bool mpi_is_initialized() {
  int initialized = 0;
  MPI_Initialized(&initialized);
  return initialized != 0;
}

//! MPI_Finalize has been called.
inline bool mpi_is_finalized() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  return finalized != 0;
}

//! MPI is initialised and not yet finalised: MPI calls are allowed.
inline bool mpi_running() {
  return mpi_is_initialized() && !mpi_is_finalized();
}

//! Throws kdist::RuntimeError naming `who` when MPI is not initialised (or already finalised).
inline void require_mpi(const char* who) {
  if (!mpi_running()) {
    throw RuntimeError(
        std::string(who) + ": MPI is " +
        (mpi_is_finalized() ? "already finalised" : "not initialised") +
        "; create a kdist::ScopeGuard at the start of main (or call kdist::initialize()) "
        "and keep it alive while kdist is used");
  }
}

}  // namespace detail

//! The number of processes, the size of MPI_COMM_WORLD (Keras: `jax.process_count()`).
//! Errors: kdist::RuntimeError when MPI is not running (no ScopeGuard or initialize() yet).
[[nodiscard]] inline int process_count() {
  detail::require_mpi("kdist::process_count");
  int size = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  return size;
}

//! This process' id, its MPI_COMM_WORLD rank, in [0, process_count()).
//! Errors: kdist::RuntimeError when MPI is not running.
[[nodiscard]] inline int process_id() {
  detail::require_mpi("kdist::process_id");
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

}  // namespace kdist
