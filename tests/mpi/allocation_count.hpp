#pragma once
// Kokkos allocations counted by label while a CountAllocations lives (Kokkos Tools' allocation
// callback): what a training step allocates once its shapes have been seen (nothing, by
// kdist::ReusableViews).
#include <Kokkos_Core.hpp>

#include <cstdint>
#include <map>
#include <string>

namespace kdist::test {

inline std::map<std::string, int>& allocations_by_label() {
  static std::map<std::string, int> counts;
  return counts;
}

inline void count_allocation(Kokkos::Tools::SpaceHandle, const char* label, const void*,
                             std::uint64_t) {
  ++allocations_by_label()[label];
}

//! Counts this process's Kokkos allocations, by label, from construction to destruction.
struct CountAllocations {
  CountAllocations() {
    allocations_by_label().clear();
    Kokkos::Tools::Experimental::set_allocate_data_callback(count_allocation);
  }
  ~CountAllocations() { Kokkos::Tools::Experimental::set_allocate_data_callback(nullptr); }
  CountAllocations(const CountAllocations&) = delete;
  CountAllocations& operator=(const CountAllocations&) = delete;

  //! "label x count, ..." of what was allocated so far ("" for nothing).
  static std::string seen() {
    std::string s;
    for (const auto& [label, n] : allocations_by_label()) {
      s += (s.empty() ? "" : ", ") + label + " x" + std::to_string(n);
    }
    return s;
  }
};

}  // namespace kdist::test
