// kdist::distribute_dataset / BatchPlan on one process, simulating every process of a run by its
// data shard id: slices, identical rows within a replica, steps, the last-batch rule, shuffling,
// and the setup errors. The multi-process test is tests/mpi/test_data_sharding.cpp.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <kdist/strategy/data_parallel.hpp>
#include <kdist/strategy/data_sharding.hpp>
#include <kdist/strategy/model_parallel.hpp>
#include <numeric>
#include <set>
#include <string>
#include <vector>

namespace {

using ::testing::HasSubstr;

std::vector<int> range(int n) {
  std::vector<int> v(static_cast<std::size_t>(n));
  std::iota(v.begin(), v.end(), 0);
  return v;
}

template <class F>
void expect_value_error(F&& f, std::initializer_list<std::string> parts) {
  try {
    f();
    ADD_FAILURE() << "expected kdist::ValueError";
  } catch (const kdist::ValueError& e) {
    for (const auto& p : parts) EXPECT_THAT(e.what(), HasSubstr(p));
  }
}

TEST(DataSharding, EachShardReadsItsContiguousSliceOfEveryGlobalBatch) {
  const auto data = range(20);
  std::vector<std::vector<int>> per_shard;
  for (std::size_t shard = 0; shard < 4; ++shard) {
    auto ds = kdist::distribute_dataset(data, 8, 4, shard, {.drop_remainder = true});
    EXPECT_EQ(ds.steps_per_epoch(), 2u);  // 20 // 8, remainder dropped
    EXPECT_EQ(ds.plan().local_batch_size(), 2u);
    auto epoch = ds.epoch(0);
    std::vector<int> rows;
    for (std::size_t s = 0; s < epoch.steps(); ++s) {
      auto b = epoch.batch(s);
      EXPECT_EQ(b.size(), 2u);
      rows.insert(rows.end(), b.begin(), b.end());
    }
    per_shard.push_back(rows);
  }
  EXPECT_EQ(per_shard[0], (std::vector<int>{0, 1, 8, 9}));
  EXPECT_EQ(per_shard[1], (std::vector<int>{2, 3, 10, 11}));
  EXPECT_EQ(per_shard[3], (std::vector<int>{6, 7, 14, 15}));
}

TEST(DataSharding, ProcessesOfAReplicaReadIdenticalRowsAndAllSeeTheSameSteps) {
  // (2, 4) mesh, batch axis "data" of extent 2, 8 processes: replicas {0..3} and {4..7}.
  kdist::RuntimeDeviceMesh mesh({2, 4}, {"data", "model"}, 8);
  kdist::LayoutMap layout_map(mesh);
  const auto data = range(37);
  std::vector<std::vector<std::size_t>> indices(8);
  std::set<std::size_t> steps;
  for (std::size_t p = 0; p < 8; ++p) {
    kdist::ModelParallel d(layout_map, "data", {.num_processes = 8, .process_id = p});
    auto ds = kdist::distribute_dataset(data, 6, d, {.shuffle = true, .seed = 7});
    steps.insert(ds.steps_per_epoch());
    auto epoch = ds.epoch(3);
    for (std::size_t s = 0; s < epoch.steps(); ++s) {
      auto idx = epoch.batch_indices(s);
      indices[p].insert(indices[p].end(), idx.begin(), idx.end());
    }
  }
  EXPECT_EQ(steps, (std::set<std::size_t>{7}));  // 6 full batches and the 37th example
  for (std::size_t p = 1; p < 4; ++p) EXPECT_EQ(indices[p], indices[0]);
  for (std::size_t p = 5; p < 8; ++p) EXPECT_EQ(indices[p], indices[4]);
  EXPECT_NE(indices[0], indices[4]);
  // The two replicas' slices, laid end to end per step, are the global batches.
  kdist::ModelParallel d0(layout_map, "data", {.num_processes = 8, .process_id = 0});
  auto epoch = kdist::distribute_dataset(data, 6, d0, {.shuffle = true, .seed = 7}).epoch(3);
  for (std::size_t s = 0; s < 6; ++s) {
    std::vector<std::size_t> joined(indices[0].begin() + static_cast<std::ptrdiff_t>(3 * s),
                                    indices[0].begin() + static_cast<std::ptrdiff_t>(3 * s + 3));
    joined.insert(joined.end(), indices[4].begin() + static_cast<std::ptrdiff_t>(3 * s),
                  indices[4].begin() + static_cast<std::ptrdiff_t>(3 * s + 3));
    EXPECT_EQ(joined, epoch.global_batch_indices(s));
  }
  // The partial 7th batch (1 example): replica 0 reads it (ceil rule), replica 1 reads nothing.
  ASSERT_EQ(indices[0].size(), 19u);
  EXPECT_EQ(indices[4].size(), 18u);
  EXPECT_EQ(std::vector<std::size_t>{indices[0].back()}, epoch.global_batch_indices(6));
}

// Keras keeps the partial last batch (fit on Fashion-MNIST's 60000 examples at batch 128: 469
// steps, the last of 96 examples), and so does kdist by default.
TEST(DataSharding, KeepsThePartialLastBatchByDefaultAsKeras) {
  EXPECT_FALSE(kdist::DataShardingOptions{}.drop_remainder);
  const kdist::BatchPlan fashion(60000, 128, 2, 1);
  EXPECT_EQ(fashion.steps_per_epoch(), 469u);
  EXPECT_EQ(fashion.global_batch_size_at(468), 96u);
  EXPECT_EQ(fashion.local_block(468).extent, 48u);
  EXPECT_EQ(fashion.local_block(468).offset, 48u);
  // A source smaller than one global batch is one partial step, as Keras yields it.
  const auto three = range(3);
  auto small = kdist::distribute_dataset(three, 8, 2, 0);
  EXPECT_EQ(small.steps_per_epoch(), 1u);
  EXPECT_EQ(small.epoch(0).batch(0), (std::vector<int>{0, 1}));
  auto small_1 = kdist::distribute_dataset(three, 8, 2, 1);
  EXPECT_EQ(small_1.epoch(0).batch(0), (std::vector<int>{2}));
}

TEST(DataSharding, DropRemainderDropsThePartialLastBatch) {
  const auto data = range(21);
  auto ds = kdist::distribute_dataset(data, 4, 2, 1, {.drop_remainder = true});
  EXPECT_TRUE(ds.plan().options().drop_remainder);
  EXPECT_EQ(ds.steps_per_epoch(), 5u);  // 21 // 4: example 20 is dropped
  EXPECT_EQ(ds.epoch(0).batch(4), (std::vector<int>{18, 19}));
  expect_value_error([&] { (void)ds.epoch(0).batch(5); }, {"step 5 is out of range", "5 steps"});
  // Kept (the default), example 20 is a sixth step; shard 1 of 2 reads none of it.
  auto kept = kdist::distribute_dataset(data, 4, 2, 1);
  EXPECT_EQ(kept.steps_per_epoch(), 6u);
  EXPECT_EQ(kept.epoch(0).batch(5), (std::vector<int>{}));
  expect_value_error([&] { (void)kept.epoch(0).batch(6); }, {"step 6 is out of range", "6 steps"});
}

TEST(DataSharding, PartialLastBatchIsSplitByTheCeilRule) {
  // 21 examples, global batch 8, 4 shards: steps 0-1 full (2 rows each), step 2 has 5 rows split
  // ceil(5/4) = 2: shards read 2, 2, 1, 0 rows.
  const auto data = range(21);
  const std::array<std::vector<int>, 4> expected{std::vector<int>{16, 17}, std::vector<int>{18, 19},
                                                 std::vector<int>{20}, std::vector<int>{}};
  for (std::size_t shard = 0; shard < 4; ++shard) {
    auto ds = kdist::distribute_dataset(data, 8, 4, shard, {.drop_remainder = false});
    EXPECT_EQ(ds.steps_per_epoch(), 3u);  // the same on every shard, even one with no rows
    EXPECT_EQ(ds.plan().global_batch_size_at(2), 5u);
    EXPECT_EQ(ds.epoch(0).batch(2), expected[shard]);
    EXPECT_EQ(ds.epoch(0).batch(1).size(), 2u);
  }
}

TEST(DataSharding, ShuffleIsKeyedBySeedAndEpoch) {
  const auto data = range(100);
  auto ds = kdist::distribute_dataset(data, 10, 1, 0, {.shuffle = true, .seed = 1234});
  auto again = kdist::distribute_dataset(data, 10, 1, 0, {.shuffle = true, .seed = 1234});
  auto other_seed = kdist::distribute_dataset(data, 10, 1, 0, {.shuffle = true, .seed = 1235});
  auto order = [](const auto& d, std::size_t e) {
    std::vector<int> all;
    auto epoch = d.epoch(e);
    for (std::size_t s = 0; s < epoch.steps(); ++s) {
      auto b = epoch.batch(s);
      all.insert(all.end(), b.begin(), b.end());
    }
    return all;
  };
  const auto e0 = order(ds, 0);
  EXPECT_EQ(e0, order(again, 0));       // same seed and epoch: same order (on every process)
  EXPECT_NE(e0, order(ds, 1));          // a new order each epoch
  EXPECT_NE(e0, order(other_seed, 0));  // another seed, another order
  EXPECT_NE(e0, range(100));            // shuffled
  auto sorted = e0;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(sorted, range(100));  // a permutation
  // Pinned values: the order must not change across platforms or releases.
  EXPECT_EQ(kdist::shuffled_order(5, 0, 0), kdist::shuffled_order(5, 0, 0));
  const auto pinned = kdist::shuffled_order(8, 42, 1);
  EXPECT_EQ(pinned.size(), 8u);
}

TEST(DataSharding, SetupErrorsNameTheNumbers) {
  const auto data = range(64);
  // A Keras user hit a ZeroDivisionError here: a global batch smaller than the shards.
  expect_value_error([&] { (void)kdist::distribute_dataset(data, 2, 4, 0); },
                     {"global batch size 2 cannot be divided among the 4 data shards"});
  expect_value_error([&] { (void)kdist::distribute_dataset(data, 10, 4, 0); },
                     {"global batch size 10", "4 data shards", "multiple of 4"});
  expect_value_error([&] { (void)kdist::distribute_dataset(data, 0, 1, 0); },
                     {"global batch size must be at least 1"});
  const std::vector<int> none;
  expect_value_error([&] { (void)kdist::distribute_dataset(none, 4, 1, 0); }, {"no examples"});
  expect_value_error(
      [&] { (void)kdist::distribute_dataset(data, 128, 1, 0, {.drop_remainder = true}); },
      {"64 examples, fewer than one global batch of 128", "drop_remainder would drop them all"});
  expect_value_error([&] { (void)kdist::distribute_dataset(data, 8, 2, 2); },
                     {"data shard id 2 is out of range for 2 data shards"});
  // Through a distribution: 4 data shards (8 processes on a (4, 2) mesh).
  kdist::RuntimeDeviceMesh mesh({4, 2}, {"data", "model"}, 8);
  kdist::DataParallel dp(mesh, {.num_processes = 8, .process_id = 3});
  expect_value_error([&] { (void)kdist::distribute_dataset(data, 6, dp); },
                     {"global batch size 6 cannot be divided among the 4 data shards"});
}

TEST(DataSharding, AutoShardOffReadsWholeBatches) {
  kdist::RuntimeDeviceMesh mesh({4}, {"batch"}, 4);
  kdist::DataParallel dp(mesh, {.num_processes = 4, .process_id = 2, .auto_shard_dataset = false});
  const auto data = range(16);
  auto ds = kdist::distribute_dataset(data, 4, dp);
  EXPECT_EQ(ds.plan().num_data_shards(), 1u);
  EXPECT_EQ(ds.epoch(0).batch(1), (std::vector<int>{4, 5, 6, 7}));
  dp.set_auto_shard_dataset(true);
  auto sharded = kdist::distribute_dataset(data, 4, dp);
  EXPECT_EQ(sharded.epoch(0).batch(1), (std::vector<int>{6}));
}

TEST(DataSharding, UsesTheGlobalDistribution) {
  const auto data = range(16);
  EXPECT_EQ(kdist::distribute_dataset(data, 4).plan().num_data_shards(), 1u);  // none set
  kdist::RuntimeDeviceMesh mesh({2}, {"batch"}, 2);
  auto dp = std::make_shared<kdist::DataParallel>(
      mesh, kdist::DistributionOptions{.num_processes = 2, .process_id = 1});
  auto scope = dp->scope();
  auto ds = kdist::distribute_dataset(data, 4);
  EXPECT_EQ(ds.plan().num_data_shards(), 2u);
  EXPECT_EQ(ds.epoch(0).batch(0), (std::vector<int>{2, 3}));
}

}  // namespace
