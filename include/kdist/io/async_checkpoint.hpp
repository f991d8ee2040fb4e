#pragma once
//! \file io/async_checkpoint.hpp
//! `kdist::AsyncCheckpointer`: checkpoints written while training goes on (Orbax's
//! AsyncCheckpointer, PyTorch DCP's async_save). `save` copies the model's state (its blocks of the
//! weights and optimizer slots, the step, the attributes) into host buffers that it keeps from one
//! save to the next, and returns; a thread of its own then writes the same file save_checkpoint
//! writes (same format, same atomic publish, same load and resume), over a communicator of its own.
//!
//! \code
//! kdist::AsyncCheckpointer checkpointer;
//! fit.on_epoch_end = [&](std::size_t done, const kdist::Metrics& m) {
//!   checkpointer.save(model, "run/ckpt.h5", {.epoch = done, .loss = m.loss});  // returns at once
//! };
//! model.fit(data, fit);
//! checkpointer.wait();  // the last save is published; a background failure is raised here
//! \endcode
//!
//! - The next save waits for the previous one (one save in flight per checkpointer); so does any
//!   other kdist call that uses HDF5 (save_checkpoint, load_checkpoint, the Keras weights files):
//!   HDF5 is used by one thread at a time (background_writes.hpp). While a save is in flight the
//!   program must not call HDF5 itself: call wait() first.
//! - A failure of the background write (the file system, a process stopped: the I/O watchdog)
//!   is the same error as save_checkpoint's, raised by the next save() or wait() on every process
//!   alike (so kdist::run ends the job with it); a stopped process ends the job by the watchdog
//!   meanwhile. An error never raised (no wait() before the checkpointer is destroyed) ends the
//!   job from the destructor.
//! - The snapshot costs a copy of this process's blocks that it writes (a replicated block is
//!   written, so copied, by one process); the buffers are kept for the next save
//!   (snapshot_bytes()). With the optimizer state sharded (ZeRO-1) the snapshot gathers the slots,
//!   as save_checkpoint does.
//! - Needs MPI_THREAD_MULTIPLE (kdist starts MPI with it): under a program's own MPI_Init with
//!   less, save() writes before it returns, as save_checkpoint does.

#include <mpi.h>

#if defined(__linux__)
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

#include <chrono>
#include <cstddef>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <Kokkos_Core.hpp>

#include <kdist/io/checkpoint.hpp>
#include <kdist/io/detail/background_writes.hpp>
#include <kdist/parallel/detail/failure.hpp>
#include <kdist/parallel/mpi/communicator.hpp>
#include <kdist/parallel/world.hpp>

namespace kdist {

//! What an AsyncCheckpointer's last save cost (every process its own figures).
struct AsyncSaveStats {
  double snapshot_seconds = 0;  //!< save()'s time: the copy into the host buffers (training waits)
  double write_seconds = 0;     //!< the background write, until the file was published
  std::size_t snapshot_bytes = 0;  //!< host memory the checkpointer keeps for its snapshots
};

//! Writes checkpoints in the background (see the file comment). Not copyable or movable; destroy
//! it before kdist stops (before the ScopeGuard, or inside kdist::run's body).
class AsyncCheckpointer {
 public:
  AsyncCheckpointer() = default;
  AsyncCheckpointer(const AsyncCheckpointer&) = delete;
  AsyncCheckpointer& operator=(const AsyncCheckpointer&) = delete;
  AsyncCheckpointer(AsyncCheckpointer&&) = delete;
  AsyncCheckpointer& operator=(AsyncCheckpointer&&) = delete;

  //! Waits for the save in flight. An error of it that nothing raised ends the job (every process
  //! prints it; call wait() to have it raised instead).
  ~AsyncCheckpointer() {
    try {
      wait();
    } catch (const std::exception& e) {
      end_job_from_destructor(e.what());
    } catch (...) {
      end_job_from_destructor("an exception of a type not derived from std::exception");
    }
  }

