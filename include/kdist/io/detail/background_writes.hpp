#pragma once
//! \file io/detail/background_writes.hpp
//! The asynchronous saves in flight on this process (kdist::AsyncCheckpointer,
//! io/async_checkpoint.hpp), for the HDF5 calls of everything else to wait for.
//!
//! HDF5 as HPC sites build it (parallel, hence not thread-safe: Debian's libhdf5-mpi is) must be
//! used by one thread at a time, and the collectives of a save must meet in the same order on
//! every process. So each kdist call that uses HDF5 (save_checkpoint, load_checkpoint, the Keras
//! weights files, an AsyncCheckpointer's next save) first finishes the saves in flight: a
//! collective point that every process reaches alike, and after it the calling thread is HDF5's
//! only user. A save's failure in the background is raised there.

#include <functional>
#include <utility>
#include <vector>

namespace kdist::detail::checkpoint {

//! One entry per save in flight: its owner and what waits for it (joins its thread, rethrows its
//! error). Used from the program's thread only (the saves' threads never touch it).
struct BackgroundWrite {
  const void* owner = nullptr;
  std::function<void()> finish;
};
inline std::vector<BackgroundWrite>& background_writes() {
  static std::vector<BackgroundWrite> writes;
  return writes;
}

//! Registers `owner`'s save in flight (replacing an earlier entry of the same owner).
inline void add_background_write(const void* owner, std::function<void()> finish) {
  for (auto& w : background_writes()) {
    if (w.owner == owner) {
      w.finish = std::move(finish);
      return;
    }
  }
  background_writes().push_back({owner, std::move(finish)});
}

//! Forgets `owner`'s save (it finished, or its owner is gone).
inline void remove_background_write(const void* owner) {
  auto& writes = background_writes();
  std::erase_if(writes, [owner](const BackgroundWrite& w) { return w.owner == owner; });
}

//! Waits for every save in flight on this process; the first one's error is raised (each owner
//! forgets its save before it raises). Call it where every process calls it (a collective point).
inline void finish_background_writes() {
  while (!background_writes().empty()) {
    auto finish = background_writes().front().finish;  // may remove the entry: a copy
    finish();
  }
}

}  // namespace kdist::detail::checkpoint
