// kdist-mpi-ranks: 1 2 4
// Non-blocking collectives and the data-parallel gradient sync (issue 21, kdist/nn/
// gradient_sync.hpp): kdist::start_all_reduce sums while other work runs and reports bad
// arguments; Sequential's gradient all-reduces, bucketed or not, overlapped or not, and its
// optimizer state sharded over the processes (ZeRO-1: large variables split in parts, small ones
// owned whole by one process) or not, train to the same weights (bit for
// bit where the summation order cannot change), start as many collectives as the buckets and
// shards say, FSDP gradients are reduce-scattered by the sync (float32, or moving bfloat16), and
// bad settings are the same ValueError on every process. A user's layer, which
// hands its gradient back like the library's, gets all of it with no code of its own.
#include <gtest/gtest.h>
#include <mpi.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <kdist/nn/model.hpp>
#include <kdist/nn/weight_gather.hpp>
#include <kdist/parallel/collective_request.hpp>
#include <kdist/parallel/world.hpp>
#include <kdist/strategy/data_parallel.hpp>
#include <kdist/strategy/model_parallel.hpp>
#include <kdist/tensor/detail/started_reduce_scatter.hpp>
#include <map>
#include <string>
#include <vector>

#include "mpi/model_test_support.hpp"
#include "mpi/mpi_test_util.hpp"
#include "mpi/small_gpt.hpp"

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
  // A device View for an MPI whose non-blocking collectives cannot read it (the check every
  // process makes before MPI is called; device memory meets it on GPU builds only).
  const auto device = message_of<kdist::ValueError>([&] {
    kdist::detail::collectives::check_non_blocking_memory(false, "kdist::start_all_reduce");
  });
  EXPECT_TRUE(contains(device, "kdist::start_all_reduce")) << device;
  EXPECT_TRUE(contains(device, "do not take device pointers")) << device;
  EXPECT_TRUE(contains(device, "use the blocking kdist::all_reduce")) << device;
  EXPECT_TRUE(kdist::detail::collectives::non_blocking_can_access<decltype(a)>());
}

// A user's layer as guide chapter 06 writes one: y = x W, no bias, its kernel laid out by the
// distribution; backward hands dW = x^T dy back as matmul leaves it (a pending sum over the batch
// axes under data parallelism) and has no code for overlap, buckets or ZeRO-1.
struct UserDense {
  using value_type = float;
  using Matrix = kdist::DistributedTensor<float**>;
  std::size_t units = 10;
  std::string layer_name = "user";
  kdist::layers::Variable<float**> kernel;
  Matrix x;

  std::string name() const { return layer_name; }
  kdist::Shape build(const kdist::Shape& in, const kdist::Distribution& dist, std::uint64_t) {
    const std::array<std::size_t, 2> shape{in.at(0), units};
    kernel.path = layer_name + "/kernel";
    const auto layout =
        dist.get_variable_layout(kdist::VariableInfo(kernel.path, {shape[0], shape[1]}));
    kernel.value = Matrix::zeros(shape, layout, kernel.path);
    kernel.grad = Matrix::zeros(shape, layout, kernel.path + "/grad");
    const auto block = kernel.value.local();  // host memory in these tests
    const auto at = kernel.value.offsets();
    for (std::size_t i = 0; i < block.extent(0); ++i) {
      for (std::size_t j = 0; j < block.extent(1); ++j) {
        block(i, j) = 0.1f * std::sin(static_cast<float>((at[0] + i) * units + at[1] + j));
      }
    }
    return {units};
  }
  kdist::LayerTensor<float> forward(const kdist::LayerTensor<float>& in,
                                    const kdist::StepContext&) {
    x = std::get<Matrix>(in);
    return kdist::matmul(x, kernel.value);
  }
  std::optional<kdist::LayerTensor<float>> backward(const kdist::LayerTensor<float>& dy_in,
                                                    bool need, kdist::Gradients<float>& grads) {
    const auto& dy = std::get<Matrix>(dy_in);
    grads.add(kernel, kdist::matmul(x, dy, kdist::ops::Op::transpose));  // the step sums it
    if (!need) return std::nullopt;
    return kdist::redistribute(
        kdist::matmul(dy, kernel.value, kdist::ops::Op::none, kdist::ops::Op::transpose),
        x.layout());
  }
  std::vector<kdist::VariableRef<float>> variables() { return {&kernel}; }
};
static_assert(kdist::Layer<UserDense>);

// Trains kdist::test::small_model (Dense(10) with bias, Dropout, Dense(10) with bias: 4
// gradients of 2560, 40, 400 and 40 bytes) for 2 epochs with `options`, DataParallel over every
// process; returns its state and what the gradient sync started per step.
struct Trained {
  std::map<std::string, std::vector<float>> state;
  kdist::GradientSyncCounts per_step;
};
Trained train_with(const kdist::GradientSyncOptions& options,
                   kdist::Sequential::Optimizer adam = kdist::Adam(0.01),
                   std::shared_ptr<const kdist::Distribution> distribution =
                       std::make_shared<kdist::DataParallel>()) {
  auto m = kdist::test::small_model();
  m.set_gradient_sync(options);
  m.compile(std::move(distribution), kdist::Loss::mean_squared_error, adam, 5);
  EXPECT_EQ(m.gradient_sync().bucket_bytes, options.bucket_bytes);
  EXPECT_EQ(m.gradient_sync().overlap, options.overlap);
  m.reset_gradient_sync_counts();
  m.fit(kdist::test::small_data(), {.batch_size = 16, .epochs = 2, .verbose = 0});
  const auto steps = static_cast<std::size_t>(m.iterations());
  EXPECT_EQ(steps, 6U);
  const auto& c = m.gradient_sync_counts();
  return {kdist::test::state_of(m),
          {c.all_reduces / steps, c.bucketed_gradients / steps, c.bytes / steps,
           c.reduce_scatters / steps, c.all_gathers / steps}};
}

