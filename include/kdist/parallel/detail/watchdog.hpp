#pragma once
//! \file parallel/detail/watchdog.hpp
//! How the stuck-collective watchdog (collective_timeout.hpp, docs/reliability.md) waits and
//! finds who is missing.
//!
//! A watched collective starts MPI's non-blocking variant and polls it with MPI_Test until it
//! completes or the timeout passes (the clock is read once every 256 polls). Only then, on the
//! processes that timed out: each sends (collective, sequence number on the communicator,
//! communicator's members) to every other member of the communicator, point to point on the
//! failure path's error communicator (detail/failure.hpp, a duplicate of kdist's communicator made at
//! start-up, so nothing has to be created while a process is missing), and listens for the
//! others' messages for a short window (half the timeout, from 0.5 to 5 s). A member whose
//! message did not come did not arrive; one that sent another collective is waiting elsewhere.
//! The process then ends the job through the failure path (message with its rank, MPI_Abort).
//!
//! The sequence numbers are counted per communicator in an MPI attribute, so they go away with
//! the communicator and a reused handle starts again from 0.

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <kdist/parallel/collective_timeout.hpp>
#include <kdist/parallel/detail/failure.hpp>
#include <kdist/parallel/mpi/communicator.hpp>
#include <kdist/parallel/step_scope.hpp>
#include <string>
#include <thread>
#include <vector>

namespace kdist::detail::watchdog {

//! The point-to-point tag of the watchdog's messages on the error communicator.
inline constexpr int tag = 0x7d0d;

inline int delete_counter(MPI_Comm, int, void* value, void*) {
  delete static_cast<std::uint64_t*>(value);
  return MPI_SUCCESS;
}

//! The attribute key of the per-communicator sequence numbers (duplicates start again at 0).
inline int counter_key() {
  static int key = [] {
    int k = MPI_KEYVAL_INVALID;
    mpi::detail::check_mpi(
        MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, &delete_counter, &k, nullptr),
        "kdist watchdog: MPI_Comm_create_keyval");
    return k;
  }();
  return key;
}

//! The number of this collective among the watched collectives on `comm` (1, 2, ...).
inline std::uint64_t next_sequence(MPI_Comm comm) {
  void* value = nullptr;
  int found = 0;
  mpi::detail::check_mpi(MPI_Comm_get_attr(comm, counter_key(), &value, &found),
                         "kdist watchdog: MPI_Comm_get_attr");
  if (!found) [[unlikely]] {
    value = new std::uint64_t(0);
    mpi::detail::check_mpi(MPI_Comm_set_attr(comm, counter_key(), value),
                           "kdist watchdog: MPI_Comm_set_attr");
  }
  return ++*static_cast<std::uint64_t*>(value);
}

inline std::uint64_t fnv1a(std::uint64_t h, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) {
    h ^= (v >> (8 * i)) & 0xffU;
    h *= 0x100000001b3ULL;
  }
  return h;
}
inline std::uint64_t hash_of(const char* s) {
  std::uint64_t h = 0xcbf29ce484222325ULL;
  for (; *s != '\0'; ++s) h = fnv1a(h, static_cast<unsigned char>(*s));
  return h;
}

//! "mesh axis 'data'", "communicator 'MPI_COMM_WORLD'", or "an unnamed communicator".
inline std::string describe(MPI_Comm comm) {
  char name[MPI_MAX_OBJECT_NAME] = {};
  int length = 0;
  if (MPI_Comm_get_name(comm, name, &length) != MPI_SUCCESS || length <= 0) {
    return "an unnamed communicator";
  }
  std::string n(name, static_cast<std::size_t>(length));
  if (n.starts_with("mesh")) return n;
  return "communicator '" + n + "'";
}

inline std::string seconds_text(std::int64_t ns) {
  std::string s = std::to_string(static_cast<double>(ns) * 1e-9);
  while (s.find('.') != std::string::npos && (s.back() == '0' || s.back() == '.')) {
    const bool dot = s.back() == '.';
    s.pop_back();
    if (dot) break;
  }
  return s + " s";
}

