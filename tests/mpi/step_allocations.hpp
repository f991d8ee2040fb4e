#pragma once
// What a training step allocates once its shapes have been seen (count_allocations.hpp).
#include <cstddef>
#include <string>

#include <kdist/nn/array_dataset.hpp>
#include <kdist/strategy/data_sharding.hpp>
#include <kdist/strategy/distribution.hpp>

#include "count_allocations.hpp"

namespace kdist::test {

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
