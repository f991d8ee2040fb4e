#pragma once
//! \file parallel/detail/initialize_startup.hpp
//! How kdist::initialize and kdist::ScopeGuard (runtime.hpp) start and stop MPI and Kokkos: each
//! only when it is not running, MPI first (MPI_THREAD_MULTIPLE: the I/O watchdog asks the others
//! from its own thread, io/detail/io_watch.hpp), then kdist's communicator
//! (kdist::communicator(): MPI_COMM_WORLD or a duplicate of the caller's) with the failure path of
//! detail/failure.hpp, then Kokkos on this process' device (on a GPU build its node-local rank
//! modulo the visible GPUs, unless the user chose one); finalised in reverse order, only what was
//! started. Also the device types of list_devices().

#include <mpi.h>

#include <Kokkos_Core.hpp>
#include <algorithm>
#include <cctype>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#if defined(KOKKOS_ENABLE_CUDA)
#include <cuda_runtime_api.h>
#elif defined(KOKKOS_ENABLE_HIP)
#include <hip/hip_runtime_api.h>
#endif

#include <kdist/core/error.hpp>
#include <kdist/parallel/collective_timeout.hpp>
#include <kdist/parallel/detail/failure.hpp>
#include <kdist/parallel/detail/initialize_arguments.hpp>
#include <kdist/parallel/devices.hpp>
#include <kdist/parallel/mpi/agree.hpp>
#include <kdist/parallel/mpi/communicator.hpp>
#include <kdist/parallel/world.hpp>

namespace kdist::detail::runtime {

//! What kdist::initialize() started itself (finalised at exit); ScopeGuard keeps its own record.
struct RuntimeState {
  bool started_mpi = false;
  bool started_kokkos = false;
  bool set_communicator = false;
  bool exit_hook_registered = false;
};
inline RuntimeState& runtime_state() {
  static RuntimeState state;
  return state;
}

//! Initialises MPI (MPI_THREAD_MULTIPLE, which the I/O watchdog's helper thread needs) unless it
//! is; returns whether it did.
inline bool start_mpi(int* argc, char*** argv) {
  // MPI_Initialized stays true after MPI_Finalize: ask MPI_Finalized first.
  if (kdist::detail::mpi_is_finalized()) {
    throw RuntimeError("kdist: MPI was finalised already and cannot be initialised again");
  }
  if (kdist::detail::mpi_is_initialized()) {
    return false;
  }
  int provided = MPI_THREAD_SINGLE;
  mpi::detail::check_mpi(MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided),
                         "kdist: MPI_Init_thread");
  return true;
}

//! Makes `comm` kdist's communicator (kdist::communicator(), parallel/world.hpp) unless kdist
//! already runs; returns whether it did (and the matching stop must release it).
//! MPI_COMM_WORLD is used as it is; any other communicator as a private duplicate, so that
//! kdist's messages never mix with the caller's own on `comm`. Collective over `comm`.
//! Errors: kdist::ValueError for MPI_COMM_NULL; kdist::RuntimeError when kdist already runs on a
//! communicator with other processes (a second initialize/ScopeGuard must give the same one).
inline bool use_communicator(MPI_Comm comm) {
  if (comm == MPI_COMM_NULL) {
    throw ValueError(
        "kdist::initialize: the communicator is MPI_COMM_NULL on process " + std::to_string([] {
          int r = 0;
          MPI_Comm_rank(MPI_COMM_WORLD, &r);
          return r;
        }()) +
        " of MPI_COMM_WORLD; give kdist the communicator of the processes that run it "
        "(MPI_Comm_split gives MPI_COMM_NULL to the processes outside every group: those must "
        "not start kdist)");
  }
  auto& group = kdist::detail::process_group();
  if (group.in_use) {
    int relation = MPI_UNEQUAL;
    mpi::detail::check_mpi(MPI_Comm_compare(comm, kdist::communicator(), &relation),
                           "kdist: MPI_Comm_compare");
    if (relation == MPI_IDENT || relation == MPI_CONGRUENT) return false;
    int size = 0;
    MPI_Comm_size(comm, &size);
    throw RuntimeError("kdist::initialize: kdist already runs on a communicator of " +
                       std::to_string(kdist::process_count()) +
                       " processes, and this call gives one of " + std::to_string(size) +
                       " with other processes; give the same communicator to every "
                       "kdist::initialize and kdist::ScopeGuard of the run, or end the first "
                       "ScopeGuard before starting kdist on another");
  }
  MPI_Comm own = MPI_COMM_NULL;
  if (comm != MPI_COMM_WORLD) {
    mpi::detail::check_mpi(MPI_Comm_dup(comm, &own), "kdist: MPI_Comm_dup");
    char name[MPI_MAX_OBJECT_NAME] = {};
    int length = 0;
    MPI_Comm_get_name(comm, name, &length);
    const std::string label = length > 0 ? "kdist (" + std::string(name, std::size_t(length)) + ")"
                                         : std::string("kdist's communicator");
    MPI_Comm_set_name(own, label.c_str());
  }
  group.comm = own;
  group.owned = own != MPI_COMM_NULL;
  group.in_use = true;
  ++group.generation;
  return true;
}