// The same weights and optimizer state, bit for bit on up to 2 processes (a sum of two summands
// does not depend on the order); on more MPI may sum in another order for another collective.
void expect_same_state(const Trained& got, const Trained& want, const std::string& what) {
  if (world_size() <= 2) {
    kdist::test::expect_bitwise_equal(got.state, want.state, what);
    return;
  }
  ASSERT_EQ(got.state.size(), want.state.size()) << what;
  for (const auto& [path, w] : want.state) {
    EXPECT_LT(kdist::test::worst_relative(got.state.at(path), w), 1e-5) << what << " " << path;
  }
}

// Flatten, the user's layer (a 64 x 10 kernel, 2560 bytes), Dense(10) with bias and softmax,
// trained for 2 epochs with `options`, DataParallel over every process.
Trained train_user_layer_with(const kdist::GradientSyncOptions& options) {
  std::vector<kdist::Sequential::Layer> l;
  l.emplace_back(kdist::layers::Flatten());
  l.emplace_back(UserDense{});
  l.emplace_back(kdist::layers::Dense(10, kdist::layers::Activation::softmax, true, "d2"));
  kdist::Sequential m({8, 8, 1}, std::move(l));
  m.set_gradient_sync(options);
  m.compile(std::make_shared<kdist::DataParallel>(), kdist::Loss::mean_squared_error,
            kdist::Adam(0.01), 5);
  m.reset_gradient_sync_counts();
  m.fit(kdist::test::small_data(), {.batch_size = 16, .epochs = 2, .verbose = 0});
  const auto steps = static_cast<std::size_t>(m.iterations());
  EXPECT_EQ(steps, 6U);
  if (options.shard_optimizer_state && world_size() > 1) {
    // This process keeps Adam's m and v of its part of the user's kernel only.
    const auto part = m.optimizer_state_part("user/kernel");
    EXPECT_TRUE(part.has_value());
    if (part) {
      EXPECT_LT(part->second, 640U);
    }
  }
  const auto& c = m.gradient_sync_counts();
  return {kdist::test::state_of(m),
          {c.all_reduces / steps, c.bucketed_gradients / steps, c.bytes / steps,
           c.reduce_scatters / steps, c.all_gathers / steps}};
}

TEST(GradientSync, AUsersLayerGetsOverlapBucketsAndShardedStateWithNoCodeOfItsOwn) {
  // Its gradient goes through the step's sync like the library's: on its own, in a bucket,
  // reduce-scattered under ZeRO-1; the weights are the same every way.
  const std::size_t many = world_size() > 1 ? 1 : 0;
  const auto own = train_user_layer_with({.overlap = true, .bucket_bytes = 0});
  EXPECT_EQ(own.per_step.all_reduces, 3 * many);  // user/kernel, d2/kernel, d2/bias
  EXPECT_EQ(own.per_step.bytes, (2560 + 400 + 40) * many);
  const auto late = train_user_layer_with({.overlap = false, .bucket_bytes = 0});
  kdist::test::expect_bitwise_equal(late.state, own.state, "overlap off");
  const auto bucket = train_user_layer_with({.overlap = true, .bucket_bytes = 256 << 10});
  EXPECT_EQ(bucket.per_step.all_reduces, 1 * many);
  EXPECT_EQ(bucket.per_step.bucketed_gradients, 3 * many);
  expect_same_state(bucket, own, "one bucket");
  const auto sharded =
      train_user_layer_with({.overlap = true, .bucket_bytes = 0, .shard_optimizer_state = true});
  EXPECT_EQ(sharded.per_step.reduce_scatters, 3 * many);
  EXPECT_EQ(sharded.per_step.all_gathers, 3 * many);
  EXPECT_EQ(sharded.per_step.all_reduces, 0U);
  expect_same_state(sharded, own, "ZeRO-1");
  // It trained: every entry of the kernel moved from its initial value.
  const auto& w = own.state.at("user/kernel");
  ASSERT_EQ(w.size(), 640U);
  for (std::size_t e = 0; e < w.size(); ++e) {
    EXPECT_NE(w[e], 0.1f * std::sin(static_cast<float>(e))) << "user/kernel entry " << e;
  }
}

