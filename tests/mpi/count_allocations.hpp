#pragma once
// Kokkos allocations counted by label while a CountAllocations lives (Kokkos Tools' allocation
// callback), and kdist's host scratch growing: what a step, or a redistribution, allocates once
// its shapes have been seen (nothing, by kdist::ReusableViews and the kept host scratch).
#include <Kokkos_Core.hpp>

#include <cstdint>
#include <map>
#include <string>

#include <kdist/parallel/detail/host_scratch.hpp>

namespace kdist::test {

inline std::map<std::string, int>& allocations_by_label() {
  static std::map<std::string, int> counts;
  return counts;
}

inline void count_allocation(Kokkos::Tools::SpaceHandle, const char* label, const void*,
                             std::uint64_t) {
  ++allocations_by_label()[label];
}

//! Counts this process's Kokkos allocations, by label, and the growths of kdist's host scratch
//! (the host copies that stage device memory for MPI and the packed messages), from construction
//! to destruction.
struct CountAllocations {
  CountAllocations() : scratch_growths_(kdist::detail::host_scratch_growths().load()) {
    allocations_by_label().clear();
    Kokkos::Tools::Experimental::set_allocate_data_callback(count_allocation);
  }
  ~CountAllocations() { Kokkos::Tools::Experimental::set_allocate_data_callback(nullptr); }
  CountAllocations(const CountAllocations&) = delete;
  CountAllocations& operator=(const CountAllocations&) = delete;

  //! "label x count, ..." of what was allocated so far ("" for nothing).
  [[nodiscard]] std::string seen() const {
    std::string s;
    for (const auto& [label, n] : allocations_by_label()) {
      s += (s.empty() ? "" : ", ") + label + " x" + std::to_string(n);
    }
    const long grew = kdist::detail::host_scratch_growths().load() - scratch_growths_;
    if (grew != 0)
      s += (s.empty() ? "" : ", ") + std::string("host scratch grew x") + std::to_string(grew);
    return s;
  }

 private:
  long scratch_growths_;
};

}  // namespace kdist::test
