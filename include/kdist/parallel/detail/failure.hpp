#pragma once
//! \file parallel/detail/failure.hpp
//! How a failing process ends the whole MPI job instead of leaving the others waiting in a
//! collective (kdist::run and ScopeGuard's terminate handler use it; docs/reliability.md).
//!
//! At start-up (ScopeGuard) every process duplicates kdist's communicator (kdist::communicator(),
//! MPI_COMM_WORLD unless the program gave another) into an error communicator that nothing else
//! uses. A process that fails enters a non-blocking barrier on it and waits a
//! short grace period (KDIST_FAILURE_GRACE_SECONDS, default 2):
//!  - every process failed (an error all processes agreed on, e.g. a bad flag): the barrier
//!    completes; the messages are gathered to process 0, which prints each distinct one once; the
//!    job ends normally with exit status 2;
//!  - some process did not fail (it may be blocked in a collective): the failing process prints
//!    its message with its rank and calls MPI_Abort, which ends every process of the job (all of
//!    MPI_COMM_WORLD: a group of a larger job must not leave the rest waiting for it either).

#include <mpi.h>

#include <kdist/parallel/world.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>
#include <thread>
#include <vector>

namespace kdist::detail::failure {

//! Exit status of a job ended by an error (agreed or not).
inline constexpr int exit_status = 2;

struct State {
  MPI_Comm comm = MPI_COMM_NULL;  // the error communicator
  std::uint64_t generation = 0;   // of kdist's communicator it duplicates (world.hpp)
  int rank = -1;                  // rank in kdist's communicator, kept for after MPI_Finalize
  int size = 0;
  // Per process of kdist's communicator, gathered at start-up (a message about a missing process
  // cannot ask it): its rank in MPI_COMM_WORLD and its host. Empty before the first prepare.
  std::vector<int> world_ranks;
  std::vector<std::string> hosts;
  int world_size = 0;
  bool several_hosts = false;
  std::terminate_handler previous = nullptr;
  bool handler_installed = false;
};
inline State& state() {
  static State s;
  return s;
}

//! Whether messages name world ranks and hosts: kdist runs on a group of the job (the group's
//! numbering alone is in no launcher's output), or its processes are on several hosts.
inline bool name_world_rank_and_host() {
  const State& s = state();
  return !s.hosts.empty() && (s.world_size != s.size || s.several_hosts);
}

//! Process `rank` of kdist's communicator for a message: "process 1", or "process 1 (host n2)" on
//! several hosts, or "process 1 (world rank 3, host n2)" when kdist runs on a group of the job.
inline std::string describe_process(int rank) {
  const State& s = state();
  std::string out = "process " + std::to_string(rank);
  const auto r = static_cast<std::size_t>(rank);
  if (rank < 0 || r >= s.hosts.size() || !name_world_rank_and_host()) return out;
  out += " (";
  if (s.world_size != s.size) out += "world rank " + std::to_string(s.world_ranks[r]) + ", ";
  return out + "host " + s.hosts[r] + ")";
}

//! This process for a message: "process 1 of 2", "process 1 of 2 (host n2)" on several hosts,
//! "process 1 of 2 (world rank 3 of 4, host n2)" on a group of the job, or, where kdist was never
//! started, "a process where kdist was not started (world rank 3 of 4)".
inline std::string describe_this_process() {
  const State& s = state();
  if (s.rank < 0) {
    std::string out = "a process where kdist was not started";
    if (kdist::detail::mpi_running()) {
      int world_rank = 0;
      int world_size = 0;
      MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
      MPI_Comm_size(MPI_COMM_WORLD, &world_size);
      out +=
          " (world rank " + std::to_string(world_rank) + " of " + std::to_string(world_size) + ")";
    }
    return out;
  }
  std::string out = "process " + std::to_string(s.rank) + " of " + std::to_string(s.size);
  const auto r = static_cast<std::size_t>(s.rank);
  if (r >= s.hosts.size() || !name_world_rank_and_host()) return out;
  out += " (";
  if (s.world_size != s.size) {
    out += "world rank " + std::to_string(s.world_ranks[r]) + " of " +
           std::to_string(s.world_size) + ", ";
  }
  return out + "host " + s.hosts[r] + ")";
}

//! Seconds a failing process waits for the others before it aborts the job.
inline double grace_seconds() {
  if (const char* v = std::getenv("KDIST_FAILURE_GRACE_SECONDS"); v != nullptr && *v != '\0') {
    char* end = nullptr;
    const double s = std::strtod(v, &end);
    if (end != v && *end == '\0' && s >= 0 && s <= 600) return s;
    // An error path must not fail in turn: say what was wrong and go on with the default.
    std::fprintf(stderr,
                 "kdist: KDIST_FAILURE_GRACE_SECONDS is '%s', not a number of seconds from 0 to "
                 "600; using 2\n",
                 v);
  }
  return 2.0;
}

inline void print(const std::string& line) {
  std::fprintf(stderr, "%s\n", line.c_str());
  std::fflush(stderr);
  std::fflush(stdout);
}

//! MPI_Abort, with a way out: MPI_Abort waits for the launcher to take the abort, and a process cut
//! off from it (a host that lost its network link) would wait forever. After 10 s a helper thread
//! says so and ends the process with `status` itself.
[[noreturn]] inline void mpi_abort(int status) {
  std::thread([status] {
    std::this_thread::sleep_for(std::chrono::seconds(10));
    print("kdist: MPI_Abort has not ended " + describe_this_process() +
          " within 10 s (its launcher is unreachable: a lost network link?); it exits itself");
    std::_Exit(status);
  }).detach();
  MPI_Abort(MPI_COMM_WORLD, status);
  std::_Exit(status);  // MPI_Abort does not return; in case it does
}

[[noreturn]] inline void abort_job(const std::string& message) {
  print("error: " + describe_this_process() + " failed: " + message);
  print(
      "kdist: ending the MPI job (MPI_Abort): the other processes did not fail and may be "
      "waiting in a collective");
  // MPICH's launcher acts on the abort as soon as it arrives and can drop output still in the
  // pipe: give it a moment to forward the message first (1 run in 4 lost it without).
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  mpi_abort(exit_status);
}

//! Process 0 prints every distinct message once (with the failing ranks when they differ).
inline void gather_and_print(const std::string& message) {
  const State& s = state();
  const int len = static_cast<int>(message.size());
  std::vector<int> lens(s.rank == 0 ? static_cast<std::size_t>(s.size) : 0);
  MPI_Gather(&len, 1, MPI_INT, lens.data(), 1, MPI_INT, 0, s.comm);
  std::vector<int> displs(lens.size());
  int total = 0;
  for (std::size_t i = 0; i < lens.size(); ++i) {
    displs[i] = total;
    total += lens[i];
  }
  std::string all(static_cast<std::size_t>(total), '\0');
  MPI_Gatherv(message.data(), len, MPI_CHAR, all.data(), lens.data(), displs.data(), MPI_CHAR, 0,
              s.comm);
  if (s.rank != 0) return;
  std::vector<std::string> seen;
  for (std::size_t i = 0; i < lens.size(); ++i) {
    std::string m =
        all.substr(static_cast<std::size_t>(displs[i]), static_cast<std::size_t>(lens[i]));
    bool repeated = false;
    for (const auto& x : seen) repeated = repeated || x == m;
    if (!repeated) seen.push_back(std::move(m));
  }
  if (seen.size() == 1) {
    print("error: " + seen.front());
  } else {
    for (std::size_t i = 0; i < lens.size(); ++i) {
      print("error (" + describe_process(static_cast<int>(i)) + " of " + std::to_string(s.size) +
            "): " +
            all.substr(static_cast<std::size_t>(displs[i]), static_cast<std::size_t>(lens[i])));
    }
  }
}

//! Ends this process' part of the job after an error: returns exit_status when every process
//! failed (MPI may then be finalised normally), else aborts the whole job; so does an error every
//! process shares when kdist runs on a group of the job (kdist::communicator() is not the world). Without MPI (never
//! started, or finalised by a failed start-up whose error every process shares) it prints from
//! process 0 only and returns.
inline int end_job(const std::string& message) {
  State& s = state();
  if (!kdist::detail::mpi_running()) {
    if (s.rank <= 0) print("error: " + message);
    return exit_status;
  }
  if (s.comm == MPI_COMM_NULL) abort_job(message);
  MPI_Request request = MPI_REQUEST_NULL;
  MPI_Ibarrier(s.comm, &request);
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::duration<double>(grace_seconds());
  int done = 0;
  while (true) {
    MPI_Test(&request, &done, MPI_STATUS_IGNORE);
    if (done || std::chrono::steady_clock::now() >= deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  if (!done) abort_job(message);
  gather_and_print(message);
  int world_size = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  if (world_size != s.size) {
    // kdist ran on a group of the job: the job's other processes (a simulation, another training)
    // cannot know that this group stopped, and may wait for it. End them too.
    if (s.rank == 0) {
      print("kdist: ending the MPI job (MPI_Abort): kdist ran on " + std::to_string(s.size) +
            " of its " + std::to_string(world_size) +
            " processes, and the others must not be left waiting for them");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(300));  // as in abort_job
    mpi_abort(exit_status);
  }
  return exit_status;
}

//! Thrown, instead of the error, by a start-up that has already reported its error (end_job).
struct Reported {};

//! An exception's message, as end_job reports it.
inline std::string message_of(std::exception_ptr e) {
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& x) {
    return x.what();
  } catch (...) {
    return "an exception of a type not derived from std::exception";
  }
}

//! What std::terminate is running for: the uncaught exception's message, if any.
inline std::string current_exception_message() {
  if (auto e = std::current_exception()) return "uncaught exception: " + message_of(e);
  return "std::terminate called without an exception";
}

//! std::terminate while MPI runs ends the job: no other process is left waiting.
[[noreturn]] inline void on_terminate() {
  const std::string message = current_exception_message();
  if (kdist::detail::mpi_running()) abort_job(message);
  print("error: " + message);
  std::abort();
}

//! Collective over kdist's communicator (every process, at start-up, after MPI_Init and
//! use_communicator): the error communicator, this process' rank, and the terminate handler.
//! Safe to call again; made again when kdist's communicator changed since.
inline void prepare() {
  State& s = state();
  if (!kdist::detail::mpi_running()) return;
  const MPI_Comm processes = kdist::communicator();
  MPI_Comm_rank(processes, &s.rank);
  MPI_Comm_size(processes, &s.size);
  const std::uint64_t generation = kdist::detail::process_group().generation;
  if (s.comm != MPI_COMM_NULL && s.generation != generation) MPI_Comm_free(&s.comm);
  if (s.comm == MPI_COMM_NULL) MPI_Comm_dup(processes, &s.comm);
  s.generation = generation;
  // Who is who, for the messages about a process that cannot answer any more.
  MPI_Comm_size(MPI_COMM_WORLD, &s.world_size);
  int world_rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  s.world_ranks.assign(static_cast<std::size_t>(s.size), -1);
  MPI_Allgather(&world_rank, 1, MPI_INT, s.world_ranks.data(), 1, MPI_INT, s.comm);
  char host[MPI_MAX_PROCESSOR_NAME] = {};
  int length = 0;
  MPI_Get_processor_name(host, &length);
  std::vector<char> all(static_cast<std::size_t>(s.size) * MPI_MAX_PROCESSOR_NAME);
  MPI_Allgather(host, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, all.data(), MPI_MAX_PROCESSOR_NAME,
                MPI_CHAR, s.comm);
  s.hosts.clear();
  for (int i = 0; i < s.size; ++i) {
    const char* name = all.data() + static_cast<std::size_t>(i) * MPI_MAX_PROCESSOR_NAME;
    s.hosts.emplace_back(name, strnlen(name, MPI_MAX_PROCESSOR_NAME));
  }
  s.several_hosts = std::any_of(s.hosts.begin(), s.hosts.end(),
                                [&](const std::string& h) { return h != s.hosts.front(); });
  if (!s.handler_installed) {
    s.previous = std::set_terminate(&on_terminate);
    s.handler_installed = true;
  }
}

//! Before MPI_Finalize: frees the error communicator and restores the terminate handler.
inline void release() noexcept {
  State& s = state();
  if (s.comm != MPI_COMM_NULL && kdist::detail::mpi_running()) MPI_Comm_free(&s.comm);
  s.comm = MPI_COMM_NULL;
  if (s.handler_installed) {
    std::set_terminate(s.previous);
    s.handler_installed = false;
  }
}

}  // namespace kdist::detail::failure
