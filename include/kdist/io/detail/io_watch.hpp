#pragma once
//! \file io/detail/io_watch.hpp
//! The I/O watchdog (docs/reliability.md): no HDF5 call of a save or load blocks without a
//! deadline. HDF5's collective calls (create, open, dataset writes and reads, flush, close) run
//! MPI-IO collectives inside HDF5, which the stuck-collective watchdog
//! (parallel/detail/watchdog.hpp) cannot poll: a process stopped in the middle of a save (SIGSTOP,
//! a hung host or file system) left the others waiting in H5Dwrite for good.
//!
//! A save or load holds an `IoWatch` for its file; each blocking HDF5 call in it, or group of
//! calls, is an `operation` ("writing dataset '/variables/d1/kernel'") with a deadline: the timeout
//! from the operation's start (operations nest; the end of an inner one restarts the outer one's
//! deadline). A helper thread sleeps until the deadline; when an operation is still running then,
//! it ends the job through the failure path (detail/failure.hpp, MPI_Abort) with a message naming
//! the caller, the file, the operation, the training step and, where MPI runs with
//! MPI_THREAD_MULTIPLE (as kdist starts it), the processes that did not arrive (the watchdog's
//! exchange over the error communicator, run from the helper thread). An operation only process 0
//! makes (the checks before a load, the rename that publishes a save) ends the job alike, without
//! the exchange: the others wait in a watched collective meanwhile and name process 0. Between
//! operations, kdist's own collectives (agreements, broadcasts) have the collective watchdog.
//!
//! The timeout: `KDIST_IO_TIMEOUT` (seconds, 0 or off: none), else the collective timeout
//! (KDIST_COLLECTIVE_TIMEOUT, kdist::set_collective_timeout). A bad KDIST_IO_TIMEOUT is a
//! kdist::ValueError naming it, from the first save or load.

#include <mpi.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

#include <kdist/core/error.hpp>
#include <kdist/parallel/collective_timeout.hpp>
#include <kdist/parallel/detail/failure.hpp>
#include <kdist/parallel/detail/watchdog.hpp>
#include <kdist/parallel/step_scope.hpp>
#include <kdist/parallel/world.hpp>

namespace kdist::detail::io_watch {

//! The I/O timeout in nanoseconds (0: none): KDIST_IO_TIMEOUT, else the collective timeout.
//! Errors: kdist::ValueError for a KDIST_IO_TIMEOUT that is not a number of seconds or "off".
inline std::int64_t timeout_ns() {
  const char* v = std::getenv("KDIST_IO_TIMEOUT");
  if (v == nullptr || *v == '\0') return kdist::detail::watchdog::timeout_ns();
  const auto timeout = kdist::detail::watchdog::timeout_setting(v);
  if (!timeout) {
    throw ValueError("KDIST_IO_TIMEOUT is '" + std::string(v) +
                     "', not a number of seconds from 0 to 10000000 or 'off'; set it to the "
                     "seconds one step of a checkpoint's I/O may take (e.g. 600), or to 0 or off "
                     "to let saves and loads wait without a deadline");
  }
  return *timeout;
}

//! Whether MPI calls are allowed on the helper thread.
inline bool mpi_allows_other_threads() {
  int provided = MPI_THREAD_SINGLE;
  MPI_Query_thread(&provided);
  return provided == MPI_THREAD_MULTIPLE;
}

//! Watches one save or load of `file` by `who` ("kdist::save_checkpoint") over `comm` (the
//! processes that open the file). Each `Operation` (a blocking HDF5 call, or a group of them) has a
//! deadline, the timeout from its start; operations nest ("writing 'ckpt.h5.tmp-1'" holds
//! "writing dataset '/variables/d1/kernel'"), and the end of an inner one restarts the outer one's
//! deadline (progress). Between operations nothing is watched here: kdist's own collectives there
//! (agreements, broadcasts) have the stuck-collective watchdog. Not copyable; one per file
//! operation, on the main thread.
class IoWatch {
  //! What runs now: nothing, or an operation (its description; made by every process or not).
  struct Running {
    std::string what;
    bool collective = false;
    bool active = false;
  };

 public:
  //! `note` ends a timeout's message ("'ckpt.h5' is as it was: the save writes a temporary file").
  //! `step` says when the I/O runs ("in the background, after fit's epoch 3"); empty: the training
  //! step of this thread (kdist::current_step_description()).
  IoWatch(std::string who, std::string file, MPI_Comm comm, std::string note = "",
          std::string step = "")
      : who_(std::move(who)),
        file_(std::move(file)),
        note_(std::move(note)),
        fixed_step_(std::move(step)),
        comm_(comm),
        timeout_(timeout_ns()) {
    if (timeout_ > 0) helper_ = std::thread([this] { watch(); });
  }
  IoWatch(const IoWatch&) = delete;
  IoWatch& operator=(const IoWatch&) = delete;
  ~IoWatch() {
    if (!helper_.joinable()) return;
    {
      std::lock_guard lock(mutex_);
      done_ = true;
    }
    wake_.notify_one();
    helper_.join();
  }

