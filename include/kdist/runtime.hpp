#pragma once
//! \file runtime.hpp
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
//! \code
//! int main(int argc, char** argv) {
//!   kdist::ScopeGuard guard(argc, argv);                 // MPI + Kokkos, finalised at scope exit
//!   std::vector<std::string> devices = kdist::list_devices();  // {"cpu:0", "cpu:1"} under mpiexec
//!   -n 2
//! }
//! \endcode

#include <mpi.h>

#include <Kokkos_Core.hpp>
#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <type_traits>
#include <vector>

#if defined(KOKKOS_ENABLE_CUDA)
#include <cuda_runtime_api.h>
#elif defined(KOKKOS_ENABLE_HIP)
#include <hip/hip_runtime_api.h>
#endif

#include <kdist/detail/failure.hpp>
#include <kdist/error.hpp>
#include <kdist/mpi/agree.hpp>
#include <kdist/mpi/communicator.hpp>

namespace kdist {

//! True when Kokkos' default execution space is a GPU (it cannot run on host memory): CUDA, HIP,
//! SYCL, OpenMPTarget. Then list_devices() names the devices "gpu:N".
inline constexpr bool default_space_is_gpu =
    !Kokkos::SpaceAccessibility<Kokkos::DefaultExecutionSpace, Kokkos::HostSpace>::accessible;

namespace detail::runtime {

//! The environment variables Keras' launch scripts set.
inline constexpr const char* env_job_addresses = "KERAS_DISTRIBUTION_JOB_ADDRESSES";
inline constexpr const char* env_num_processes = "KERAS_DISTRIBUTION_NUM_PROCESSES";
inline constexpr const char* env_process_id = "KERAS_DISTRIBUTION_PROCESS_ID";

//! What kdist::initialize() started itself (finalised at exit); ScopeGuard keeps its own record.
struct RuntimeState {
  bool started_mpi = false;
  bool started_kokkos = false;
  bool exit_hook_registered = false;
};
inline RuntimeState& runtime_state() {
  static RuntimeState state;
  return state;
}

inline bool mpi_is_initialized() {
  int initialized = 0;
  MPI_Initialized(&initialized);
  return initialized != 0;
}
inline bool mpi_is_finalized() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  return finalized != 0;
}

//! A word for a shell command line, quoted when it has characters the shell would interpret.
inline std::string shell_quote(std::string_view word) {
  const bool plain = !word.empty() && std::all_of(word.begin(), word.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) ||
           std::string_view("-_./=:,+@%").find(c) != std::string_view::npos;
  });
  if (plain) {
    return std::string(word);
  }
  std::string out = "'";
  for (char c : word) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  return out + "'";
}

//! This program's command line as the shell would take it: from /proc/self/cmdline (Linux),
//! else from `argv`, else "<program>".
inline std::string program_command_line(int argc = 0, char** argv = nullptr) {
  std::vector<std::string> words;
  if (std::ifstream in("/proc/self/cmdline", std::ios::binary); in) {
    const std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::size_t begin = 0;
    while (begin < all.size()) {
      std::size_t end = all.find('\0', begin);
      if (end == std::string::npos) {
        end = all.size();
      }
      words.emplace_back(all, begin, end - begin);
      begin = end + 1;
    }
  }
  if (words.empty() && argv != nullptr) {
    for (int i = 0; i < argc && argv[i] != nullptr; ++i) {
      words.emplace_back(argv[i]);
    }
  }
  if (words.empty()) {
    return "<program>";
  }
  std::string out;
  for (const auto& w : words) {
    if (!out.empty()) {
      out += ' ';
    }
    out += shell_quote(w);
  }
  return out;
}

//! The mpiexec command line that starts this program on `n` processes.
inline std::string mpiexec_command(int n, int argc = 0, char** argv = nullptr) {
  return "mpiexec -n " + std::to_string(n) + " " + program_command_line(argc, argv);
}

//! An environment variable, or nothing when unset or empty.
inline std::optional<std::string> getenv_nonempty(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') {
    return std::nullopt;
  }
  return std::string(value);
}

//! Parses a whole decimal int (surrounding blanks allowed); nothing when it is not one.
inline std::optional<int> parse_int(std::string_view text) {
  const auto blank = [](char c) { return std::isspace(static_cast<unsigned char>(c)) != 0; };
  while (!text.empty() && blank(text.front())) {
    text.remove_prefix(1);
  }
  while (!text.empty() && blank(text.back())) {
    text.remove_suffix(1);
  }
  if (!text.empty() && text.front() == '+') {
    text.remove_prefix(1);
  }
  int value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc{} || end != text.data() + text.size()) {
    return std::nullopt;
  }
  return value;
}

