#pragma once
//! \file parallel/detail/initialize_arguments.hpp
//! The checks behind kdist::initialize and kdist::ScopeGuard (runtime.hpp): the Keras settings
//! (arguments, else the KERAS_DISTRIBUTION_* environment variables) against kdist's communicator, agreed
//! over every process, and the `mpiexec -n N <program>` line the errors suggest.

#include <mpi.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstddef>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <kdist/core/error.hpp>
#include <kdist/parallel/mpi/agree.hpp>
#include <kdist/parallel/world.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <type_traits>
#include <utility>
#include <vector>

namespace kdist::detail::runtime {

//! The environment variables Keras' launch scripts set.
inline constexpr const char* env_job_addresses = "KERAS_DISTRIBUTION_JOB_ADDRESSES";
inline constexpr const char* env_num_processes = "KERAS_DISTRIBUTION_NUM_PROCESSES";
inline constexpr const char* env_process_id = "KERAS_DISTRIBUTION_PROCESS_ID";

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
//! RuntimeError (1); agreed over kdist's communicator so that every process throws the same.
struct InitProblem {
  int kind = 0;
  std::string message;
};
inline constexpr int value_error_kind = 0;
inline constexpr int runtime_error_kind = 1;

//! Checks the initialize() arguments (environment fallbacks applied) against kdist's communicator on
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

  const int world_size = kdist::process_count();
  const int world_rank = kdist::process_id();
  // The processes kdist runs on: MPI's world, or the group the program gave kdist.
  const bool whole_world = kdist::communicator() == MPI_COMM_WORLD;
  const std::string processes_are = whole_world
                                        ? ", but MPI's world has "
                                        : ", but kdist's communicator (given by the program) has ";
  const auto start_with = [&](int n) {
    return whole_world ? "; start the program with: " + mpiexec_command(n, argc, argv)
                       : std::string("; start kdist on a communicator of that size");
  };

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
                           job_addresses.source + ") has " + std::to_string(count) + " jobs" +
                           processes_are + std::to_string(world_size) +
                           (world_size == 1 ? " process" : " processes") + start_with(count));
    }
  }
  if (num_processes.value && *num_processes.value != world_size) {
    const int n = *num_processes.value;
    if (world_size == 1 && whole_world) {
      return runtime_error(
          num_processes.describe("num_processes") +
          ", but this program runs as a single MPI process (it was started without "
          "mpiexec, or with mpiexec -n 1); start it with: " +
          mpiexec_command(n, argc, argv));
    }
    return runtime_error(num_processes.describe("num_processes") + processes_are +
                         std::to_string(world_size) +
                         (world_size == 1 ? " process" : " processes") + start_with(n) +
                         ", or set num_processes to " + std::to_string(world_size));
  }
  if (process_id.value && *process_id.value != world_rank) {
    return runtime_error(
        process_id.describe("process_id") + ", but this process' MPI rank is " +
        std::to_string(world_rank) +
        "; kdist's process ids are the ranks of its communicator: leave process_id unset, or give "
        "each process its rank");
  }
  return std::nullopt;
}

//! The agreed check behind initialize() and ScopeGuard: collective over kdist's communicator, throws on
//! every process the error of the lowest process that found one.
inline void validate_initialize_arguments(std::optional<std::string> job_addresses,
                                          std::optional<int> num_processes,
                                          std::optional<int> process_id, int argc = 0,
                                          char** argv = nullptr) {
  const auto problem =
      check_initialize_arguments(std::move(job_addresses), num_processes, process_id, argc, argv);
  const auto failure = mpi::detail::agree_on(kdist::communicator(), !problem,
                                             problem ? problem->message : std::string_view{},
                                             problem ? problem->kind : 0);
  if (failure) {
    if (failure->kind == runtime_error_kind) {
      throw RuntimeError(failure->message);
    }
    throw ValueError(failure->message);
  }
}

}  // namespace kdist::detail::runtime
