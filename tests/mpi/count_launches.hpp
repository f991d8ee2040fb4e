#pragma once
// What a training step asks of Kokkos, counted with Kokkos Tools' callbacks while a CountLaunches
// lives: kernel launches (parallel_for / reduce / scan), fences, deep copies (those between two
// memory spaces apart: on a GPU, the host-device copies) and allocations. On a GPU each is a
// launch or a synchronisation a captured step has to account for (issue 36); on a CPU the same
// code paths run, so CI keeps their number from growing.
#include <Kokkos_Core.hpp>

#include <cstdint>
#include <cstring>
#include <string>

namespace kdist::test {

struct LaunchCounts {
  long kernels = 0;
  long fences = 0;
  long deep_copies = 0;
  long copies_between_spaces = 0;
  long allocations = 0;
  bool operator==(const LaunchCounts&) const = default;
  [[nodiscard]] std::string str() const {
    return std::to_string(kernels) + " kernels, " + std::to_string(fences) + " fences, " +
           std::to_string(deep_copies) + " deep copies (" + std::to_string(copies_between_spaces) +
           " between memory spaces), " + std::to_string(allocations) + " allocations";
  }
};

inline LaunchCounts& launch_counts() {
  static LaunchCounts counts;
  return counts;
}

namespace launch_callbacks {
inline void kernel(const char*, std::uint32_t, std::uint64_t* id) {
  *id = 0;
  ++launch_counts().kernels;
}
inline void fence(const char*, std::uint32_t, std::uint64_t* id) {
  *id = 0;
  ++launch_counts().fences;
}
inline void deep_copy(Kokkos::Tools::SpaceHandle dst, const char*, const void*,
                      Kokkos::Tools::SpaceHandle src, const char*, const void*, std::uint64_t) {
  ++launch_counts().deep_copies;
  if (std::strcmp(dst.name, src.name) != 0) ++launch_counts().copies_between_spaces;
}
inline void allocation(Kokkos::Tools::SpaceHandle, const char*, const void*, std::uint64_t) {
  ++launch_counts().allocations;
}
}  // namespace launch_callbacks

//! Counts this process's kernel launches, fences, deep copies and allocations from construction
//! to destruction (counts()).
class CountLaunches {
 public:
  CountLaunches() {
    namespace kt = Kokkos::Tools::Experimental;
    launch_counts() = {};
    kt::set_begin_parallel_for_callback(launch_callbacks::kernel);
    kt::set_begin_parallel_reduce_callback(launch_callbacks::kernel);
    kt::set_begin_parallel_scan_callback(launch_callbacks::kernel);
    kt::set_begin_fence_callback(launch_callbacks::fence);
    kt::set_begin_deep_copy_callback(launch_callbacks::deep_copy);
    kt::set_allocate_data_callback(launch_callbacks::allocation);
  }
  ~CountLaunches() {
    namespace kt = Kokkos::Tools::Experimental;
    kt::set_begin_parallel_for_callback(nullptr);
    kt::set_begin_parallel_reduce_callback(nullptr);
    kt::set_begin_parallel_scan_callback(nullptr);
    kt::set_begin_fence_callback(nullptr);
    kt::set_begin_deep_copy_callback(nullptr);
    kt::set_allocate_data_callback(nullptr);
  }
  CountLaunches(const CountLaunches&) = delete;
  CountLaunches& operator=(const CountLaunches&) = delete;

  [[nodiscard]] LaunchCounts counts() const { return launch_counts(); }
};

}  // namespace kdist::test