//! Whether `text` is a sign and digits (with blanks around): parse_int refused it for its range.
inline bool looks_like_an_integer(std::string_view text) {
  const auto first = text.find_first_not_of(" \t\n\r\f\v");
  const auto last = text.find_last_not_of(" \t\n\r\f\v");
  if (first == std::string_view::npos) {
    return false;
  }
  text = text.substr(first, last - first + 1);
  if (text.front() == '+' || text.front() == '-') {
    text.remove_prefix(1);
  }
  return !text.empty() && text.find_first_not_of("0123456789") == std::string_view::npos;
}

//! A value of initialize() with where it came from, for error messages.
template <class T>
struct Setting {
  std::optional<T> value;
  std::string source;  // "from the argument" or "from KERAS_DISTRIBUTION_..."
  [[nodiscard]] std::string describe(std::string_view name) const {
    std::string v;
    if constexpr (std::is_same_v<T, std::string>) {
      v = "\"" + *value + "\"";
    } else {
      v = std::to_string(*value);
    }
    return std::string(name) + " is " + v + " (" + source + ")";
  }
};

//! A local finding of the initialize() checks: the message and whether it is a ValueError (0) or a
//! RuntimeError (1); agreed over MPI_COMM_WORLD so that every process throws the same.
struct InitProblem {
  int kind = 0;
  std::string message;
};
inline constexpr int value_error_kind = 0;
inline constexpr int runtime_error_kind = 1;

//! Checks the initialize() arguments (environment fallbacks applied) against MPI_COMM_WORLD on
//! this process; returns the first problem found, if any. Local (no communication).
inline std::optional<InitProblem> check_initialize_arguments(
    std::optional<std::string> job_addresses_arg, std::optional<int> num_processes_arg,
    std::optional<int> process_id_arg, int argc, char** argv) {
  constexpr std::string_view who = "kdist::initialize: ";
  const auto value_error = [&](std::string m) {
    return InitProblem{value_error_kind, std::string(who) + m};
  };
  const auto runtime_error = [&](std::string m) {
    return InitProblem{runtime_error_kind, std::string(who) + m};
  };

  Setting<std::string> job_addresses{std::move(job_addresses_arg), "from the argument"};
  Setting<int> num_processes{num_processes_arg, "from the argument"};
  Setting<int> process_id{process_id_arg, "from the argument"};
  if (!job_addresses.value) {
    job_addresses = {getenv_nonempty(env_job_addresses), std::string("from ") + env_job_addresses};
  }
  for (auto* setting : {&num_processes, &process_id}) {
    if (setting->value) {
      continue;
    }
    const char* name = setting == &num_processes ? env_num_processes : env_process_id;
    if (auto text = getenv_nonempty(name)) {
      const auto parsed = parse_int(*text);
      if (!parsed) {
        const char* what = looks_like_an_integer(*text)
                               ? "\", which is out of range (at most 2147483647)"
                               : "\", which is not a number";
        return value_error("the environment variable " + std::string(name) + " is \"" + *text +
                           what + "; set it to a whole number (for example " + name +
                           (setting == &num_processes ? "=2" : "=0") + ") or unset it");
      }
      *setting = {parsed, std::string("from ") + name};
    }
  }

  int world_size = 1;
  int world_rank = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);

  if (num_processes.value && *num_processes.value < 1) {
    return value_error(num_processes.describe("num_processes") + "; it must be at least 1");
  }
  if (process_id.value && *process_id.value < 0) {
    return value_error(process_id.describe("process_id") + "; it must not be negative");
  }
  if (process_id.value && num_processes.value && *process_id.value >= *num_processes.value) {
    return value_error(process_id.describe("process_id") +
                       ", out of range: " + num_processes.describe("num_processes") +
                       ", so process ids go from 0 to " + std::to_string(*num_processes.value - 1));
  }
  if (job_addresses.value && job_addresses.value->find(',') != std::string::npos) {
    // Like Keras: a comma-separated list names every job; a single address names the coordinator.
    std::vector<std::string_view> jobs;
    std::string_view rest = *job_addresses.value;
    for (;;) {
      const auto comma = rest.find(',');
      jobs.push_back(rest.substr(0, comma));
      if (comma == std::string_view::npos) {
        break;
      }
      rest.remove_prefix(comma + 1);
    }
    for (std::size_t i = 0; i < jobs.size(); ++i) {
      if (jobs[i].find_first_not_of(" \t") == std::string_view::npos) {
        return value_error("the provided job_addresses \"" + *job_addresses.value + "\" (" +
                           job_addresses.source + ") has an empty address at position " +
                           std::to_string(i + 1) +
                           "; give one address per process, separated by commas");
      }
    }
    const int count = static_cast<int>(jobs.size());
    if (num_processes.value && count != *num_processes.value) {
      return value_error("the provided job_addresses \"" + *job_addresses.value + "\" (" +
                         job_addresses.source + ") has " + std::to_string(count) +
                         " jobs, but num_processes is " + std::to_string(*num_processes.value) +
                         " (" + num_processes.source + "); give one address per process");
    }
    if (!num_processes.value && count != world_size) {
      return runtime_error("the provided job_addresses \"" + *job_addresses.value + "\" (" +
                           job_addresses.source + ") has " + std::to_string(count) +
                           " jobs, but MPI's world has " + std::to_string(world_size) +
                           (world_size == 1 ? " process" : " processes") +
                           "; start the program with: " + mpiexec_command(count, argc, argv));
    }
  }
  if (num_processes.value && *num_processes.value != world_size) {
    const int n = *num_processes.value;
    if (world_size == 1) {
      return runtime_error(
          num_processes.describe("num_processes") +
          ", but this program runs as a single MPI process (it was started without "
          "mpiexec, or with mpiexec -n 1); start it with: " +
          mpiexec_command(n, argc, argv));
    }
    return runtime_error(num_processes.describe("num_processes") + ", but MPI's world has " +
                         std::to_string(world_size) +
                         " processes; start the program with: " + mpiexec_command(n, argc, argv) +
                         ", or set num_processes to " + std::to_string(world_size));
  }
  if (process_id.value && *process_id.value != world_rank) {
    return runtime_error(
        process_id.describe("process_id") + ", but this process' MPI rank is " +
        std::to_string(world_rank) +
        "; kdist's process ids are MPI_COMM_WORLD ranks: leave process_id unset, or give "
        "each process its rank");
  }
  return std::nullopt;
}