  //! Saves `model` and `info` to `path` as kdist::save_checkpoint does, in the background:
  //! waits for the save in flight (raising its error), copies the model's state to host buffers
  //! at this step boundary and returns; the file is published later (wait(), or `on_saved`, which
  //! the background thread calls once it is: no kdist or Kokkos call in it). Collective: every
  //! process calls it with the same path. Errors: those of save_checkpoint (a model not compiled,
  //! paths that differ now; the file's own errors from the next save() or wait()).
  template <class T>
  void save(BasicSequential<T>& model, const std::string& path, CheckpointInfo info = {},
            std::function<void()> on_saved = {}) {
    namespace ck = detail::checkpoint;
    detail::checkpoint::finish_background_writes();  // the previous save: HDF5 is ours again
    detail::ProfilingRegion region("kdist::AsyncCheckpointer::save");
    const auto start = std::chrono::steady_clock::now();
    auto snapshot = std::make_shared<Snapshot<T>>();
    snapshot->metadata = ck::start_save(model, path, info, "kdist::AsyncCheckpointer::save");
    const std::size_t slot_count = snapshot->metadata.optimizer.slot_count;
    const std::uint64_t epoch = snapshot->metadata.epoch;
    Kokkos::fence();  // the model's last step is complete before its blocks are copied
    std::size_t buffer = 0;
    model.for_each_variable_with_slots([&](auto& v, auto& slots) {
      snapshot->blocks.push_back(copy_block(ck::variable_dataset(v.path), v.value, buffer++));
      snapshot->stored.push_back(ck::stored_as(v.dtype));  // as save_checkpoint's
      for (std::size_t k = 0; k < slot_count; ++k) {
        snapshot->blocks.push_back(copy_block(ck::slot_dataset(v.path, k), slots.at(k), buffer++));
        snapshot->stored.push_back(ck::stored_as(v.dtype));
      }
    });
    Kokkos::fence();  // the copies are complete (deep_copy from device memory)
    stats_.snapshot_bytes = 0;
    for (const auto& b : buffers_) stats_.snapshot_bytes += b.size();
    stats_.snapshot_seconds = seconds_since(start);
    const MPI_Comm comm = own_communicator();
    const std::string when = "in the background, the state after step " +
                             std::to_string(snapshot->metadata.step) + " (epoch " +
                             std::to_string(epoch) + ")";
    auto write = [this, snapshot, path, when, comm, on_saved = std::move(on_saved)] {
      const auto began = std::chrono::steady_clock::now();
      ck::write_atomically(
          path, "kdist::AsyncCheckpointer::save", comm,
          [&](hid_t file) {
            ck::write_metadata(file, snapshot->metadata);
            auto dxpl = detail::hdf5::collective_transfer();
            for (std::size_t i = 0; i < snapshot->blocks.size(); ++i) {
              const auto& [name, block] = snapshot->blocks[i];
              ck::write_block(file, name, block, dxpl.get(), comm, true, snapshot->stored[i]);
            }
          },
          when);
      stats_.write_seconds = seconds_since(began);
      if (on_saved) on_saved();
    };
    if (!detail::io_watch::mpi_allows_other_threads()) {
      write();  // MPI below MPI_THREAD_MULTIPLE: no MPI call from another thread
      return;
    }
    error_ = nullptr;
    writer_ = std::thread([this, write = std::move(write)] {
      lower_priority();
      try {
        write();
      } catch (...) {
        error_ = std::current_exception();
      }
    });
    detail::checkpoint::add_background_write(this, [this] { wait(); });
  }

  //! Waits until the save in flight (if any) is published; raises its error, on every process
  //! alike (kdist::RuntimeError for the file system, as save_checkpoint's). Collective in effect:
  //! the write it waits for is.
  void wait() {
    if (writer_.joinable()) writer_.join();
    detail::checkpoint::remove_background_write(this);
    if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
  }

  //! Whether a save is being written now.
  [[nodiscard]] bool in_flight() const noexcept { return writer_.joinable(); }

  //! What the last save cost (write_seconds: once waited for).
  [[nodiscard]] const AsyncSaveStats& stats() const noexcept { return stats_; }

 private:
  template <class T>
  struct Snapshot {
    detail::checkpoint::Metadata metadata;
    std::vector<std::pair<std::string, detail::checkpoint::HostBlock<T>>> blocks;
    std::vector<detail::checkpoint::StoredAs> stored;  //!< how each block is written
  };

  //! `t`'s block described, and copied into kept buffer number `index` when this process
  //! writes it.
  template <class Tensor>
  std::pair<std::string, detail::checkpoint::HostBlock<typename Tensor::value_type>> copy_block(
      std::string name, const Tensor& t, std::size_t index) {
    using T = typename Tensor::value_type;
    using View = std::decay_t<decltype(t.local())>;
    auto block = detail::checkpoint::describe_block(t);
    if (buffers_.size() <= index) buffers_.resize(index + 1);
    if (block.writes) {
      auto& bytes = buffers_[index];
      bytes.resize(t.local().size() * sizeof(T));  // kept: the next save reuses it
      T* data = reinterpret_cast<T*>(bytes.data());
      Kokkos::View<typename View::data_type, typename View::array_layout, Kokkos::HostSpace,
                   Kokkos::MemoryTraits<Kokkos::Unmanaged>>
          host(data, t.local().layout());
      Kokkos::deep_copy(host, t.local());
      block.data = data;
    }
    return {std::move(name), std::move(block)};
  }

  //! The communicator the background writes use: a duplicate of kdist's (made again when kdist's
  //! communicator changed), so that they never match the program's collectives.
  MPI_Comm own_communicator() {
    const auto generation = detail::process_group().generation;
    if (!comm_ || generation != comm_generation_) {
      comm_ = mpi::Communicator::borrow(kdist::communicator()).dup();
      comm_generation_ = generation;
    }
    return comm_.get();
  }

  //! The writer yields the cores to training: the lowest scheduling priority for this thread
  //! (Linux: nice 19 per thread). Where processes fill the cores, a writer at the same priority,
  //! busy-polling in MPI-IO's collectives as MPICH does, took a third of the step time (2
  //! processes on 2 cores); at nice 19 it writes in the gaps. Nothing happens where it cannot be
  //! set.
  static void lower_priority() noexcept {
#if defined(__linux__)
    (void)::setpriority(PRIO_PROCESS, static_cast<id_t>(::syscall(SYS_gettid)), 19);
#endif
  }

  static double seconds_since(std::chrono::steady_clock::time_point t) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
  }

  [[noreturn]] static void end_job_from_destructor(const std::string& message) {
    const std::string text = message +
                             " (the error of an asynchronous save that nothing waited for: call "
                             "kdist::AsyncCheckpointer::wait() to have it raised)";
    if (detail::mpi_running()) detail::failure::abort_job(text);
    detail::failure::print("error: " + text);
    std::abort();
  }

  std::vector<std::vector<std::byte>> buffers_;  // the snapshots' host copies, kept
  std::thread writer_;
  std::exception_ptr error_;
  AsyncSaveStats stats_;
  mpi::Communicator comm_;  // the writer's duplicate of kdist's communicator (freed with it)
  std::uint64_t comm_generation_ = 0;
};

}  // namespace kdist