//! Undoes use_communicator: frees kdist's duplicate (while MPI runs); kdist::communicator() is
//! MPI_COMM_WORLD again.
inline void release_communicator() noexcept {
  auto& group = kdist::detail::process_group();
  if (group.owned && kdist::detail::mpi_running()) MPI_Comm_free(&group.comm);
  group.comm = MPI_COMM_NULL;
  group.owned = false;
  group.in_use = false;
  ++group.generation;
}

//! Starts MPI (unless it runs), makes `comm` kdist's communicator and prepares the failure path:
//! one process' error ends the job (detail/failure.hpp). Collective over `comm`. Returns whether
//! MPI was started and whether the communicator was set (both to be undone by the stop).
inline std::pair<bool, bool> start_mpi_and_failure_path(int* argc, char*** argv, MPI_Comm comm) {
  const bool started = start_mpi(argc, argv);
  bool set = false;
  try {
    set = use_communicator(comm);
    failure::prepare();
  } catch (...) {
    if (set) release_communicator();
    if (started) MPI_Finalize();
    throw;
  }
  return {started, set};
}

//! Reads KDIST_COLLECTIVE_TIMEOUT (collective_timeout.hpp). Collective over kdist's communicator: a bad
//! value on any process is the same kdist::ValueError on every process (mpi::agree), and so is a
//! watchdog on for some processes and off for others (their collectives would not match: a
//! watched collective is MPI's non-blocking call, an unwatched one the blocking call).
inline void read_collective_timeout() {
  std::string problem;
  std::int64_t timeout = 0;
  try {
    timeout = watchdog::timeout_from_environment();
  } catch (const ValueError& e) {
    problem = e.what();
  }
  // These agreements use MPI's blocking calls on every process, whatever the variable says.
  auto& settings = watchdog::settings();
  const auto kept = settings;
  settings.timeout_ns = 0;
  mpi::agree(kdist::communicator(), problem.empty(), problem);
  if (!kept.set_by_program)
    settings.timeout_ns = timeout;
  else
    settings = kept;
  const int on = settings.timeout_ns > 0 ? 1 : 0;
  int extremes[2] = {on, -on};  // min and -max
  mpi::detail::check_mpi(
      MPI_Allreduce(MPI_IN_PLACE, extremes, 2, MPI_INT, MPI_MIN, kdist::communicator()),
      "kdist: MPI_Allreduce");
  if (extremes[0] != -extremes[1]) {
    throw ValueError(
        "the stuck-collective watchdog is off on some processes and on on others "
        "(KDIST_COLLECTIVE_TIMEOUT or kdist::set_collective_timeout); set it alike on every "
        "process, or their collectives would not match (a watched collective is MPI's "
        "non-blocking call)");
  }
}

