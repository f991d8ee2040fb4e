#pragma once
//! \file parallel/initialize.hpp
//! Starting kdist: `kdist::initialize`, the RAII `kdist::ScopeGuard`, `kdist::list_devices`,
//! `kdist::get_device_count`, `kdist::process_count`, `kdist::process_id`.
//!
//! kdist runs one device per MPI process: process r (rank r of kdist::communicator(), which is
//! MPI_COMM_WORLD unless the program gives initialize/ScopeGuard its own) drives global device r,
//! named `"cpu:r"`, or `"gpu:r"` when Kokkos' default execution space is a GPU. On a GPU build a
//! process picks its GPU by its rank on its node (MPI_COMM_TYPE_SHARED), unless the user chose one
//! (`--kokkos-device-id`, `--kokkos-num-devices`, `--kokkos-map-device-id-by` or the matching
//! `KOKKOS_*` environment variables).
//!
//! Keras launch scripts carry over: `initialize` and `ScopeGuard` read
//! `KERAS_DISTRIBUTION_JOB_ADDRESSES`, `KERAS_DISTRIBUTION_NUM_PROCESSES` and
//! `KERAS_DISTRIBUTION_PROCESS_ID` for the arguments not given, and check them against kdist's
//! communicator (the processes are started by `mpiexec`, so the values are only checked).
//!
//! A code that owns MPI gives kdist the communicator of the processes that train (its first
//! argument, an `MPI_Comm`): then `num_processes` is that communicator's size, process ids are its
//! ranks, and every collective, mesh, checkpoint and failure report of kdist stays within it; two
//! groups of one job (an `MPI_Comm_split`, or an MPMD launch split on `MPI_APPNUM`) run kdist
//! independently. An error in one group still ends the whole job (MPI_Abort), never a hang.
//!
//! process_count/process_id live in parallel/world.hpp, list_devices/get_device_count in
//! parallel/devices.hpp (both included here). The machinery is in detail/initialize_startup.hpp (starting and stopping MPI and Kokkos, the
//! device choice) and detail/initialize_arguments.hpp (the checks of the Keras settings).
//!
//! \code
//! int main(int argc, char** argv) {
//!   kdist::ScopeGuard guard(argc, argv);        // MPI + Kokkos, finalised at scope exit
//!   std::vector<std::string> devices = kdist::list_devices();  // {"cpu:0", "cpu:1"} at -n 2
//! }
//! \endcode
//!
//! \code
//! MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);   // the code owns MPI
//! MPI_Comm_split(MPI_COMM_WORLD, rank < 4 ? 0 : 1, rank, &group);   // simulation | training
//! if (rank >= 4) { kdist::ScopeGuard guard(argc, argv, group); /* kdist on 'group' */ }
//! \endcode

#include <mpi.h>

#include <cstddef>
#include <kdist/parallel/detail/initialize_arguments.hpp>
#include <kdist/parallel/detail/initialize_startup.hpp>
#include <kdist/parallel/devices.hpp>
#include <kdist/parallel/mpi/communicator.hpp>
#include <kdist/parallel/world.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace kdist {

//! Initialises kdist for a run of several processes, like `keras.distribution.initialize`.
//!
//! Starts MPI (MPI_THREAD_MULTIPLE) and Kokkos if they are not running yet (only what is not; what
//! this call starts is finalised when the program exits), then checks the arguments against
//! kdist's communicator (MPI_COMM_WORLD; the overload below takes another). Each argument not given
//! falls back to its environment variable:
//! `KERAS_DISTRIBUTION_JOB_ADDRESSES`, `KERAS_DISTRIBUTION_NUM_PROCESSES`,
//! `KERAS_DISTRIBUTION_PROCESS_ID` (an empty variable counts as unset). MPI's launcher starts and
//! connects the processes, so nothing is needed: what is given is only checked.
//!
//! - `job_addresses`: comma-separated addresses of every process (Keras); their number must be
//!   `num_processes` (or the world size). A single address (the coordinator) is not counted.
//! - `num_processes`: must equal the size of kdist's communicator.
//! - `process_id`: must equal this process' rank in it.
//!
//! Collective over kdist's communicator: call it on every process. When any process finds a problem,
//! every process throws the same error (the one of the lowest such process).
//! Errors: kdist::ValueError for a value that is wrong on its own (a variable that is not a number,
//! num_processes < 1, a process_id out of range, job_addresses of the wrong length or with an empty
//! entry); kdist::RuntimeError when a value disagrees with MPI's world (process count vs world
//! size, with the `mpiexec -n N <program>` line that would work; process id vs rank).
//!
//! \code
//! kdist::initialize();                                  // from the KERAS_DISTRIBUTION_* variables
//! kdist::initialize("10.0.0.1:1234,10.0.0.2:2345", 2);  // two processes: mpiexec -n 2 ./prog
//! \endcode
inline void initialize(std::optional<std::string> job_addresses = {},
                       std::optional<int> num_processes = {}, std::optional<int> process_id = {}) {
  detail::runtime::start_until_exit(MPI_COMM_WORLD);
  detail::runtime::validate_initialize_arguments(std::move(job_addresses), num_processes,
                                                 process_id);
}

