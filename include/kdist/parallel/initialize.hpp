#pragma once
//! \file parallel/initialize.hpp
//! Starting kdist: `kdist::initialize`, the RAII `kdist::ScopeGuard`, `kdist::list_devices`,
//! `kdist::get_device_count`, `kdist::process_count`, `kdist::process_id`.
//!
//! kdist runs one device per MPI process: process r (MPI_COMM_WORLD rank r) drives global device r,
//! named `"cpu:r"`, or `"gpu:r"` when Kokkos' default execution space is a GPU. On a GPU build a
//! process picks its GPU by its rank on its node (MPI_COMM_TYPE_SHARED), unless the user chose one
//! (`--kokkos-device-id`, `--kokkos-num-devices`, `--kokkos-map-device-id-by` or the matching
//! `KOKKOS_*` environment variables).
//!
//! Keras launch scripts carry over: `initialize` and `ScopeGuard` read
//! `KERAS_DISTRIBUTION_JOB_ADDRESSES`, `KERAS_DISTRIBUTION_NUM_PROCESSES` and
//! `KERAS_DISTRIBUTION_PROCESS_ID` for the arguments not given, and check them against MPI's world
//! (the processes are started by `mpiexec`, so the values are only checked, never needed).
//!
//! The machinery is in detail/runtime_startup.hpp (starting and stopping MPI and Kokkos, the
//! device choice) and detail/runtime_arguments.hpp (the checks of the Keras settings).
//!
//! \code
//! int main(int argc, char** argv) {
//!   kdist::ScopeGuard guard(argc, argv);        // MPI + Kokkos, finalised at scope exit
//!   std::vector<std::string> devices = kdist::list_devices();  // {"cpu:0", "cpu:1"} at -n 2
//! }
//! \endcode

#include <mpi.h>

#include <cstddef>
#include <kdist/parallel/detail/initialize_arguments.hpp>
#include <kdist/parallel/detail/initialize_startup.hpp>
#include <kdist/parallel/mpi/communicator.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace kdist {

//! True when Kokkos' default execution space is a GPU (it cannot run on host memory): CUDA, HIP,
//! SYCL, OpenMPTarget. Then list_devices() names the devices "gpu:N".
inline constexpr bool default_space_is_gpu = detail::runtime::default_space_is_gpu;

//! Initialises kdist for a run of several processes, like `keras.distribution.initialize`.
//!
//! Starts MPI (MPI_THREAD_FUNNELED) and Kokkos if they are not running yet (only what is not; what
//! this call starts is finalised when the program exits), then checks the arguments against
//! MPI_COMM_WORLD. Each argument not given falls back to its environment variable:
//! `KERAS_DISTRIBUTION_JOB_ADDRESSES`, `KERAS_DISTRIBUTION_NUM_PROCESSES`,
//! `KERAS_DISTRIBUTION_PROCESS_ID` (an empty variable counts as unset). MPI's launcher starts and
//! connects the processes, so nothing is needed: what is given is only checked.
//!
//! - `job_addresses`: comma-separated addresses of every process (Keras); their number must be
//!   `num_processes` (or the world size). A single address (the coordinator) is not counted.
//! - `num_processes`: must equal the size of MPI_COMM_WORLD.
//! - `process_id`: must equal this process' MPI_COMM_WORLD rank.
//!
//! Collective over MPI_COMM_WORLD: call it on every process. When any process finds a problem,
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
  detail::runtime::start_until_exit();
  detail::runtime::validate_initialize_arguments(std::move(job_addresses), num_processes,
                                                 process_id);
}

