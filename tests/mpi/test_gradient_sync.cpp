// kdist-mpi-ranks: 1 2 4
// Non-blocking collectives and the data-parallel gradient sync (issue 21, kdist/nn/
// gradient_sync.hpp): kdist::start_all_reduce sums while other work runs and reports bad
// arguments; Sequential's gradient all-reduces, bucketed or not, overlapped or not, train to the
// same weights (bit for bit where the summation order cannot change), start as many all-reduces
// as the buckets say, and bad settings are the same ValueError on every process.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdlib>
#include <kdist/nn/model.hpp>
#include <kdist/parallel/collective_request.hpp>
#include <kdist/parallel/world.hpp>
#include <kdist/strategy/data_parallel.hpp>
#include <string>
#include <vector>

#include "mpi/model_test_support.hpp"
#include "mpi/mpi_test_util.hpp"

namespace {

using kdist::test::contains;
using kdist::test::message_of;
using kdist::test::world_rank;
using kdist::test::world_size;
using HostSpace = Kokkos::DefaultHostExecutionSpace;

TEST(StartAllReduce, SumsWhileOtherWorkRuns) {
  const int n = world_size(), r = world_rank();
  Kokkos::View<double*, Kokkos::HostSpace> a("a", 1000);
  for (std::size_t i = 0; i < a.size(); ++i) a(i) = r + 0.5 * static_cast<double>(i);
  auto request =
      kdist::start_all_reduce(HostSpace(), a, kdist::ReduceOp::sum, kdist::communicator());
  EXPECT_TRUE(request.active());
  double other = 0;  // work under way meanwhile
  for (int i = 0; i < 1000; ++i) other += i;
  (void)request.test();
  request.wait();
  EXPECT_FALSE(request.active());
  request.wait();  // a second wait returns at once
  EXPECT_TRUE(request.test());
  for (std::size_t i = 0; i < a.size(); i += 97) {
    EXPECT_EQ(a(i), n * (n - 1) / 2.0 + n * 0.5 * static_cast<double>(i)) << i;
  }
  EXPECT_EQ(other, 499500.0);

  // Two Views, max; the request goes out of scope without a wait: its destructor waits.
  Kokkos::View<int*, Kokkos::HostSpace> send("send", 5), recv("recv", 5);
  for (int i = 0; i < 5; ++i) send(i) = r * 10 + i;
  {
    auto dropped = kdist::start_all_reduce(HostSpace(), send, recv, kdist::ReduceOp::max,
                                           kdist::communicator());
  }
  for (int i = 0; i < 5; ++i) EXPECT_EQ(recv(i), (n - 1) * 10 + i);

  // Moved requests: the moved-to one completes it.
  kdist::CollectiveRequest moved;
  EXPECT_FALSE(moved.active());
  moved =
      kdist::start_all_reduce(HostSpace(), send, recv, kdist::ReduceOp::min, kdist::communicator());
  kdist::CollectiveRequest again(std::move(moved));
  again.wait();
  for (int i = 0; i < 5; ++i) EXPECT_EQ(recv(i), i);
}

TEST(StartAllReduce, BadArgumentsAreValueErrors) {
  Kokkos::View<float*, Kokkos::HostSpace> a("a", 4), b("b", 3);
  const auto mean = message_of<kdist::ValueError>([&] {
    auto r = kdist::start_all_reduce(HostSpace(), a, kdist::ReduceOp::mean, kdist::communicator());
  });
  EXPECT_TRUE(contains(mean, "kdist::start_all_reduce")) << mean;
  EXPECT_TRUE(contains(mean, "ReduceOp::mean is not available without blocking")) << mean;
  EXPECT_TRUE(contains(mean, "divide by the communicator's size after wait()")) << mean;
  const auto sizes = message_of<kdist::ValueError>([&] {
    auto r =
        kdist::start_all_reduce(HostSpace(), a, b, kdist::ReduceOp::sum, kdist::communicator());
  });
  EXPECT_TRUE(contains(sizes, "send has 4 elements but recv has 3")) << sizes;
  Kokkos::View<float**, Kokkos::LayoutRight, Kokkos::HostSpace> m("m", 4, 4);
  auto column = Kokkos::subview(m, Kokkos::ALL, 1);
  const auto strided = message_of<kdist::ValueError>([&] {
    auto r =
        kdist::start_all_reduce(HostSpace(), column, kdist::ReduceOp::sum, kdist::communicator());
  });
  EXPECT_TRUE(contains(strided, "contiguous")) << strided;
}

// Trains kdist::test::small_model (Dense(10) with bias, Dropout, Dense(10) with bias: 4
// gradients of 2560, 40, 400 and 40 bytes) for 2 epochs with `options`, DataParallel over every
// process; returns its state and what the gradient sync started per step.
struct Trained {
  std::map<std::string, std::vector<float>> state;
  kdist::GradientSyncCounts per_step;
};
Trained train_with(const kdist::GradientSyncOptions& options) {
  auto m = kdist::test::small_model();
  m.set_gradient_sync(options);
  m.compile(std::make_shared<kdist::DataParallel>(), kdist::Loss::mean_squared_error,
            kdist::Adam(0.01), 5);
  EXPECT_EQ(m.gradient_sync().bucket_bytes, options.bucket_bytes);
  EXPECT_EQ(m.gradient_sync().overlap, options.overlap);
  m.reset_gradient_sync_counts();
  m.fit(kdist::test::small_data(), {.batch_size = 16, .epochs = 2, .verbose = 0});
  const auto steps = static_cast<std::size_t>(m.iterations());
  EXPECT_EQ(steps, 6U);
  const auto& c = m.gradient_sync_counts();
  return {kdist::test::state_of(m),
          {c.all_reduces / steps, c.bucketed_gradients / steps, c.bytes / steps}};
}

TEST(GradientSync, BucketsAndOverlapTrainToTheSameWeights) {
  // On one process the gradients are complete (no pending sums): nothing to reduce.
  const std::size_t many = world_size() > 1 ? 1 : 0;
  const auto base = train_with({.overlap = true, .bucket_bytes = 256 << 10});
  EXPECT_EQ(base.per_step.all_reduces, 1 * many);  // every gradient in one bucket
  EXPECT_EQ(base.per_step.bucketed_gradients, 4 * many);
  EXPECT_EQ(base.per_step.bytes, (2560 + 40 + 400 + 40) * many);

  const auto late = train_with({.overlap = false, .bucket_bytes = 256 << 10});
  kdist::test::expect_bitwise_equal(late.state, base.state, "overlap off");
  EXPECT_EQ(late.per_step.all_reduces, 1 * many);

  // 1 KiB buckets: d1/kernel (2560 bytes) on its own, the other three (480 bytes) in one bucket.
  const auto small = train_with({.overlap = true, .bucket_bytes = 1024});
  EXPECT_EQ(small.per_step.all_reduces, 2 * many);
  EXPECT_EQ(small.per_step.bucketed_gradients, 3 * many);
  const auto none = train_with({.overlap = true, .bucket_bytes = 0});
  EXPECT_EQ(none.per_step.all_reduces, 4 * many);
  EXPECT_EQ(none.per_step.bucketed_gradients, 0U);
  const auto none_late = train_with({.overlap = false, .bucket_bytes = 0});
  kdist::test::expect_bitwise_equal(none_late.state, none.state, "no buckets, overlap off");

  // Other message sizes may let MPI sum in another order on more than 2 processes.
  for (const auto* t : {&small, &none}) {
    if (world_size() <= 2) {
      kdist::test::expect_bitwise_equal(t->state, base.state, "other buckets");
    } else {
      for (const auto& [path, w] : base.state) {
        EXPECT_LT(kdist::test::worst_relative(t->state.at(path), w), 1e-5) << path;
      }
    }
  }
}

// A setting: the message every process got from compile with it (and the environment as set).
std::string compile_error(const std::optional<kdist::GradientSyncOptions>& options) {
  auto m = kdist::test::small_model();
  if (options) m.set_gradient_sync(*options);
  const auto message = message_of<kdist::ValueError>([&] {
    m.compile(std::make_shared<kdist::DataParallel>(), kdist::Loss::mean_squared_error,
              kdist::Adam(), 1);
  });
  kdist::test::expect_same_on_every_process(message);
  return message;
}

TEST(GradientSync, BadSettingsAreTheSameValueErrorOnEveryProcess) {
  const auto big = compile_error(kdist::GradientSyncOptions{.bucket_bytes = std::size_t{2} << 30});
  EXPECT_TRUE(contains(big, "bucket_bytes is 2147483648, more than the limit of 1 GiB")) << big;

  ::setenv("KDIST_GRADIENT_BUCKET_KB", "12x", 1);
  const auto env = compile_error(std::nullopt);
  EXPECT_TRUE(contains(env,
                       "KDIST_GRADIENT_BUCKET_KB is '12x', not a whole number of KiB from 0 "
                       "to 1048576"))
      << env;
  ::setenv("KDIST_GRADIENT_BUCKET_KB", "-1", 1);
  EXPECT_TRUE(contains(compile_error(std::nullopt), "KDIST_GRADIENT_BUCKET_KB is '-1'"));
  ::unsetenv("KDIST_GRADIENT_BUCKET_KB");
  ::setenv("KDIST_GRADIENT_OVERLAP", "maybe", 1);
  const auto overlap = compile_error(std::nullopt);
  EXPECT_TRUE(contains(overlap, "KDIST_GRADIENT_OVERLAP is 'maybe', not 0, 1, off or on"))
      << overlap;
  ::unsetenv("KDIST_GRADIENT_OVERLAP");

  // The environment's settings when the program sets none; the program's replace them.
  ::setenv("KDIST_GRADIENT_BUCKET_KB", "3", 1);
  ::setenv("KDIST_GRADIENT_OVERLAP", "off", 1);
  {
    auto m = kdist::test::small_model();
    m.compile(std::make_shared<kdist::DataParallel>(), kdist::Loss::mean_squared_error,
              kdist::Adam(), 1);
    EXPECT_EQ(m.gradient_sync().bucket_bytes, 3072U);
    EXPECT_FALSE(m.gradient_sync().overlap);
    m.set_gradient_sync({.overlap = true, .bucket_bytes = 0});
    EXPECT_EQ(m.gradient_sync().bucket_bytes, 0U);
    EXPECT_TRUE(m.gradient_sync().overlap);
  }
  ::unsetenv("KDIST_GRADIENT_BUCKET_KB");
  ::unsetenv("KDIST_GRADIENT_OVERLAP");

  if (world_size() == 1) return;
  // Settings that differ between processes: their all-reduces would not match.
  const auto differ = compile_error(kdist::GradientSyncOptions{
      .overlap = world_rank() != 0, .bucket_bytes = world_rank() == 0 ? 0U : 4096U});
  EXPECT_TRUE(contains(differ,
                       "kdist::GradientSyncOptions differ between processes (bucket_bytes "
                       "from 0 to 4096, overlap on and off)"))
      << differ;
  if (world_rank() == 1) ::setenv("KDIST_GRADIENT_OVERLAP", "0", 1);
  const auto one_env = compile_error(std::nullopt);
  ::unsetenv("KDIST_GRADIENT_OVERLAP");
  EXPECT_TRUE(contains(one_env, "differ between processes")) << one_env;
  EXPECT_TRUE(contains(one_env,
                       "set KDIST_GRADIENT_BUCKET_KB, KDIST_GRADIENT_OVERLAP or "
                       "Sequential::set_gradient_sync alike on every process"))
      << one_env;
}

}  // namespace
