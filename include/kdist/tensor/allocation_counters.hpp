#pragma once
//! \file tensor/allocation_counters.hpp
//! `kdist::AllocationCounters`: the bytes this process has allocated in one Kokkos memory space
//! (by default the one the model's Views live in) while the counters live: how many are live now
//! and the most that were live at once. Built on Kokkos Tools' allocation callbacks, so it sees
//! every View (a layer's kept buffers, a rematerialisation arena's, the optimizer's slots) and
//! nothing else (MPI's and kdist's host scratch are not Views). What was allocated before the
//! counters started is not counted, nor is its release.
//!
//! \code
//! kdist::AllocationCounters counters;      // before compile: weights, slots and activations
//! model.compile(...);
//! const auto state = counters.live_bytes();
//! model.fit(...);
//! std::printf("activations at most %zu bytes\n", counters.peak_bytes() - state);
//! \endcode
//!
//! One set counts at a time (Kokkos Tools keeps one callback per event); the callbacks that were
//! set before are called too, and restored after.

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <unordered_map>

#include <Kokkos_Core.hpp>

#include <kdist/core/error.hpp>

namespace kdist {

class AllocationCounters {
 public:
  //! Counts allocations in the memory space named `space` (Kokkos' name, e.g. "Host", "Cuda").
  //! Errors: kdist::RuntimeError while another AllocationCounters lives.
  explicit AllocationCounters(
      std::string space = Kokkos::DefaultExecutionSpace::memory_space::name())
      : saved_(Kokkos::Tools::Experimental::get_callbacks()) {
    State& s = state();
    if (s.counting) {
      throw RuntimeError(
          "kdist::AllocationCounters: another set of counters is live on this process; one set "
          "counts at a time (Kokkos Tools has one allocation callback)");
    }
    s = State{};
    s.counting = true;
    s.space = std::move(space);
    s.chained_allocate = saved_.allocate_data;
    s.chained_deallocate = saved_.deallocate_data;
    Kokkos::Tools::Experimental::set_allocate_data_callback(on_allocate);
    Kokkos::Tools::Experimental::set_deallocate_data_callback(on_deallocate);
  }
  AllocationCounters(const AllocationCounters&) = delete;
  AllocationCounters& operator=(const AllocationCounters&) = delete;
  ~AllocationCounters() {
    Kokkos::Tools::Experimental::set_callbacks(saved_);
    state().counting = false;
  }

  //! Bytes allocated since the counters started and not yet freed.
  std::size_t live_bytes() const noexcept { return state().live; }
  //! The most bytes live at once since the counters started (or since reset_peak).
  std::size_t peak_bytes() const noexcept { return state().peak; }
  //! How many allocations were counted.
  std::size_t allocations() const noexcept { return state().allocations; }
  //! Starts the peak again from what is live now.
  void reset_peak() noexcept { state().peak = state().live; }

 private:
  struct State {
    bool counting = false;
    std::string space;
    std::unordered_map<const void*, std::uint64_t> sizes;
    std::size_t live = 0, peak = 0, allocations = 0;
    Kokkos_Profiling_allocateDataFunction chained_allocate = nullptr;
    Kokkos_Profiling_deallocateDataFunction chained_deallocate = nullptr;
  };
  static State& state() {
    static State s;
    return s;
  }
  static void on_allocate(Kokkos::Tools::SpaceHandle space, const char* label, const void* ptr,
                          std::uint64_t size) {
    State& s = state();
    if (s.chained_allocate != nullptr) s.chained_allocate(space, label, ptr, size);
    if (s.space != space.name || ptr == nullptr) return;
    s.sizes[ptr] = size;
    s.live += size;
    ++s.allocations;
    if (s.live > s.peak) s.peak = s.live;
  }
  static void on_deallocate(Kokkos::Tools::SpaceHandle space, const char* label, const void* ptr,
                            std::uint64_t size) {
    State& s = state();
    if (s.chained_deallocate != nullptr) s.chained_deallocate(space, label, ptr, size);
    if (s.space != space.name) return;
    const auto it = s.sizes.find(ptr);
    if (it == s.sizes.end()) return;  // allocated before the counters started
    s.live -= it->second;
    s.sizes.erase(it);
  }

  Kokkos::Tools::Experimental::EventSet saved_;
};

}  // namespace kdist