//! This process' rank among kdist's processes on its node (MPI_COMM_TYPE_SHARED).
inline int node_local_rank() {
  MPI_Comm node = MPI_COMM_NULL;
  mpi::detail::check_mpi(
      MPI_Comm_split_type(kdist::communicator(), MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node),
      "kdist: MPI_Comm_split_type");
  return mpi::Communicator::adopt(node).rank();
}

//! The number of GPUs this process sees; 0 when it cannot tell.
inline int visible_gpu_count() {
  int count = 0;
#if defined(KOKKOS_ENABLE_CUDA)
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    count = 0;
  }
#elif defined(KOKKOS_ENABLE_HIP)
  if (hipGetDeviceCount(&count) != hipSuccess) {
    count = 0;
  }
#endif
  return count;
}

//! True when the command line or the environment already tells Kokkos which device to use.
inline bool user_chose_device(int argc, char** argv) {
  for (const char* name : {"KOKKOS_DEVICE_ID", "KOKKOS_NUM_DEVICES", "KOKKOS_RAND_DEVICES",
                           "KOKKOS_MAP_DEVICE_ID_BY"}) {
    if (std::getenv(name) != nullptr) {
      return true;
    }
  }
  for (int i = 1; argv != nullptr && i < argc && argv[i] != nullptr; ++i) {
    const std::string_view arg = argv[i];
    for (std::string_view option : {"--kokkos-device-id", "--kokkos-device", "--device-id",
                                    "--device", "--kokkos-num-devices", "--kokkos-ndevices",
                                    "--num-devices", "--ndevices", "--kokkos-map-device-id-by"}) {
      if (arg.starts_with(option) && (arg.size() == option.size() || arg[option.size()] == '=')) {
        return true;
      }
    }
  }
  return false;
}

//! The device this process uses on a GPU build: its node-local rank, modulo the visible GPUs;
//! -1 (Kokkos' choice) on a host build or when the user chose.
inline int device_for_this_process(int argc, char** argv) {
  if constexpr (!default_space_is_gpu) {
    return -1;
  } else {
    if (user_chose_device(argc, argv)) {
      return -1;
    }
    const int local = node_local_rank();
    const int gpus = visible_gpu_count();
    return gpus > 0 ? local % gpus : local;
  }
}

//! Initialises Kokkos unless it is; returns whether it did. MPI must be initialised (for the
//! node-local rank). With `argv`, Kokkos reads its command-line options and removes them from
//! argc/argv; kdist's device choice then travels as `--kokkos-device-id=N`.
inline bool start_kokkos(int* argc, char** argv) {
  if (Kokkos::is_initialized()) {
    return false;
  }
#if KOKKOS_VERSION >= 40000
  if (Kokkos::is_finalized()) {
    throw RuntimeError("kdist: Kokkos was finalised already and cannot be initialised again");
  }
#endif
  const int device = device_for_this_process(argc != nullptr ? *argc : 0, argv);
  if (argc != nullptr && argv != nullptr) {
    // Kokkos 3 cannot take both argv and settings: pass the device as an option on a copy of argv,
    // then write back what Kokkos left (it removes the options it understood). The program's own
    // --help is not shown to Kokkos, which would print its 40 lines of options first: Kokkos' help
    // is --kokkos-help.
    const std::vector<char*> given(argv, argv + *argc);
    const auto is_program_help = [](const char* a) { return std::string_view(a) == "--help"; };
    std::vector<char*> args;
    for (char* a : given) {
      if (!is_program_help(a)) args.push_back(a);
    }
    std::string device_option = "--kokkos-device-id=" + std::to_string(device);
    if (device >= 0) {
      args.push_back(device_option.data());
    }
    int n = static_cast<int>(args.size());
    args.push_back(nullptr);
    Kokkos::initialize(n, args.data());
    const auto left_by_kokkos = [&](const char* a) {
      return std::find(args.begin(), args.begin() + n, a) != args.begin() + n;
    };
    int kept = 0;
    for (char* a : given) {  // the given order, less what Kokkos took
      if (is_program_help(a) || left_by_kokkos(a)) argv[kept++] = a;
    }
    argv[kept] = nullptr;
    *argc = kept;
  } else {
#if KOKKOS_VERSION >= 30700  // InitializationSettings since 3.7; InitArguments removed in 4.0
    Kokkos::InitializationSettings settings;
    if (device >= 0) {
      settings.set_device_id(device);
    }
    Kokkos::initialize(settings);
#else
    Kokkos::InitArguments arguments;
    arguments.device_id = device;
    Kokkos::initialize(arguments);
#endif
  }
  return true;
}

