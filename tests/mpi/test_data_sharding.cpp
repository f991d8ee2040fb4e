// kdist-mpi-ranks: 2 4 8
// Multi-process data sharding: every process builds its distribution from the MPI world
// (kdist::process_count / process_id, kdist::list_devices) and reads its rows of each global batch;
// ONE MPI_Allgather brings every process's rows together, and each process checks that
//  - every process has the same number of steps;
//  - processes of the same model replica read identical rows, other replicas other rows;
//  - the shards' rows laid end to end in shard order are the global batch (so every process
//    computed the same shuffled order);
// for DataParallel on every device, ModelParallel with the batch axis first (n/2, 2) and second
// (2, n/2), and the partial-last-batch rule.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstddef>
#include <kdist/parallel/initialize.hpp>
#include <kdist/strategy/data_parallel.hpp>
#include <kdist/strategy/data_sharding.hpp>
#include <kdist/strategy/model_parallel.hpp>
#include <map>
#include <numeric>
#include <string>
#include <vector>

namespace {

constexpr int max_steps = 8;
constexpr int epochs = 2;
constexpr std::uint64_t seed = 11;

struct Config {
  std::string name;
  std::shared_ptr<const kdist::Distribution> distribution;
  kdist::DataShardingOptions options;
  std::size_t expected_shard;   // this process's data shard, by the rule of the config
  std::size_t expected_shards;  // number of data shards
};

std::vector<Config> configs(std::size_t n, std::size_t r) {
  std::vector<Config> out;
  out.push_back({"DataParallel() on every device",
                 std::make_shared<kdist::DataParallel>(),
                 {.shuffle = true, .seed = seed},
                 r,
                 n});
  kdist::RuntimeDeviceMesh batch_first({n / 2, 2}, {"data", "model"}, kdist::list_devices());
  out.push_back({"ModelParallel (n/2, 2), batch axis first",
                 std::make_shared<kdist::ModelParallel>(kdist::LayoutMap(batch_first), "data"),
                 {.shuffle = true, .seed = seed},
                 r / 2,
                 n / 2});
  kdist::RuntimeDeviceMesh batch_second({2, n / 2}, {"model", "data"}, kdist::list_devices());
  out.push_back({"ModelParallel (2, n/2), batch axis second",
                 std::make_shared<kdist::ModelParallel>(kdist::LayoutMap(batch_second), "data"),
                 {.shuffle = true, .seed = seed},
                 r % (n / 2),
                 n / 2});
  out.push_back({"ModelParallel (n/2, 2), partial last batch",
                 std::make_shared<kdist::ModelParallel>(kdist::LayoutMap(batch_first)),
                 {.drop_remainder = false, .shuffle = true, .seed = seed},
                 r / 2,
                 n / 2});
  return out;
}

TEST(MpiDataSharding, ShardsOfEveryGlobalBatchAcrossProcesses) {
  const auto n = static_cast<std::size_t>(kdist::process_count());
  const auto r = static_cast<std::size_t>(kdist::process_id());
  ASSERT_EQ(n % 2, 0u) << "run with an even number of processes";
  std::vector<int> examples(10 * n + 3);
  std::iota(examples.begin(), examples.end(), 0);
  const std::size_t global_batch = 2 * n;

  const auto cfgs = configs(n, r);
  // Per config: [steps, then epochs x max_steps x global_batch rows padded with -1].
  const std::size_t per_config = 1 + epochs * max_steps * global_batch;
  std::vector<int> mine(cfgs.size() * per_config, -1);
  for (std::size_t c = 0; c < cfgs.size(); ++c) {
    const auto& cfg = cfgs[c];
    EXPECT_EQ(cfg.distribution->num_processes(), n);
    EXPECT_EQ(cfg.distribution->process_id(), r);
    EXPECT_EQ(cfg.distribution->num_data_shards(), cfg.expected_shards) << cfg.name;
    EXPECT_EQ(cfg.distribution->data_shard_id(), cfg.expected_shard) << cfg.name;
    auto dataset =
        kdist::distribute_dataset(examples, global_batch, *cfg.distribution, cfg.options);
    ASSERT_LE(dataset.steps_per_epoch(), static_cast<std::size_t>(max_steps));
    int* out = mine.data() + c * per_config;
    out[0] = static_cast<int>(dataset.steps_per_epoch());
    for (int e = 0; e < epochs; ++e) {
      auto epoch = dataset.epoch(static_cast<std::size_t>(e));
      for (std::size_t s = 0; s < epoch.steps(); ++s) {
        const auto rows = epoch.batch(s);
        for (std::size_t k = 0; k < rows.size(); ++k) {
          out[1 + (static_cast<std::size_t>(e) * max_steps + s) * global_batch + k] = rows[k];
        }
      }
    }
  }

  std::vector<int> all(mine.size() * n);
  MPI_Allgather(mine.data(), static_cast<int>(mine.size()), MPI_INT, all.data(),
                static_cast<int>(mine.size()), MPI_INT, MPI_COMM_WORLD);

  for (std::size_t c = 0; c < cfgs.size(); ++c) {
    const auto& cfg = cfgs[c];
    auto at = [&](std::size_t rank) { return all.data() + rank * mine.size() + c * per_config; };
    // Every process's shard id, by the config's rule.
    std::vector<std::size_t> shard_of(n);
    for (std::size_t p = 0; p < n; ++p) shard_of[p] = configs(n, p)[c].expected_shard;
    for (std::size_t p = 0; p < n; ++p)
      EXPECT_EQ(at(p)[0], at(0)[0]) << cfg.name << ": steps of process " << p;
    const auto steps = static_cast<std::size_t>(at(0)[0]);
    auto dataset =
        kdist::distribute_dataset(examples, global_batch, *cfg.distribution, cfg.options);
    for (int e = 0; e < epochs; ++e) {
      auto epoch = dataset.epoch(static_cast<std::size_t>(e));
      for (std::size_t s = 0; s < steps; ++s) {
        auto rows_of = [&](std::size_t p) {
          const int* b = at(p) + 1 + (static_cast<std::size_t>(e) * max_steps + s) * global_batch;
          std::vector<int> v;
          for (std::size_t k = 0; k < global_batch && b[k] >= 0; ++k) v.push_back(b[k]);
          return v;
        };
        std::map<std::size_t, std::vector<int>> by_shard;
        for (std::size_t p = 0; p < n; ++p) {
          auto [it, fresh] = by_shard.emplace(shard_of[p], rows_of(p));
          if (!fresh) {
            EXPECT_EQ(rows_of(p), it->second)
                << cfg.name << ": processes of one replica read other rows (epoch " << e
                << ", step " << s << ", process " << p << ")";
          }
        }
        ASSERT_EQ(by_shard.size(), cfg.expected_shards) << cfg.name;
        std::vector<int> joined;
        for (const auto& [shard, rows] : by_shard)
          joined.insert(joined.end(), rows.begin(), rows.end());
        std::vector<int> expected;
        for (auto i : epoch.global_batch_indices(s)) expected.push_back(examples[i]);
        EXPECT_EQ(joined, expected) << cfg.name << ": epoch " << e << ", step " << s;
        if (by_shard.size() > 1 && s + 1 < steps) {
          EXPECT_NE(by_shard.begin()->second, by_shard.rbegin()->second) << cfg.name;
        }
      }
    }
  }
}

TEST(MpiDataSharding, GlobalBatchTheShardsCannotDivideIsAnErrorAtSetup) {
  const auto n = static_cast<std::size_t>(kdist::process_count());
  std::vector<int> examples(64);
  kdist::DataParallel data_parallel;  // n data shards
  try {
    (void)kdist::distribute_dataset(examples, n + 1, data_parallel);
    ADD_FAILURE() << "expected kdist::ValueError";
  } catch (const kdist::ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("global batch size " + std::to_string(n + 1) +
                                         " cannot be divided among the " + std::to_string(n) +
                                         " data shards"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