  //! One blocking call (or group of calls), from construction to destruction. `collective`: every
  //! process of the communicator makes it, in the same order, so that the processes that did not
  //! arrive can be found; false for process 0's own calls (the checks of a load, the publish).
  class Operation {
   public:
    Operation(IoWatch* watch, std::string what, bool collective) : watch_(watch) {
      if (watch_ == nullptr) return;
      outer_ = watch_->running_;
      watch_->start(Running{std::move(what), collective, true}, collective);
    }
    Operation(const Operation&) = delete;
    Operation& operator=(const Operation&) = delete;
    ~Operation() {
      if (watch_ == nullptr) return;
      // Back to the outer operation (or to nothing), with a new deadline; counted alike on every
      // process (neither an operation process 0 makes alone nor the return from one is counted).
      const bool counted = watch_->running_.collective && outer_.active && outer_.collective;
      watch_->start(std::move(outer_), counted);
    }

   private:
    IoWatch* watch_;
    Running outer_;
  };

  //! The watch of the save or load running on this thread (nullptr: none).
  static IoWatch*& current() noexcept {
    static thread_local IoWatch* watch = nullptr;
    return watch;
  }
  //! Makes `watch` the current one while it lives: operations in helpers find it by current().
  class Scope {
   public:
    explicit Scope(IoWatch& watch) : previous_(std::exchange(current(), &watch)) {}
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;
    ~Scope() { current() = previous_; }

   private:
    IoWatch* previous_;
  };

 private:
  //! `running` runs from now (its deadline: the timeout from now); `counted`: a step every
  //! process numbers alike, for the exchange that finds who did not arrive.
  void start(Running running, bool counted) {
    std::string step = fixed_step_.empty() ? kdist::current_step_description() : fixed_step_;
    {
      std::lock_guard lock(mutex_);
      running_ = std::move(running);
      if (counted) ++sequence_;
      step_ = std::move(step);
      deadline_ = std::chrono::steady_clock::now() + std::chrono::nanoseconds(timeout_);
    }
    wake_.notify_one();
  }

  void watch() {
    std::unique_lock lock(mutex_);
    while (!done_) {
      if (!running_.active) {
        wake_.wait(lock);
        continue;
      }
      const auto deadline = deadline_;
      if (wake_.wait_until(lock, deadline) == std::cv_status::no_timeout) continue;
      if (done_ || !running_.active || deadline_ != deadline) continue;  // done, or progress
      const Running running = running_;
      const std::uint64_t sequence = sequence_;
      const std::string step = step_;
      lock.unlock();
      time_out(running.what, running.collective, sequence, step);
    }
  }

  [[noreturn]] void time_out(const std::string& what, bool collective, std::uint64_t sequence,
                             const std::string& step) {
    std::string message = who_ + ": " + what + " of '" + file_ + "' did not complete within " +
                          kdist::detail::watchdog::seconds_text(timeout_) + ", " + step + ": ";
    if (!collective) {
      message += "this process makes it alone (a hung file system?)";
    } else if (mpi_allows_other_threads()) {
      message += kdist::detail::watchdog::who_did_not_arrive(comm_, who_ + " I/O " + file_,
                                                             sequence, timeout_);
    } else {
      message +=
          "which processes did not arrive is unknown (MPI runs below MPI_THREAD_MULTIPLE, so "
          "the I/O watchdog cannot ask them; kdist starts MPI with MPI_THREAD_MULTIPLE)";
    }
    if (!note_.empty()) message += ". " + note_;
    message +=
        ". The timeout is KDIST_IO_TIMEOUT (seconds; 0 or off: none), else "
        "KDIST_COLLECTIVE_TIMEOUT";
    kdist::detail::failure::abort_job(message);
  }

  std::string who_;
  std::string file_;
  std::string note_;
  std::string fixed_step_;
  MPI_Comm comm_;
  std::int64_t timeout_;
  std::mutex mutex_;
  std::condition_variable wake_;
  Running running_;
  std::string step_;
  bool done_ = false;
  std::uint64_t sequence_ = 0;
  std::chrono::steady_clock::time_point deadline_{};
  std::thread helper_;  // last: started once the members above exist
};

//! An operation of the current watch (none: not watched): `auto op = io_watch::operation(...)`.
inline IoWatch::Operation operation(std::string what, bool collective = true) {
  return IoWatch::Operation(IoWatch::current(), std::move(what), collective);
}

}  // namespace kdist::detail::io_watch