//! The agreed check behind initialize() and ScopeGuard: collective over MPI_COMM_WORLD, throws on
//! every process the error of the lowest process that found one.
inline void validate_initialize_arguments(std::optional<std::string> job_addresses,
                                          std::optional<int> num_processes,
                                          std::optional<int> process_id, int argc = 0,
                                          char** argv = nullptr) {
  const auto problem =
      check_initialize_arguments(std::move(job_addresses), num_processes, process_id, argc, argv);
  const auto failure = mpi::detail::agree_on(MPI_COMM_WORLD, !problem,
                                             problem ? problem->message : std::string_view{},
                                             problem ? problem->kind : 0);
  if (failure) {
    if (failure->kind == runtime_error_kind) {
      throw RuntimeError(failure->message);
    }
    throw ValueError(failure->message);
  }
}

//! Initialises MPI (MPI_THREAD_FUNNELED) unless it is; returns whether it did.
inline bool start_mpi(int* argc, char*** argv) {
  // MPI_Initialized stays true after MPI_Finalize: ask MPI_Finalized first.
  if (mpi_is_finalized()) {
    throw RuntimeError("kdist: MPI was finalised already and cannot be initialised again");
  }
  if (mpi_is_initialized()) {
    return false;
  }
  int provided = MPI_THREAD_SINGLE;
  mpi::detail::check_mpi(MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided),
                         "kdist: MPI_Init_thread");
  return true;
}

//! Starts MPI (unless it runs) and prepares the failure path: one process' error ends the job
//! (detail/failure.hpp). Collective over MPI_COMM_WORLD.
inline bool start_mpi_and_failure_path(int* argc, char*** argv) {
  const bool started = start_mpi(argc, argv);
  failure::prepare();
  return started;
}