TEST(Gradients, ReadyHandsTheEntriesSoFarToTheResolverAndAWrongShapeIsRefused) {
  const kdist::RuntimeDeviceMesh mesh({static_cast<std::size_t>(world_size())}, {"batch"},
                                      kdist::list_devices());
  const kdist::RuntimeTensorLayout replicated({kdist::DimAxes()}, mesh);
  using Vector = kdist::DistributedTensor<float*>;
  kdist::layers::Variable<float*> a{"a", Vector::zeros({4}, replicated, "a"),
                                    Vector::zeros({4}, replicated, "a/grad")};
  kdist::layers::Variable<float*> b{"b", Vector::zeros({3}, replicated, "b"),
                                    Vector::zeros({3}, replicated, "b/grad")};
  kdist::Gradients<float> grads;
  grads.add(a, Vector::zeros({4}, replicated, "da"));
  grads.ready();  // no resolver: the entries wait
  EXPECT_EQ(grads.size(), 1U);
  std::vector<std::size_t> handed;
  grads.set_resolver([&](kdist::Gradients<float>& g) {
    handed.push_back(g.size());
    g.clear();
  });
  grads.add(b, Vector::zeros({3}, replicated, "db"));
  grads.ready();
  grads.ready();  // nothing new: not called
  EXPECT_EQ(handed, std::vector<std::size_t>{2});
  EXPECT_TRUE(grads.empty());
  const std::string msg =
      message_of<kdist::ValueError>([&] { grads.add(a, Vector::zeros({3}, replicated, "d")); });
  EXPECT_TRUE(contains(msg, "the gradient of 'a' has shape (3,) but the variable has shape (4,)"))
      << msg;
  EXPECT_TRUE(grads.empty());
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

// small_model()'s weights as compiled for the SGD runs below (before any step).
std::map<std::string, std::vector<float>> sgd_initial_state() {
  auto initial = kdist::test::small_model();
  initial.compile(std::make_shared<kdist::DataParallel>(), kdist::Loss::mean_squared_error,
                  kdist::SGD(0.1), 5);
  return kdist::test::state_of(initial);
}

// SGD moves each weight by its summed gradients: the bfloat16 run's weights differ from the
// float32 run's (from `w0`) by bfloat16's rounding of the sums, within 4% of the largest move,
// and not at all would mean the option did not act.
void expect_within_bfloat16_rounding(const Trained& bf16, const Trained& f32,
                                     const std::map<std::string, std::vector<float>>& w0,
                                     const std::string& what) {
  double largest_move = 0, worst = 0;
  for (const auto& [path, w] : f32.state) {
    for (std::size_t i = 0; i < w.size(); ++i) {
      largest_move = std::max(largest_move, std::abs(double(w[i]) - w0.at(path)[i]));
      worst = std::max(worst, std::abs(double(bf16.state.at(path)[i]) - w[i]));
    }
  }
  EXPECT_GT(largest_move, 1e-3) << what << ": the model did train";
  EXPECT_LT(worst, 0.04 * largest_move) << what;
  EXPECT_GT(worst, 0.0) << what << ": the sums were not taken in bfloat16";
}

// GradientSyncOptions::bfloat16_sums: the same collectives' count and gradients, summed moving
// bfloat16 (kdist::all_reduce_in_bfloat16). With SGD the weights move by the gradients, so each
// weight's move differs from the float32 run's by bfloat16's rounding of the sums (about 2^-7 of
// the magnitudes summed, a few steps compounding it): within 4% of the largest move, and not 0
// (the option did act), bucketed or not.
TEST(GradientSync, Bfloat16SumsTrainWithinBfloat16RoundingOfFloat32) {
  if (world_size() == 1) GTEST_SKIP() << "one process has no sums to take";
  const auto w0 = sgd_initial_state();
  for (const std::size_t bucket : {std::size_t{256} << 10, std::size_t{0}}) {
    const std::string what = "bucket_bytes " + std::to_string(bucket);
    const auto f32 = train_with({.overlap = true, .bucket_bytes = bucket}, kdist::SGD(0.1));
    const auto bf16 = train_with({.overlap = true, .bucket_bytes = bucket, .bfloat16_sums = true},
                                 kdist::SGD(0.1));
    EXPECT_EQ(bf16.per_step.all_reduces, f32.per_step.all_reduces) << what;
    EXPECT_EQ(bf16.per_step.bytes, f32.per_step.bytes) << what;
    expect_within_bfloat16_rounding(bf16, f32, w0, what);
  }
}

TEST(ShardedOptimizerState, TrainsToTheSameWeightsAndState) {
  // ZeRO-1: each process keeps Adam's m and v for its part of each replicated variable only.
  const std::size_t many = world_size() > 1 ? 1 : 0;
  const auto base = train_with({.overlap = true, .bucket_bytes = 0});
  for (const bool overlap : {true, false}) {
    // Every variable sharded: 4 reduce-scatters and 4 all-gathers a step, no all-reduce.
    const auto all =
        train_with({.overlap = overlap, .bucket_bytes = 0, .shard_optimizer_state = true});
    expect_same_state(all, base, overlap ? "all sharded" : "all sharded, overlap off");
    EXPECT_EQ(all.per_step.reduce_scatters, 4 * many);
    EXPECT_EQ(all.per_step.all_gathers, 4 * many);
    EXPECT_EQ(all.per_step.all_reduces, 0U);
  }
  // 1 KiB buckets: d1/kernel (2560 bytes) split in parts; the three small ones in one bucket,
  // all-reduced, each owned whole by one process, and gathered in one all-gather.
  for (const bool overlap : {true, false}) {
    const auto big =
        train_with({.overlap = overlap, .bucket_bytes = 1024, .shard_optimizer_state = true});
    expect_same_state(big, base, overlap ? "d1/kernel split" : "d1/kernel split, overlap off");
    EXPECT_EQ(big.per_step.reduce_scatters, 1 * many);
    EXPECT_EQ(big.per_step.all_gathers, 2 * many);
    EXPECT_EQ(big.per_step.all_reduces, 1 * many);
    EXPECT_EQ(big.per_step.bucketed_gradients, 3 * many);
  }
  // 4 KiB buckets: every variable owned whole, one bucket and one all-gather a step.
  const auto owned =
      train_with({.overlap = true, .bucket_bytes = 4096, .shard_optimizer_state = true});
  expect_same_state(owned, base, "every variable owned whole");
  EXPECT_EQ(owned.per_step.reduce_scatters, 0U);
  EXPECT_EQ(owned.per_step.all_gathers, 1 * many);
  EXPECT_EQ(owned.per_step.all_reduces, 1 * many);
  EXPECT_EQ(owned.per_step.bucketed_gradients, 4 * many);

  // Keras' global_clipnorm: the norm sums each part once (a limit low enough to clip).
  const auto clipped = kdist::Adam(0.01).with_global_clipnorm(0.05);
  const auto clipped_base = train_with({.overlap = true, .bucket_bytes = 0}, clipped);
  // The norm sums the parts separately: the same within rounding, not bit for bit. Split parts
  // (no buckets) and variables owned whole (1 KiB buckets: d1/kernel split, three owned).
  for (const std::size_t bucket : {0, 1024}) {
    const auto clipped_sharded = train_with(
        {.overlap = true, .bucket_bytes = bucket, .shard_optimizer_state = true}, clipped);
    for (const auto& [path, w] : clipped_base.state) {
      EXPECT_LT(kdist::test::worst_relative(clipped_sharded.state.at(path), w), 1e-5)
          << path << ", buckets of " << bucket;
    }
  }
  bool clip_changed_something = false;
  for (const auto& [path, w] : base.state) {
    clip_changed_something |= clipped_base.state.at(path) != w;
  }
  EXPECT_TRUE(clip_changed_something);
}

// bfloat16_sums with ZeRO-1: a split variable's gradient moves as bfloat16 parts (an all-to-all)
// and each part is summed in float32 at its owner and kept float32. Process p contributes
// 1 + p 2^-7 (exact in bfloat16) and 2^-10 more (lost in the rounding): every element of a part
// is then sum_p (1 + p 2^-7), exact in float32 but not in bfloat16 for P > 1 (2 + 2^-7 needs 8
// mantissa bits), so a sum rounded to bfloat16 or a contribution kept in float32 both show.
TEST(ShardedOptimizerState, Bfloat16PartsAreRoundedOnceAndSummedInFloat32) {
  namespace d = kdist::detail;
  const MPI_Comm comm = MPI_COMM_WORLD;
  const std::size_t n = 1000;  // 63 lines: uneven parts for 2 and 4 processes
  const d::StateShard shard = d::make_state_shard(n, sizeof(float), comm, {0});
  const float mine = 1.0F + static_cast<float>(world_rank()) * 0x1p-7F;
  std::vector<float> block(n, mine + 0x1p-10F);
  std::vector<std::uint16_t> scratch(d::bfloat16_part_scratch(shard));
  auto request = d::start_reduce_scatter_part_in_bfloat16(block.data(), shard, scratch);
  block.assign(n, -1.0F);  // read before the start returned: the block is free again
  request.wait();
  d::add_bfloat16_part(block.data(), shard, scratch);
  float want = 0.0F;
  for (int p = 0; p < world_size(); ++p) want += 1.0F + static_cast<float>(p) * 0x1p-7F;
  for (std::size_t i = 0; i < n; ++i) {
    const bool in_part = i >= shard.begin() && i < shard.begin() + shard.size();
    ASSERT_EQ(block[i], in_part ? want : -1.0F) << "element " << i << " on " << world_rank();
  }
  EXPECT_GT(shard.size(), 0U);
}

// The option in training: the same collectives a step, the weights within bfloat16's rounding of
// the float32 run's (SGD: each weight moves by its summed gradient) and not equal to them, split
// parts alone (no buckets) and split parts beside a bucket all-reduced in bfloat16 (1 KiB).
TEST(ShardedOptimizerState, Bfloat16SumsTrainWithinBfloat16RoundingOfFloat32) {
  if (world_size() == 1) GTEST_SKIP() << "one process has no sums to take";
  const auto w0 = sgd_initial_state();
  for (const std::size_t bucket : {std::size_t{0}, std::size_t{1024}}) {
    const std::string what = "bucket_bytes " + std::to_string(bucket);
    const auto f32 = train_with(
        {.overlap = true, .bucket_bytes = bucket, .shard_optimizer_state = true}, kdist::SGD(0.1));
    const auto bf16 = train_with({.overlap = true,
                                  .bucket_bytes = bucket,
                                  .shard_optimizer_state = true,
                                  .bfloat16_sums = true},
                                 kdist::SGD(0.1));
    EXPECT_EQ(bf16.per_step.reduce_scatters, f32.per_step.reduce_scatters) << what;
    EXPECT_GT(bf16.per_step.reduce_scatters, 0U) << what;
    EXPECT_EQ(bf16.per_step.all_gathers, f32.per_step.all_gathers) << what;
    EXPECT_EQ(bf16.per_step.all_reduces, f32.per_step.all_reduces) << what;
    expect_within_bfloat16_rounding(bf16, f32, w0, what);
  }
}

// FSDP over every process: both kernels' rows sharded over the batch axis (d1/kernel 64 rows,
// d2/kernel 10: uneven on 4 and 8), biases replicated; their gradients resolve by reduce-scatters.
std::shared_ptr<const kdist::Distribution> fsdp() {
  kdist::RuntimeDeviceMesh mesh(std::vector<std::size_t>{static_cast<std::size_t>(world_size())},
                                {"batch"}, kdist::list_devices());
  kdist::LayoutMap map(mesh);
  map["d\\d/kernel"] = {"batch", kdist::replicated};
  return std::make_shared<kdist::ModelParallel>(std::move(map), "batch");
}

// A reduce_scatter step started without blocking (an FSDP gradient's), moving bfloat16 under
// bfloat16_sums: process p
// contributes (1 + p 2^-7 + 2^-10) 2^(i mod 5) at element i (the 2^-10 lost in the rounding, the
// rest exact), so each element of this process's part must be exactly sum_p (1 + p 2^-7)
// 2^(i mod 5), in float32 (not exact in bfloat16 for P > 1): a sum rounded again, a contribution
// kept in float32 or an element out of place would all show. Rows (dimension 0, contiguous parts)
// and columns (dimension 1, packed), 10 of them: uneven on 4 and 8 processes. In float32 the
// started step sums as kdist::redistribute's blocking one does.
TEST(GradientSync, FsdpReduceScattersStartedAndMovingBfloat16SumInFloat32) {
  if (world_size() == 1) GTEST_SKIP() << "one process: a pending sum over one is no reduce-scatter";
  // host memory, as the gradient sync starts these (on a GPU build too)
  using Matrix = kdist::DistributedTensor<float**, kdist::RuntimeTensorLayout, Kokkos::HostSpace>;
  namespace d = kdist::detail;
  const std::size_t n = static_cast<std::size_t>(world_size());
  kdist::RuntimeDeviceMesh mesh(std::vector<std::size_t>{n}, {"batch"}, kdist::list_devices());
  const std::size_t rows = 10, cols = 6;
  const auto value = [](std::size_t i, float p, bool rounded) {
    const float base = 1.0F + p * 0x1p-7F + (rounded ? 0.0F : 0x1p-10F);
    return std::ldexp(base, static_cast<int>(i % 5));
  };
  Kokkos::View<float**, Kokkos::HostSpace> summand("summand", rows, cols);
  for (std::size_t r = 0; r < rows; ++r) {
    for (std::size_t c = 0; c < cols; ++c) {
      summand(r, c) = value(r * cols + c, static_cast<float>(world_rank()), false);
    }
  }
  const kdist::RuntimeTensorLayout replicated({kdist::DimAxes(), kdist::DimAxes()}, mesh);
  const Matrix pending = Matrix::from_local(summand, {rows, cols}, replicated, {"batch"});
  for (const std::size_t dim : {0, 1}) {
    kdist::RuntimeTensorLayout target({dim == 0 ? kdist::DimAxes("batch") : kdist::DimAxes(),
                                       dim == 1 ? kdist::DimAxes("batch") : kdist::DimAxes()},
                                      mesh);
    const auto plan = kdist::plan_redistribute(pending, target);
    ASSERT_EQ(plan.steps.size(), 1U);
    ASSERT_EQ(plan.steps[0].kind, kdist::RedistributeStep::Kind::reduce_scatter) << plan;
    Matrix out = Matrix::zeros({rows, cols}, target, "out");
    d::StartedReduceScatter<float> x;
    auto request = d::start_reduce_scatter_in_bfloat16(plan.steps[0], pending, x);
    request.wait();
    d::finish_reduce_scatter_in_bfloat16(x, out.local().data());
    // The same step in float32 (started, into a block of its own) is the blocking one's sum.
    Matrix exact = Matrix::zeros({rows, cols}, target, "exact");
    d::StartedReduceScatter<float> y;
    d::start_reduce_scatter(plan.steps[0], pending, exact.local().data(), y).wait();
    const Matrix blocking = kdist::redistribute(pending, target);
    const auto block = out.block();
    ASSERT_EQ(x.mine, out.local().size());
    for (std::size_t r = 0; r < out.local().extent(0); ++r) {
      for (std::size_t c = 0; c < out.local().extent(1); ++c) {
        const std::size_t i = (block.lo[0] + r) * cols + block.lo[1] + c;
        float want = 0.0F;
        for (std::size_t p = 0; p < n; ++p) want += value(i, static_cast<float>(p), true);
        ASSERT_EQ(out.local()(r, c), want) << "dimension " << dim << ", element " << i;
        ASSERT_EQ(exact.local()(r, c), blocking.local()(r, c)) << "dimension " << dim << ", " << i;
        ASSERT_NE(exact.local()(r, c), want) << "the float32 sum keeps the 2^-10";
      }
    }
  }
}

// FSDP: the kernels' gradients are reduce-scattered by the gradient sync (2 a step), started
// during the backward pass or after it, to the same weights bit for bit on 2 processes, and
// within float32 rounding of DataParallel's; with bfloat16_sums the weights train within
// bfloat16's rounding of the float32 run's (SGD) without equalling them, overlapped or not.
TEST(GradientSync, FsdpGradientsAreReduceScatteredInTheSyncInFloat32OrBfloat16) {
  if (world_size() == 1) GTEST_SKIP() << "one process has no sums to take";
  auto initial = kdist::test::small_model();
  initial.compile(fsdp(), kdist::Loss::mean_squared_error, kdist::SGD(0.1), 5);
  const auto w0 = kdist::test::state_of(initial);
  const auto f32 = train_with({.overlap = true}, kdist::SGD(0.1), fsdp());
  EXPECT_EQ(f32.per_step.reduce_scatters, 2U);
  const auto late = train_with({.overlap = false}, kdist::SGD(0.1), fsdp());
  EXPECT_EQ(late.per_step.reduce_scatters, 2U);
  expect_same_state(late, f32, "fsdp, overlap off");
  const auto data_parallel = train_with({.overlap = true}, kdist::SGD(0.1));
  for (const auto& [path, w] : data_parallel.state) {
    EXPECT_LT(kdist::test::worst_relative(f32.state.at(path), w), 1e-5) << path;
  }
  for (const bool overlap : {true, false}) {
    const auto bf16 =
        train_with({.overlap = overlap, .bfloat16_sums = true}, kdist::SGD(0.1), fsdp());
    EXPECT_EQ(bf16.per_step.reduce_scatters, 2U) << "overlap " << overlap;
    EXPECT_EQ(bf16.per_step.all_reduces, f32.per_step.all_reduces) << "overlap " << overlap;
    expect_within_bfloat16_rounding(bf16, f32, w0, overlap ? "fsdp" : "fsdp, overlap off");
  }
}

// kdist::WeightGather: a float32 weight sharded over "batch" (10 rows: uneven on 4 and 8)
// gathered to replicated moving bfloat16 holds every value rounded to nearest bfloat16, this
// process's own rows too (so every process computes with the same weights); in float32 the exact
// values; a layout that does not change shares the block and rounds nothing.
TEST(WeightGather, Bfloat16GathersRoundEveryValueOnceAndOnlyWhatMoves) {
  using Matrix = kdist::DistributedTensor<float**>;
  const std::size_t n = static_cast<std::size_t>(world_size());
  kdist::RuntimeDeviceMesh mesh(std::vector<std::size_t>{n}, {"batch"}, kdist::list_devices());
  const kdist::RuntimeTensorLayout rows({kdist::DimAxes("batch"), kdist::DimAxes()}, mesh);
  const kdist::RuntimeTensorLayout replicated({kdist::DimAxes(), kdist::DimAxes()}, mesh);
  const auto value = [](std::size_t i, std::size_t j) {
    return 1.0F + static_cast<float>(i * 6 + j) * 0x1p-12F;  // 12 bits: not bfloat16 values
  };
  const Matrix w = kdist::distribute_tensor<float**>(value, {10, 6}, rows);
  kdist::WeightGather<Matrix> gather;
  for (const bool in_bfloat16 : {true, false}) {
    const Matrix g = gather(w, replicated, in_bfloat16);
    ASSERT_EQ(g.layout(), replicated);
    for (std::size_t i = 0; i < 10; ++i) {
      for (std::size_t j = 0; j < 6; ++j) {
        const float want =
            in_bfloat16 && n > 1 ? static_cast<float>(kdist::bfloat16(value(i, j))) : value(i, j);
        ASSERT_EQ(g.local()(i, j), want) << i << ", " << j << " in bfloat16 " << in_bfloat16;
      }
    }
  }
  const Matrix same = gather(w, rows, true);
  EXPECT_EQ(same.local().data(), w.local().data());
}

// A model's weights already bfloat16 values: bfloat16 gathers change nothing, the step is the
// same bit for bit (loss, every weight after the update) - on FSDP rules where every kernel and
// table is gathered (the seeds-like MLP's 2-D Dense; the GPT's 3-D Dense, MultiHeadAttention and
// Embedding) - while from weights that are not, the step differs (the option acted).
TEST(WeightGather, Bfloat16GathersOfBfloat16WeightsGiveTheSameStep) {
  if (world_size() == 1) GTEST_SKIP() << "one process gathers nothing";
  namespace gpt = kdist::test::small_gpt;
  const auto round_weights = [](kdist::Sequential& m) {
    m.for_each_variable([](auto& v) {
      float* data = v.value.local().data();
      for (std::size_t i = 0; i < v.value.local().span(); ++i) {
        data[i] = static_cast<float>(kdist::bfloat16(data[i]));
      }
    });
  };
  const auto step = [&](bool model_is_gpt, bool gathers, bool rounded) {
    auto m = model_is_gpt ? gpt::gpt(std::nullopt) : kdist::test::small_model();
    m.set_gradient_sync({.bfloat16_gathers = gathers});
    m.compile(model_is_gpt ? gpt::distribution(gpt::Rules::fsdp_over_data) : fsdp(),
              model_is_gpt ? kdist::Loss::sparse_categorical_crossentropy
                           : kdist::Loss::mean_squared_error,
              kdist::SGD(0.1), 5);
    if (rounded) round_weights(m);
    const auto fit = model_is_gpt
                         ? m.fit(gpt::tokens(8), {.batch_size = 8, .verbose = 0})
                         : m.fit(kdist::test::small_data(), {.batch_size = 48, .verbose = 0});
    EXPECT_EQ(m.iterations(), 1);
    return std::make_pair(fit.epochs.at(0).loss, kdist::test::state_of(m));
  };
  for (const bool model_is_gpt : {false, true}) {
    const std::string what = model_is_gpt ? "GPT" : "MLP";
    const auto f32 = step(model_is_gpt, false, true);
    const auto bf16 = step(model_is_gpt, true, true);
    EXPECT_EQ(bf16.first, f32.first) << what;
    kdist::test::expect_bitwise_equal(bf16.second, f32.second, what);
    const auto unrounded_f32 = step(model_is_gpt, false, false);
    const auto unrounded_bf16 = step(model_is_gpt, true, false);
    EXPECT_NE(unrounded_bf16.second, unrounded_f32.second) << what;
    EXPECT_NEAR(unrounded_bf16.first, unrounded_f32.first, 1e-3 * unrounded_f32.first) << what;
  }
}

// Training with bfloat16 gathers (FSDP MLP, SGD, 2 epochs): within bfloat16's rounding of the
// float32 run and not equal to it.
TEST(WeightGather, Bfloat16GathersTrainWithinBfloat16RoundingOfFloat32) {
  if (world_size() == 1) GTEST_SKIP() << "one process gathers nothing";
  auto initial = kdist::test::small_model();
  initial.compile(fsdp(), kdist::Loss::mean_squared_error, kdist::SGD(0.1), 5);
  const auto w0 = kdist::test::state_of(initial);
  const auto f32 = train_with({}, kdist::SGD(0.1), fsdp());
  const auto bf16 = train_with({.bfloat16_gathers = true}, kdist::SGD(0.1), fsdp());
  EXPECT_EQ(bf16.per_step.reduce_scatters, f32.per_step.reduce_scatters);
  expect_within_bfloat16_rounding(bf16, f32, w0, "bfloat16 gathers");
}

TEST(ShardedOptimizerState, EachProcessHoldsItsPartOnly) {
  auto m = kdist::test::small_model();
  m.set_gradient_sync({.bucket_bytes = 1024, .shard_optimizer_state = true});
  m.compile(std::make_shared<kdist::DataParallel>(), kdist::Loss::mean_squared_error,
            kdist::Adam(0.01), 5);
  const auto part = m.optimizer_state_part("d1/kernel");
  if (world_size() == 1) {
    EXPECT_FALSE(part);  // no other process to share it with
    EXPECT_FALSE(m.optimizer_state_part("d1/bias"));
  } else {
    // Under the bucket size, owned whole, the owners balancing the bytes: d2/kernel (400 bytes)
    // first to process 0, then d1/bias and d2/bias (40 each) to the processes with the least.
    const std::size_t r = static_cast<std::size_t>(world_rank());
    const auto owned = [&](const char* path, std::size_t elements, std::size_t owner) {
      const auto p = m.optimizer_state_part(path);
      ASSERT_TRUE(p) << path;
      EXPECT_EQ(*p, (std::pair<std::size_t, std::size_t>{0, r == owner ? elements : 0}))
          << path << " on process " << r;
    };
    owned("d2/kernel", 100, 0);
    owned("d1/bias", 10, 1);
    owned("d2/bias", 10, world_size() == 2 ? 1 : 2);
    // 640 elements in parts of 640 / P, in rank order.
    ASSERT_TRUE(part);
    const std::size_t size = 640 / static_cast<std::size_t>(world_size());
    EXPECT_EQ(part->second, size);
    EXPECT_EQ(part->first, static_cast<std::size_t>(world_rank()) * size);
  }
  // Parts in whole 64-byte lines: d2/kernel's 100 floats are 7 lines, 4 + 3 on 2 processes, 2 +
  // 2 + 2 + 1 on 4 (the last one 4 floats).
  m.set_gradient_sync({.bucket_bytes = 0, .shard_optimizer_state = true});
  const auto d2 = m.optimizer_state_part("d2/kernel");
  EXPECT_EQ(d2.has_value(), world_size() > 1);
  if (world_size() == 2) {
    EXPECT_EQ(*d2, (world_rank() == 0 ? std::pair<std::size_t, std::size_t>{0, 64}
                                      : std::pair<std::size_t, std::size_t>{64, 36}));
  } else if (world_size() == 4) {
    const std::size_t r = static_cast<std::size_t>(world_rank());
    EXPECT_EQ(*d2, (std::pair<std::size_t, std::size_t>{32 * r, r == 3 ? 4 : 32}));
  }
  const auto unknown = message_of<kdist::ValueError>([&] { (void)m.optimizer_state_part("d9"); });
  EXPECT_TRUE(contains(unknown, "no variable is at 'd9'")) << unknown;
}

// ZeRO-1 on device memory needs an MPI whose non-blocking collectives take device pointers and
// bfloat16_sums off; the error says which (on GPU builds only do variables live there).
TEST(ShardedOptimizerState, OnDeviceMemoryItNeedsAGpuAwareMpiAndFloat32Sums) {
  using kdist::detail::check_state_sharding_memory;
  EXPECT_NO_THROW(check_state_sharding_memory(false, false, true, "dense/kernel"));  // host
  EXPECT_NO_THROW(check_state_sharding_memory(true, true, false, "dense/kernel"));
  const auto mpi = message_of<kdist::ValueError>(
      [] { check_state_sharding_memory(true, false, false, "dense/kernel"); });
  EXPECT_TRUE(contains(mpi, "on variables in device memory (dense/kernel)")) << mpi;
  EXPECT_TRUE(contains(mpi, "non-blocking collectives take device pointers")) << mpi;
  EXPECT_TRUE(contains(mpi, "KDIST_MPI_GPU_AWARE=1")) << mpi;
  const auto bf16 = message_of<kdist::ValueError>(
      [] { check_state_sharding_memory(true, true, true, "dense/kernel"); });
  EXPECT_TRUE(contains(bf16, "needs bfloat16_sums off")) << bf16;
  EXPECT_TRUE(contains(bf16, "turn it off")) << bf16;
}

TEST(ShardedOptimizerState, OwnersBalanceTheBytes) {
  // The largest first, each to the process with the fewest bytes so far (the lowest on a tie).
  using kdist::detail::assign_owners;
  EXPECT_EQ(assign_owners({40, 400, 40}, 2), (std::vector<int>{1, 0, 1}));
  EXPECT_EQ(assign_owners({40, 400, 40}, 4), (std::vector<int>{1, 0, 2}));
  EXPECT_EQ(assign_owners({10, 30, 20, 20, 10}, 2), (std::vector<int>{0, 0, 1, 1, 0}));
  EXPECT_EQ(assign_owners({5, 5}, 1), (std::vector<int>{0, 0}));
  EXPECT_TRUE(assign_owners({}, 3).empty());
}

TEST(ShardedOptimizerState, SwitchedAfterCompileKeepsTheState) {
  // 3 steps whole, 3 sharded, 3 whole again: the state moves into the parts and back. Sharded
  // with no buckets (every variable split) and 1 KiB buckets (d1/kernel split, three owned).
  for (const std::size_t bucket : {0, 1024}) {
    auto run = [bucket](bool switching) {
      auto m = kdist::test::small_model();
      m.set_gradient_sync({.bucket_bytes = 0});
      m.compile(std::make_shared<kdist::DataParallel>(), kdist::Loss::mean_squared_error,
                kdist::Adam(0.01), 5);
      const auto data = kdist::test::small_data();
      m.fit(data, {.batch_size = 16, .epochs = 1, .verbose = 0});
      if (switching) m.set_gradient_sync({.bucket_bytes = bucket, .shard_optimizer_state = true});
      const auto mid = kdist::test::state_of(m);  // gathered from the parts when sharded
      m.fit(data, {.batch_size = 16, .epochs = 1, .verbose = 0});
      if (switching) m.set_gradient_sync({.bucket_bytes = 0});
      m.fit(data, {.batch_size = 16, .epochs = 1, .verbose = 0});
      return std::pair{mid, Trained{kdist::test::state_of(m), {}}};
    };
    const auto [mid_whole, whole] = run(false);
    const auto [mid_switched, switched] = run(true);
    const std::string what = "buckets of " + std::to_string(bucket);
    kdist::test::expect_bitwise_equal(mid_switched, mid_whole,
                                      "gathered after resharding, " + what);
    expect_same_state(switched, whole, "switched on and off, " + what);
  }
}

class SlotsWrittenAsWholeBlocks : public ::testing::TestWithParam<std::size_t> {};

TEST_P(SlotsWrittenAsWholeBlocks, LandInTheParts) {
  // What a checkpoint's or a Keras file's load does: write whole slots through
  // for_each_variable_with_slots; each process keeps its part (or the whole block of a variable it
  // owns, nothing of one it does not), and the state reads back whole.
  auto m = kdist::test::small_model();
  m.set_gradient_sync({.bucket_bytes = GetParam(), .shard_optimizer_state = true});
  m.compile(std::make_shared<kdist::DataParallel>(), kdist::Loss::mean_squared_error,
            kdist::Adam(0.01), 5);
  float next = 1;
  std::map<std::string, std::vector<float>> written;
  m.for_each_variable_with_slots([&](auto& v, auto& slots) {
    for (std::size_t i = 0; i < slots.size(); ++i) {
      auto& w = written[v.path + "/slot" + std::to_string(i)];
      auto local = slots[i].local();  // the whole tensor: DataParallel replicates variables
      for (std::size_t e = 0; e < local.size(); ++e) {
        w.push_back(next);
        local.data()[e] = next++;
      }
    }
  });
  const auto sharded = kdist::test::state_of(m);
  m.set_gradient_sync({.bucket_bytes = 0});
  const auto whole = kdist::test::state_of(m);
  for (const auto& [path, w] : written) {
    EXPECT_EQ(sharded.at(path), w) << path;
    EXPECT_EQ(whole.at(path), w) << path;
  }
}
// No buckets: every variable split in parts. 1 KiB buckets: d1/kernel split, the others owned.
INSTANTIATE_TEST_SUITE_P(ShardedOptimizerState, SlotsWrittenAsWholeBlocks,
                         ::testing::Values(std::size_t{0}, std::size_t{1024}));

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

  // Environment variable `name` set to `value` for one compile: the message.
  auto env_error = [](const char* name, const char* value) {
    ::setenv(name, value, 1);
    const auto message = compile_error(std::nullopt);
    ::unsetenv(name);
    return message;
  };
  const auto env = env_error("KDIST_GRADIENT_BUCKET_KB", "12x");
  EXPECT_TRUE(contains(env,
                       "KDIST_GRADIENT_BUCKET_KB is '12x', not a whole number of KiB from 0 "
                       "to 1048576"))
      << env;
  EXPECT_TRUE(
      contains(env_error("KDIST_GRADIENT_BUCKET_KB", "-1"), "KDIST_GRADIENT_BUCKET_KB is '-1'"));
  const auto overlap = env_error("KDIST_GRADIENT_OVERLAP", "maybe");
  EXPECT_TRUE(contains(overlap, "KDIST_GRADIENT_OVERLAP is 'maybe', not 0, 1, off or on"))
      << overlap;
  const auto bf16 = env_error("KDIST_GRADIENT_BFLOAT16", "half");
  EXPECT_TRUE(contains(bf16, "KDIST_GRADIENT_BFLOAT16 is 'half', not 0, 1, off or on")) << bf16;
  const auto gathers = env_error("KDIST_GATHER_BFLOAT16", "2");
  EXPECT_TRUE(contains(gathers,
                       "KDIST_GATHER_BFLOAT16 is '2', not 0, 1, off or on (whether FSDP weights "
                       "are all-gathered moving bfloat16)"))
      << gathers;
  const auto shard = env_error("KDIST_SHARD_OPTIMIZER_STATE", "yes");
  EXPECT_TRUE(contains(shard,
                       "KDIST_SHARD_OPTIMIZER_STATE is 'yes', not 0, 1, off or on (whether the "
                       "optimizer state is sharded"))
      << shard;

  // The environment's settings when the program sets none; the program's replace them.
  ::setenv("KDIST_GRADIENT_BUCKET_KB", "2", 1);
  ::setenv("KDIST_GRADIENT_OVERLAP", "off", 1);
  ::setenv("KDIST_SHARD_OPTIMIZER_STATE", "on", 1);
  ::setenv("KDIST_GATHER_BFLOAT16", "1", 1);
  {
    auto m = kdist::test::small_model();
    m.compile(std::make_shared<kdist::DataParallel>(), kdist::Loss::mean_squared_error,
              kdist::Adam(), 1);
    EXPECT_EQ(m.gradient_sync().bucket_bytes, 2048U);
    EXPECT_FALSE(m.gradient_sync().overlap);
    EXPECT_TRUE(m.gradient_sync().shard_optimizer_state);
    EXPECT_TRUE(m.gradient_sync().bfloat16_gathers);
    EXPECT_EQ(m.optimizer_state_part("d1/kernel").has_value(), world_size() > 1);  // 2560 bytes
    EXPECT_EQ(m.optimizer_state_part("d1/bias").has_value(), world_size() > 1);    // owned whole
    m.set_gradient_sync({.overlap = true, .bucket_bytes = 0});
    EXPECT_EQ(m.gradient_sync().bucket_bytes, 0U);
    EXPECT_TRUE(m.gradient_sync().overlap);
    EXPECT_FALSE(m.gradient_sync().shard_optimizer_state);
    EXPECT_FALSE(m.optimizer_state_part("d1/kernel").has_value());
  }
  ::unsetenv("KDIST_GRADIENT_BUCKET_KB");
  ::unsetenv("KDIST_GRADIENT_OVERLAP");
  ::unsetenv("KDIST_SHARD_OPTIMIZER_STATE");
  ::unsetenv("KDIST_GATHER_BFLOAT16");

  if (world_size() == 1) return;
  // Settings that differ between processes: their all-reduces would not match.
  const auto differ = compile_error(kdist::GradientSyncOptions{
      .overlap = world_rank() != 0, .bucket_bytes = world_rank() == 0 ? 0U : 4096U});
  EXPECT_TRUE(
      contains(differ,
               "kdist::GradientSyncOptions differ between processes (bucket_bytes "
               "from 0 to 4096, overlap on and off, shard_optimizer_state off, bfloat16_sums off, "
               "bfloat16_gathers off)"))
      << differ;
  const auto shard_differs = compile_error(
      kdist::GradientSyncOptions{.bucket_bytes = 0, .shard_optimizer_state = world_rank() == 1});
  EXPECT_TRUE(contains(shard_differs,
                       "(bucket_bytes from 0 to 0, overlap on, shard_optimizer_state on and off, "
                       "bfloat16_sums off, bfloat16_gathers off)"))
      << shard_differs;
  const auto bf16_differs = compile_error(
      kdist::GradientSyncOptions{.bucket_bytes = 0, .bfloat16_sums = world_rank() == 1});
  EXPECT_TRUE(contains(
      bf16_differs, "shard_optimizer_state off, bfloat16_sums on and off, bfloat16_gathers off)"))
      << bf16_differs;
  const auto gathers_differ = compile_error(
      kdist::GradientSyncOptions{.bucket_bytes = 0, .bfloat16_gathers = world_rank() == 1});
  EXPECT_TRUE(contains(gathers_differ, "bfloat16_sums off, bfloat16_gathers on and off)"))
      << gathers_differ;
  if (world_rank() == 1) ::setenv("KDIST_GRADIENT_OVERLAP", "0", 1);
  const auto one_env = compile_error(std::nullopt);
  ::unsetenv("KDIST_GRADIENT_OVERLAP");
  EXPECT_TRUE(contains(one_env, "differ between processes")) << one_env;
  EXPECT_TRUE(contains(one_env,
                       "set KDIST_GRADIENT_BUCKET_KB, KDIST_GRADIENT_OVERLAP, "
                       "KDIST_SHARD_OPTIMIZER_STATE, KDIST_GRADIENT_BFLOAT16, "
                       "KDIST_GATHER_BFLOAT16 or Sequential::set_gradient_sync alike on every "
                       "process"))
      << one_env;
}

}  // namespace
