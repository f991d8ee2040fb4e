// kdist-mpi-ranks: 1 2
// What one training step asks of Kokkos (issue 36): kernel launches, fences, deep copies (those
// between memory spaces: host-device copies on a GPU) and allocations, counted with Kokkos Tools'
// callbacks (count_launches.hpp). Once the shapes are seen every step asks the same, allocates
// nothing, and on the CPU (Kokkos Serial, what CI runs) asks no more than the budget below: a
// change that adds a launch, a fence or a copy to the step fails here and has to say why (and
// lower the budget when it removes some). The seeds' model (DataParallel, Adam, batch 128) and the
// example GPT at a small size (DataParallel, AdamW, the vocabulary-parallel loss).
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <type_traits>
#include <vector>

#include <kdist/nn/model.hpp>
#include <kdist/strategy/data_parallel.hpp>
#include <kdist/strategy/data_sharding.hpp>

#include "common/gpt_model.hpp"
#include "mpi/count_launches.hpp"
#include "mpi/model_test_support.hpp"
#include "mpi/mpi_test_util.hpp"
#include "mpi/tiny_gpt_config.hpp"

namespace {

using kdist::test::LaunchCounts;
using kdist::test::world_rank;
using kdist::test::world_size;

//! What each of steps 3, 4 and 5 of `model` asks (steps 1 and 2 see the shapes), on the first
//! global batch of `batch` examples of `data` (examples of rank R - 1).
template <std::size_t R, class T>
std::vector<LaunchCounts> counts_of_steps_3_to_5(kdist::BasicSequential<T>& model,
                                                 const kdist::ArrayDataset<T>& data,
                                                 std::size_t batch) {
  const kdist::BatchPlan plan(batch, batch, model.distribution());
  const auto idx = plan.local_indices(plan.order(0), 0);
  kdist::detail::BatchLoader<T, R> loader(data, idx.size());
  const auto x = loader.load_examples(idx);
  std::vector<LaunchCounts> out;
  const auto steps = [&](const auto& y) {
    for (int s = 0; s < 2; ++s) model.train_step(x, y, batch);
    for (int s = 0; s < 3; ++s) {
      const kdist::test::CountLaunches count;
      model.train_step(x, y, batch);
      out.push_back(count.counts());
    }
  };
  if (data.has_labels()) {
    steps(loader.load_labels(idx));
  } else {
    steps(loader.load_targets(idx));
  }
  return out;
}

//! Every step the same, no allocation, and within `budget` where the budget applies (Kokkos
//! Serial as the default execution space: the build CI runs).
void expect_steady_and_within(const std::vector<LaunchCounts>& steps, const LaunchCounts& budget,
                              const std::string& what) {
  ASSERT_EQ(steps.size(), 3U);
  if (world_rank() == 0) std::printf("%s, one step: %s\n", what.c_str(), steps[0].str().c_str());
  EXPECT_EQ(steps[1], steps[0]) << what << ": step 4 asks " << steps[1].str() << ", step 3 "
                                << steps[0].str();
  EXPECT_EQ(steps[2], steps[0]) << what << ": step 5 asks " << steps[2].str() << ", step 3 "
                                << steps[0].str();
  EXPECT_EQ(steps[0].allocations, 0) << what << ": a step allocates once its shapes are seen";
  if constexpr (std::is_same_v<Kokkos::DefaultExecutionSpace, Kokkos::Serial>) {
    EXPECT_LE(steps[0].kernels, budget.kernels) << what << ": " << steps[0].str();
    EXPECT_LE(steps[0].fences, budget.fences) << what << ": " << steps[0].str();
    EXPECT_LE(steps[0].deep_copies, budget.deep_copies) << what << ": " << steps[0].str();
    EXPECT_LE(steps[0].copies_between_spaces, budget.copies_between_spaces)
        << what << ": " << steps[0].str();
  }
}

TEST(StepLaunches, TheSeedsModelAsksTheSameEveryStepWithinItsBudget) {
  auto model = kdist::examples::seeds_model();
  model.compile(std::make_shared<kdist::DataParallel>(), kdist::Loss::categorical_crossentropy,
                kdist::Adam(0.001), 1);
  const auto steps = counts_of_steps_3_to_5<4>(model, kdist::examples::seeds_data(), 128);
  // Measured when this test was written (Kokkos 3.4.1 Serial): the host path runs its elementwise
  // work as plain loops and its GEMMs in BLAS, so Kokkos sees only the copies of the gradients
  // into their variables' blocks that no all-reduce writes there, and the one kernel that advances
  // the step's count in device memory (detail::DeviceIterations).
  const LaunchCounts budget = world_size() == 1
                                  ? LaunchCounts{.kernels = 1, .fences = 0, .deep_copies = 2}
                                  : LaunchCounts{.kernels = 1, .fences = 0, .deep_copies = 1};
  expect_steady_and_within(steps, budget, "seeds' model");
}

TEST(StepLaunches, TheGptAsksTheSameEveryStepWithinItsBudget) {
  const kdist::examples::GptConfig config = kdist::test::tiny_gpt_config(2);
  auto model = kdist::examples::make_gpt<float>(config);
  model.compile(std::make_shared<kdist::DataParallel>(),
                kdist::Loss::sparse_categorical_crossentropy, kdist::AdamW(0.001), 3);
  std::vector<float> x(8 * config.sequence), y(8 * config.sequence);
  for (std::size_t i = 0; i < x.size(); ++i) {
    x[i] = static_cast<float>((7 * i + 3) % config.vocab);
    y[i] = static_cast<float>((7 * i + 10) % config.vocab);
  }
  const kdist::ArrayDataset<float> data(std::move(x), {config.sequence}, std::move(y),
                                        config.sequence);
  const auto steps = counts_of_steps_3_to_5<2>(model, data, 8);
  // On one process every gradient is copied from its layer's buffer into its variable's block
  // (on two, the all-reduces write them there); the kernels are the embedding's, the attention's
  // and the loss's, and the step count's (detail::DeviceIterations).
  const LaunchCounts budget = world_size() == 1
                                  ? LaunchCounts{.kernels = 18, .fences = 0, .deep_copies = 40}
                                  : LaunchCounts{.kernels = 18, .fences = 0, .deep_copies = 3};
  expect_steady_and_within(steps, budget, "GPT");
}

}  // namespace