//! "process 1 (host n2)", "process 1 (world rank 3, host n2) and process 2 (...)": the members
//! `members` of a communicator whose ranks in kdist's communicator are `kdist_ranks`.
inline std::string list_processes(const std::vector<int>& kdist_ranks,
                                  const std::vector<int>& members) {
  std::string out;
  for (std::size_t i = 0; i < members.size(); ++i) {
    if (i > 0) out += i + 1 == members.size() ? " and " : ", ";
    const int m = members[i];
    const int k = kdist_ranks[static_cast<std::size_t>(m)];
    if (k == MPI_UNDEFINED) {
      out += "rank " + std::to_string(m) + " of the communicator (not one of kdist's processes)";
      continue;
    }
    out += failure::describe_process(k);
    if (k != m) out += " (rank " + std::to_string(m) + " of the communicator)";
  }
  return out;
}

//! After a timeout in `what` (the `sequence`-th watched operation on `comm`, the same number on
//! every member): asks the other members of `comm` where they wait, over the error communicator,
//! and says who did not arrive: "process 1 did not arrive", "process 2 is waiting in another
//! collective", or "every process arrived, but ...". Every member that timed out runs this at about
//! the same time; a member that never answers within the window (half the timeout, 0.5 to 5 s) did
//! not arrive. Needs MPI on this thread (the main thread, or any under MPI_THREAD_MULTIPLE).
inline std::string who_did_not_arrive(MPI_Comm comm, const std::string& what,
                                      std::uint64_t sequence, std::int64_t timeout) {
  int rank = 0;
  int size = 0;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  // The members' process ids: their ranks in kdist's communicator (the error communicator's).
  std::vector<int> world(static_cast<std::size_t>(size));
  {
    MPI_Group group = MPI_GROUP_NULL;
    MPI_Group world_group = MPI_GROUP_NULL;
    MPI_Comm_group(comm, &group);
    MPI_Comm_group(kdist::communicator(), &world_group);
    std::vector<int> ranks(static_cast<std::size_t>(size));
    for (int i = 0; i < size; ++i) ranks[static_cast<std::size_t>(i)] = i;
    MPI_Group_translate_ranks(group, size, ranks.data(), world_group, world.data());
    MPI_Group_free(&group);
    MPI_Group_free(&world_group);
  }
  std::uint64_t members_hash = 0xcbf29ce484222325ULL;
  for (int w : world) members_hash = fnv1a(members_hash, static_cast<std::uint64_t>(w));
  const std::uint64_t collective_hash = hash_of(what.c_str());

  const MPI_Comm errors = failure::state().comm;
  if (errors == MPI_COMM_NULL) {  // require_started implies a prepared failure path
    return "which processes did not arrive is unknown (kdist's failure path was not prepared on "
           "this process)";
  }
  // Tell every other member where this process waits; the sends are never waited for.
  static std::uint64_t mine[3];
  mine[0] = members_hash;
  mine[1] = sequence;
  mine[2] = collective_hash;
  std::vector<MPI_Request> sends;
  for (int m = 0; m < size; ++m) {
    // A member outside kdist's processes (a collective on a wider communicator) is not asked.
    if (m == rank || world[static_cast<std::size_t>(m)] == MPI_UNDEFINED) continue;
    MPI_Request r = MPI_REQUEST_NULL;
    MPI_Isend(mine, 3, MPI_UINT64_T, world[static_cast<std::size_t>(m)], tag, errors, &r);
    sends.push_back(r);
  }
  // Listen for the others: 0 not heard, 1 in this collective, 2 in another one.
  std::vector<int> heard(static_cast<std::size_t>(size), 0);
  heard[static_cast<std::size_t>(rank)] = 1;
  int waiting_for = size - 1;
  const auto window = std::chrono::nanoseconds(
      std::clamp<std::int64_t>(timeout / 2, 500'000'000LL, 5'000'000'000LL));
  const auto deadline = std::chrono::steady_clock::now() + window;
  while (waiting_for > 0 && std::chrono::steady_clock::now() < deadline) {
    int flag = 0;
    MPI_Status status;
    MPI_Iprobe(MPI_ANY_SOURCE, tag, errors, &flag, &status);
    if (!flag) {
      for (auto& r : sends) {
        int done = 0;
        if (r != MPI_REQUEST_NULL) MPI_Test(&r, &done, MPI_STATUS_IGNORE);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      continue;
    }
    std::uint64_t theirs[3] = {};
    MPI_Recv(theirs, 3, MPI_UINT64_T, status.MPI_SOURCE, tag, errors, MPI_STATUS_IGNORE);
    const auto it = std::find(world.begin(), world.end(), status.MPI_SOURCE);
    if (it == world.end()) continue;  // timed out on a communicator this one does not share
    const auto m = static_cast<std::size_t>(it - world.begin());
    const bool same =
        theirs[0] == members_hash && theirs[1] == sequence && theirs[2] == collective_hash;
    if (heard[m] == 0) --waiting_for;
    if (heard[m] != 1) heard[m] = same ? 1 : 2;
  }
  std::vector<int> absent;
  std::vector<int> elsewhere;
  for (int m = 0; m < size; ++m) {
    if (heard[static_cast<std::size_t>(m)] == 0) absent.push_back(m);
    if (heard[static_cast<std::size_t>(m)] == 2) elsewhere.push_back(m);
  }
  if (absent.empty() && elsewhere.empty()) {
    return "every process arrived, but MPI did not complete the collective (a slow or broken "
           "link?)";
  }
  std::string out;
  if (!absent.empty()) out += list_processes(world, absent) + " did not arrive";
  if (!elsewhere.empty()) {
    if (!absent.empty()) out += "; ";
    out += list_processes(world, elsewhere) + (elsewhere.size() == 1 ? " is" : " are") +
           " waiting in another collective";
  }
  return out;
}

//! After a timeout: finds which members of `comm` did not arrive and ends the job.
[[noreturn]] inline void on_timeout(MPI_Comm comm, const char* collective, std::uint64_t sequence,
                                    std::int64_t timeout) {
  int size = 0;
  MPI_Comm_size(comm, &size);
  std::string message = std::string(collective) + " on " + describe(comm) + " (" +
                        std::to_string(size) + " processes) did not complete within " +
                        seconds_text(timeout) + " (collective #" + std::to_string(sequence) +
                        " on it), " + current_step_description() + ": ";
  message += who_did_not_arrive(comm, collective, sequence, timeout);
  message +=
      ". The timeout is KDIST_COLLECTIVE_TIMEOUT (seconds; 0 or off: no timeout) or "
      "kdist::set_collective_timeout";
  failure::abort_job(message);
}

//! Waits for `request` (a non-blocking collective on `comm`) until it completes, or ends the job
//! when `timeout` nanoseconds pass.
inline void wait(MPI_Request& request, MPI_Comm comm, const char* collective,
                 std::uint64_t sequence, std::int64_t timeout) {
  int done = 0;
  mpi::detail::check_mpi(MPI_Test(&request, &done, MPI_STATUS_IGNORE), collective);
  if (done) return;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::nanoseconds(timeout);
  for (unsigned i = 1;; ++i) {
    mpi::detail::check_mpi(MPI_Test(&request, &done, MPI_STATUS_IGNORE), collective);
    if (done) return;
    if ((i & 255U) == 0 && std::chrono::steady_clock::now() >= deadline) [[unlikely]] {
      on_timeout(comm, collective, sequence, timeout);
    }
  }
}

//! Runs one collective on `comm`: `blocking()` (returning an MPI error code) when the watchdog is
//! off or `Watchable` is false, else `start(&request)` (the non-blocking variant) and wait().
//! `what` names the MPI call in a kdist::RuntimeError when it fails; `collective` names the
//! collective ("kdist::all_reduce") in a timeout's message. `Watchable` must be the same on every
//! process (a non-blocking collective does not match a blocking one).
template <bool Watchable = true, class Start, class Blocking>
void run(MPI_Comm comm, const char* collective, const char* what, Start&& start,
         Blocking&& blocking) {
  kdist::detail::require_started(collective);  // never a collective where kdist does not run
  const std::int64_t timeout = Watchable ? timeout_ns() : 0;
  if (timeout == 0) {
    mpi::detail::check_mpi(blocking(), what);
    return;
  }
  const std::uint64_t sequence = next_sequence(comm);
  MPI_Request request = MPI_REQUEST_NULL;
  mpi::detail::check_mpi(start(&request), what);
  wait(request, comm, collective, sequence, timeout);
}

}  // namespace kdist::detail::watchdog
