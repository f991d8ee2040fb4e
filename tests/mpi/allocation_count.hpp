#pragma once
// Kokkos allocations counted by label while a CountAllocations lives (Kokkos Tools' allocation
// callback): what a training step allocates once its shapes have been seen (nothing, by
// kdist::ReusableViews).
#include <Kokkos_Core.hpp>

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>

#include <kdist/nn/array_dataset.hpp>
#include <kdist/strategy/data_sharding.hpp>
#include <kdist/strategy/distribution.hpp>

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

//! What steps 3 and 4 of `model` (compiled with `dist`) allocate on this process ("" for nothing),
//! training on the first global batch of `batch` examples of `data` (examples of rank R - 1): the
//! first two steps see the shapes.
template <std::size_t R, class Model, class T>
std::string allocations_of_steps_3_and_4(Model& model, const kdist::Distribution& dist,
                                         const kdist::ArrayDataset<T>& data, std::size_t batch) {
  const kdist::BatchPlan plan(batch, batch, dist);
  const auto idx = plan.local_indices(plan.order(0), 0);
  kdist::detail::BatchLoader<T, R> loader(data, idx.size());
  const auto x = loader.load_examples(idx);
  const auto steps = [&](const auto& y) {
    for (int s = 0; s < 2; ++s) model.train_step(x, y, batch);
    const CountAllocations count;
    for (int s = 0; s < 2; ++s) model.train_step(x, y, batch);
    return count.seen();
  };
  return data.has_labels() ? steps(loader.load_labels(idx)) : steps(loader.load_targets(idx));
}

}  // namespace kdist::test
