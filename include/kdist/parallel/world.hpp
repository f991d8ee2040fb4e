#pragma once
//! \file parallel/world.hpp
//! The processes kdist runs on: `kdist::communicator()` (MPI_COMM_WORLD, or the communicator given
//! to kdist::initialize / kdist::ScopeGuard), `kdist::process_count()`, `kdist::process_id()`, and
//! the one check of whether MPI is running (`detail::mpi_running`, `detail::require_mpi`) and of
//! whether kdist runs on this process (`detail::require_started`: never MPI_COMM_WORLD by default).
//! Everything in kdist that asks "is MPI up?", "which process am I?" or "whom do I talk to?" asks
//! here; strategies take the process count from here without pulling in start-up
//! (parallel/initialize.hpp, the CUDA/HIP runtime headers).

#include <mpi.h>

#include <cstdint>
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

//! The communicator kdist runs on, as kdist::initialize / kdist::ScopeGuard set it
//! (detail/initialize_startup.hpp: use_communicator, release_communicator).
struct ProcessGroup {
  MPI_Comm comm = MPI_COMM_NULL;  // MPI_COMM_NULL: MPI_COMM_WORLD itself
  bool in_use = false;            // set by a start that has not been stopped yet
  bool owned = false;             // a duplicate of the caller's communicator, freed by kdist
  // Bumped at every change: what was built on an earlier communicator (mesh communicators, the
  // error communicator) is stale and built again.
  std::uint64_t generation = 0;
};
inline ProcessGroup& process_group() {
  static ProcessGroup group;
  return group;
}

//! Throws kdist::RuntimeError naming `who` unless kdist runs on this process: MPI is running and
//! kdist::initialize, kdist::ScopeGuard or kdist::run started kdist here (and it was not stopped).
//! kdist never falls back to MPI_COMM_WORLD: on a process outside kdist's communicator (the
//! simulation half of an in-situ job) a collective over "every process" would wait for processes
//! that never join.
inline void require_started(const char* who) {
  require_mpi(who);
  if (!process_group().in_use) {
    int world_rank = -1;
    MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
    throw RuntimeError(
        std::string(who) + ": kdist was not started on this process (rank " +
        std::to_string(world_rank) +
        " of MPI_COMM_WORLD): kdist runs on the communicator given to kdist::ScopeGuard, "
        "kdist::initialize or kdist::run, which this process is not in, and never falls back to "
        "MPI_COMM_WORLD; start kdist here (kdist::ScopeGuard guard(argc, argv, comm)) or keep "
        "kdist's calls to the processes that started it");
  }
}

}  // namespace detail

//! The communicator kdist runs on: MPI_COMM_WORLD, or (a private duplicate of) the communicator
//! given to kdist::initialize / kdist::ScopeGuard. Devices, meshes, collectives, data sharding,
//! checkpoints and the failure path all use it; a code that trains on some of its ranks gives
//! kdist those ranks' communicator. Pass it to kdist::all_reduce and friends for a collective over
//! every process of the run.
//! Errors: kdist::RuntimeError when kdist does not run on this process (MPI not running, or no
//! ScopeGuard / initialize / run started kdist here): never MPI_COMM_WORLD by default.
[[nodiscard]] inline MPI_Comm communicator() {
  detail::require_started("kdist::communicator");
  const MPI_Comm comm = detail::process_group().comm;
  return comm == MPI_COMM_NULL ? MPI_COMM_WORLD : comm;
}

//! The number of processes, the size of kdist::communicator() (Keras: `jax.process_count()`).
//! Errors: kdist::RuntimeError when kdist does not run on this process (see communicator()).
[[nodiscard]] inline int process_count() {
  detail::require_started("kdist::process_count");
  int size = 0;
  MPI_Comm_size(communicator(), &size);
  return size;
}

//! This process' id, its rank in kdist::communicator(), in [0, process_count()).
//! Errors: kdist::RuntimeError when kdist does not run on this process (see communicator()).
[[nodiscard]] inline int process_id() {
  detail::require_started("kdist::process_id");
  int rank = 0;
  MPI_Comm_rank(communicator(), &rank);
  return rank;
}

}  // namespace kdist