//! Finalises, in reverse order, what was started.
inline void stop_runtime(bool started_mpi, bool started_kokkos, bool set_communicator) noexcept {
  if (started_kokkos && Kokkos::is_initialized()) {
    Kokkos::finalize();
  }
  if (set_communicator) release_communicator();
  if (started_mpi && kdist::detail::mpi_is_initialized() && !kdist::detail::mpi_is_finalized()) {
    failure::release();
    MPI_Finalize();
  }
}

//! kdist::initialize's start: MPI, kdist's communicator and Kokkos, each unless it runs; what
//! this starts is finalised when the program exits (one std::atexit hook for the whole program).
inline void start_until_exit(MPI_Comm comm) {
  auto& state = runtime_state();
  const auto [started_mpi, set_communicator] = start_mpi_and_failure_path(nullptr, nullptr, comm);
  bool started_kokkos = false;
  try {
    read_collective_timeout();
    started_kokkos = start_kokkos(nullptr, nullptr);
  } catch (...) {
    stop_runtime(started_mpi, false, set_communicator);
    throw;
  }
  state.started_mpi = state.started_mpi || started_mpi;
  state.started_kokkos = state.started_kokkos || started_kokkos;
  state.set_communicator = state.set_communicator || set_communicator;
  if ((started_mpi || started_kokkos || set_communicator) && !state.exit_hook_registered) {
    state.exit_hook_registered = true;
    std::atexit([] {
      auto& s = runtime_state();
      stop_runtime(s.started_mpi, s.started_kokkos, s.set_communicator);
    });
  }
}

//! What a ScopeGuard started (and finalises).
struct Started {
  bool mpi = false;
  bool kokkos = false;
  bool communicator = false;
};

//! kdist::ScopeGuard's start: MPI, then Kokkos (which reads and removes its options from argc and
//! argv when given), each unless it runs, then validate_initialize_arguments with the command line
//! as given. When anything throws, what was started is finalised before the error propagates.
//! With `report_failure` (kdist::run) the error is reported as kdist::run reports any other
//! (failure::end_job) while MPI still runs, and failure::Reported is thrown instead: once MPI is
//! finalised, a process that exits with the error can make the launcher (Open MPI's) kill
//! process 0 before it printed the message.
inline Started start_checked(int* argc, char*** argv, MPI_Comm comm,
                             std::optional<std::string> job_addresses,
                             std::optional<int> num_processes, std::optional<int> process_id,
                             bool report_failure = false) {
  // Keep the command line as given, for the mpiexec hint (MPI and Kokkos may edit argv).
  std::vector<std::string> words;
  if (argc != nullptr && argv != nullptr && *argv != nullptr) {
    words.assign(*argv, *argv + *argc);
  }
  Started started;
  std::tie(started.mpi, started.communicator) = start_mpi_and_failure_path(argc, argv, comm);
  try {
    read_collective_timeout();
    started.kokkos = start_kokkos(argc, argv != nullptr ? *argv : nullptr);
    std::vector<char*> pointers;
    for (auto& w : words) {
      pointers.push_back(w.data());
    }
    validate_initialize_arguments(std::move(job_addresses), num_processes, process_id,
                                  static_cast<int>(pointers.size()), pointers.data());
  } catch (...) {
    const bool report = report_failure && kdist::detail::mpi_running();
    if (report) failure::end_job(failure::message_of(std::current_exception()));
    stop_runtime(started.mpi, started.kokkos, started.communicator);
    if (report) throw failure::Reported{};
    throw;
  }
  return started;
}

}  // namespace kdist::detail::runtime