//! kdist::initialize on the caller's communicator `comm` (MPI must be initialised by the caller,
//! who made `comm`): kdist::communicator() becomes a private duplicate of it, `num_processes` and
//! `process_id` are checked against its size and this process' rank in it. Collective over `comm`.
//! Errors: as above; kdist::ValueError for MPI_COMM_NULL; kdist::RuntimeError when kdist already
//! runs on a communicator with other processes.
inline void initialize(MPI_Comm comm, std::optional<std::string> job_addresses = {},
                       std::optional<int> num_processes = {}, std::optional<int> process_id = {}) {
  detail::runtime::start_until_exit(comm);
  detail::runtime::validate_initialize_arguments(std::move(job_addresses), num_processes,
                                                 process_id);
}

//! RAII start of MPI and Kokkos for `main`, like `Kokkos::ScopeGuard`:
//! `kdist::ScopeGuard guard(argc, argv);`.
//!
//! Initialises MPI (`MPI_Init_thread`, MPI_THREAD_MULTIPLE) and then Kokkos, each only if it is not
//! initialised already, and finalises in reverse order only what it initialised. Kokkos reads and
//! removes its `--kokkos-*` options from argc/argv. Then checks the Keras settings exactly as
//! kdist::initialize does (same arguments, same environment variables, same errors, collective over
//! kdist's communicator); if the check throws, what the guard started is finalised before the error
//! propagates. Given a communicator (`ScopeGuard guard(argc, argv, comm)`, MPI initialised by the
//! caller), kdist runs on it until the guard ends. Non-copyable, non-movable.
class ScopeGuard {
 public:
  //! With the command line (recommended: MPI and Kokkos see their options).
  ScopeGuard(int& argc, char**& argv, std::optional<std::string> job_addresses = {},
             std::optional<int> num_processes = {}, std::optional<int> process_id = {})
      : started_(detail::runtime::start_checked(
            &argc, &argv, MPI_COMM_WORLD, std::move(job_addresses), num_processes, process_id)) {}
  //! With the command line, on the caller's communicator `comm`.
  ScopeGuard(int& argc, char**& argv, MPI_Comm comm, std::optional<std::string> job_addresses = {},
             std::optional<int> num_processes = {}, std::optional<int> process_id = {})
      : started_(detail::runtime::start_checked(&argc, &argv, comm, std::move(job_addresses),
                                                num_processes, process_id)) {}
  //! Without a command line.
  explicit ScopeGuard(std::optional<std::string> job_addresses = {},
                      std::optional<int> num_processes = {}, std::optional<int> process_id = {})
      : started_(detail::runtime::start_checked(nullptr, nullptr, MPI_COMM_WORLD,
                                                std::move(job_addresses), num_processes,
                                                process_id)) {}
  //! Without a command line, on the caller's communicator `comm`.
  explicit ScopeGuard(MPI_Comm comm, std::optional<std::string> job_addresses = {},
                      std::optional<int> num_processes = {}, std::optional<int> process_id = {})
      : started_(detail::runtime::start_checked(nullptr, nullptr, comm, std::move(job_addresses),
                                                num_processes, process_id)) {}
  ScopeGuard(const ScopeGuard&) = delete;
  ScopeGuard& operator=(const ScopeGuard&) = delete;
  ScopeGuard(ScopeGuard&&) = delete;
  ScopeGuard& operator=(ScopeGuard&&) = delete;
  ~ScopeGuard() {
    detail::runtime::stop_runtime(started_.mpi, started_.kokkos, started_.communicator);
  }

  //! True when this guard initialised MPI (and will finalise it).
  [[nodiscard]] bool started_mpi() const noexcept { return started_.mpi; }
  //! True when this guard initialised Kokkos (and will finalise it).
  [[nodiscard]] bool started_kokkos() const noexcept { return started_.kokkos; }

 private:
  detail::runtime::Started started_;
};

}  // namespace kdist