//! This process' rank among the processes of its node (MPI_COMM_TYPE_SHARED).
inline int node_local_rank() {
  MPI_Comm node = MPI_COMM_NULL;
  mpi::detail::check_mpi(
      MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node),
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
    // then write back what Kokkos left (it removes the options it understood).
    std::vector<char*> args(argv, argv + *argc);
    std::string device_option = "--kokkos-device-id=" + std::to_string(device);
    if (device >= 0) {
      args.push_back(device_option.data());
    }
    int n = static_cast<int>(args.size());
    args.push_back(nullptr);
    Kokkos::initialize(n, args.data());
    int kept = 0;
    for (int i = 0; i < n; ++i) {
      if (args[static_cast<std::size_t>(i)] != device_option.data()) {
        argv[kept++] = args[static_cast<std::size_t>(i)];
      }
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
inline void stop_runtime(bool started_mpi, bool started_kokkos) noexcept {
  if (started_kokkos && Kokkos::is_initialized()) {
    Kokkos::finalize();
  }
  if (started_mpi && mpi_is_initialized() && !mpi_is_finalized()) {
    failure::release();
    MPI_Finalize();
  }
}

//! Lower-case copy.
inline std::string to_lower_ascii(std::string_view text) {
  std::string out(text);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

//! The device type list_devices() uses for `device_type`: "cpu" or "gpu". Errors as documented
//! there.
inline std::string resolve_device_type(const std::optional<std::string>& device_type,
                                       std::string_view who) {
  const std::string available = default_space_is_gpu ? "\"cpu\", \"gpu\"" : "\"cpu\"";
  const std::string space =
      std::string("Kokkos' default execution space is ") + Kokkos::DefaultExecutionSpace::name();
  if (!device_type) {
    return default_space_is_gpu ? "gpu" : "cpu";
  }
  const std::string type = to_lower_ascii(*device_type);
  if (type == "cpu") {
    return type;
  }
  if (type == "gpu") {
    if (!default_space_is_gpu) {
      throw RuntimeError(std::string(who) + ": no \"gpu\" devices: " + space +
                         ", a host space; available device types: " + available +
                         ". Build kdist against a Kokkos with CUDA, HIP or SYCL enabled for GPUs");
    }
    return type;
  }
  if (type == "tpu") {
    throw RuntimeError(std::string(who) +
                       ": no \"tpu\" devices: kdist runs on Kokkos, which has no TPU backend (" +
                       space + "); available device types: " + available);
  }
  throw ValueError(
      std::string(who) + ": unknown device_type \"" + *device_type +
      "\"; valid types are \"cpu\", \"gpu\" and \"tpu\" (any case), or none for the default");
}

}  // namespace detail::runtime

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
//! kdist::initialize();                                   // from the KERAS_DISTRIBUTION_*
//! variables kdist::initialize("10.0.0.1:1234,10.0.0.2:2345", 2);   // two processes: mpiexec -n 2
//! ./prog \endcode
inline void initialize(std::optional<std::string> job_addresses = {},
                       std::optional<int> num_processes = {}, std::optional<int> process_id = {}) {
  auto& state = detail::runtime::runtime_state();
  const bool started_mpi = detail::runtime::start_mpi_and_failure_path(nullptr, nullptr);
  bool started_kokkos = false;
  try {
    started_kokkos = detail::runtime::start_kokkos(nullptr, nullptr);
  } catch (...) {
    detail::runtime::stop_runtime(started_mpi, false);
    throw;
  }
  state.started_mpi = state.started_mpi || started_mpi;
  state.started_kokkos = state.started_kokkos || started_kokkos;
  if ((started_mpi || started_kokkos) && !state.exit_hook_registered) {
    state.exit_hook_registered = true;
    std::atexit([] {
      auto& s = detail::runtime::runtime_state();
      detail::runtime::stop_runtime(s.started_mpi, s.started_kokkos);
    });
  }
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
             std::optional<int> num_processes = {}, std::optional<int> process_id = {}) {
    start(&argc, &argv, std::move(job_addresses), num_processes, process_id);
  }
  //! Without a command line.
  explicit ScopeGuard(std::optional<std::string> job_addresses = {},
                      std::optional<int> num_processes = {}, std::optional<int> process_id = {}) {
    start(nullptr, nullptr, std::move(job_addresses), num_processes, process_id);
  }
  ScopeGuard(const ScopeGuard&) = delete;
  ScopeGuard& operator=(const ScopeGuard&) = delete;
  ScopeGuard(ScopeGuard&&) = delete;
  ScopeGuard& operator=(ScopeGuard&&) = delete;
  ~ScopeGuard() { detail::runtime::stop_runtime(started_mpi_, started_kokkos_); }

  //! True when this guard initialised MPI (and will finalise it).
  [[nodiscard]] bool started_mpi() const noexcept { return started_mpi_; }
  //! True when this guard initialised Kokkos (and will finalise it).
  [[nodiscard]] bool started_kokkos() const noexcept { return started_kokkos_; }

 private:
  void start(int* argc, char*** argv, std::optional<std::string> job_addresses,
             std::optional<int> num_processes, std::optional<int> process_id) {
    // Keep the command line as given, for the mpiexec hint (MPI and Kokkos may edit argv).
    std::vector<std::string> words;
    if (argc != nullptr && argv != nullptr && *argv != nullptr) {
      words.assign(*argv, *argv + *argc);
    }
    started_mpi_ = detail::runtime::start_mpi_and_failure_path(argc, argv);
    try {
      started_kokkos_ = detail::runtime::start_kokkos(argc, argv != nullptr ? *argv : nullptr);
      std::vector<char*> pointers;
      for (auto& w : words) {
        pointers.push_back(w.data());
      }
      detail::runtime::validate_initialize_arguments(std::move(job_addresses), num_processes,
                                                     process_id, static_cast<int>(pointers.size()),
                                                     pointers.data());
    } catch (...) {
      detail::runtime::stop_runtime(started_mpi_, started_kokkos_);
      throw;
    }
  }

  bool started_mpi_ = false;
  bool started_kokkos_ = false;
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