//! RAII start of MPI and Kokkos for `main`, like `Kokkos::ScopeGuard`:
//! `kdist::ScopeGuard guard(argc, argv);`.
//!
//! Initialises MPI (`MPI_Init_thread`, MPI_THREAD_FUNNELED) and then Kokkos, each only if it is not
//! initialised already, and finalises in reverse order only what it initialised. Kokkos reads and
//! removes its `--kokkos-*` options from argc/argv. Then checks the Keras settings exactly as
//! kdist::initialize does (same arguments, same environment variables, same errors, collective over
//! MPI_COMM_WORLD); if the check throws, what the guard started is finalised before the error
//! propagates. Non-copyable, non-movable.
class ScopeGuard {
 public:
  //! With the command line (recommended: MPI and Kokkos see their options).
  ScopeGuard(int& argc, char**& argv, std::optional<std::string> job_addresses = {},
             std::optional<int> num_processes = {}, std::optional<int> process_id = {})
      : started_(detail::runtime::start_checked(&argc, &argv, std::move(job_addresses),
                                                num_processes, process_id)) {}
  //! Without a command line.
  explicit ScopeGuard(std::optional<std::string> job_addresses = {},
                      std::optional<int> num_processes = {}, std::optional<int> process_id = {})
      : started_(detail::runtime::start_checked(nullptr, nullptr, std::move(job_addresses),
                                                num_processes, process_id)) {}
  ScopeGuard(const ScopeGuard&) = delete;
  ScopeGuard& operator=(const ScopeGuard&) = delete;
  ScopeGuard(ScopeGuard&&) = delete;
  ScopeGuard& operator=(ScopeGuard&&) = delete;
  ~ScopeGuard() { detail::runtime::stop_runtime(started_.mpi, started_.kokkos); }

  //! True when this guard initialised MPI (and will finalise it).
  [[nodiscard]] bool started_mpi() const noexcept { return started_.mpi; }
  //! True when this guard initialised Kokkos (and will finalise it).
  [[nodiscard]] bool started_kokkos() const noexcept { return started_.kokkos; }

 private:
  detail::runtime::Started started_;
};

//! The number of processes, the size of MPI_COMM_WORLD (Keras: `jax.process_count()`).
//! Errors: kdist::RuntimeError when MPI is not running (no ScopeGuard or initialize() yet).
[[nodiscard]] inline int process_count() {
  mpi::detail::require_mpi("kdist::process_count");
  int size = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  return size;
}

//! This process' id, its MPI_COMM_WORLD rank, in [0, process_count()).
//! Errors: kdist::RuntimeError when MPI is not running.
[[nodiscard]] inline int process_id() {
  mpi::detail::require_mpi("kdist::process_id");
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

//! The global devices, one per process, like `keras.distribution.list_devices`: `"cpu:0"` ...
//! `"cpu:N-1"`, or `"gpu:0"` ... when the type is "gpu". Device r is driven by MPI rank r.
//!
//! `device_type`: "cpu", "gpu" or "tpu", any case; by default "gpu" when Kokkos' default execution
//! space is a GPU, else "cpu". "cpu" is always available (every process has a host).
//! Errors: kdist::RuntimeError for a type this build has no devices of ("gpu" on a host-only
//! Kokkos, "tpu" always), naming what is available, or when MPI is not running;
//! kdist::ValueError for an unknown type, listing the valid ones.
//!
//! \code
//! auto devices = kdist::list_devices();        // {"cpu:0", "cpu:1"} under mpiexec -n 2
//! auto same = kdist::list_devices("CPU");      // any case
//! \endcode
[[nodiscard]] inline std::vector<std::string> list_devices(
    std::optional<std::string> device_type = {}) {
  const std::string type = detail::runtime::resolve_device_type(device_type, "kdist::list_devices");
  const int n = process_count();
  std::vector<std::string> devices;
  devices.reserve(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) {
    devices.push_back(type + ":" + std::to_string(i));
  }
  return devices;
}

//! The number of global devices of `device_type` (`list_devices(device_type).size()`), like
//! `keras.distribution.get_device_count`. Same defaults and errors as list_devices.
[[nodiscard]] inline int get_device_count(std::optional<std::string> device_type = {}) {
  (void)detail::runtime::resolve_device_type(device_type, "kdist::get_device_count");
  return process_count();
}

}  // namespace kdist
