// kdist-mpi-ranks: 1 2
// Keras' LossScaleOptimizer (kdist/nn/loss_scale_optimizer.hpp) in a model's training step, on
// DataParallel and the guide's ModelParallel meshes: with finite gradients the steps are the inner
// optimizer's bit for bit (a power-of-two scale multiplies and divides exactly) and the scale
// doubles after dynamic_growth_steps of them; gradients that overflow on any process skip the
// step on every process (no variable, slot, iteration or dropout key moves) and halve the scale;
// a step asked to run as a device graph says why it runs launched; a checkpoint resumes the scale
// and its counter on another mesh; bad settings are refused alike on every process.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <string>
#include <vector>

#include <kdist/io/checkpoint.hpp>
#include <kdist/nn/loss_scale_optimizer.hpp>
#include <kdist/nn/model.hpp>
#include <kdist/strategy/data_parallel.hpp>
#include <kdist/strategy/model_parallel.hpp>

#include "common/random_normal.hpp"
#include "mpi/model_test_support.hpp"
#include "mpi/mpi_test_util.hpp"

namespace {

using namespace kdist::test;

constexpr std::size_t kRows = 48, kFeatures = 64, kOutputs = 10;

// small_model()'s data (8x8 images, 10 outputs); the targets of rows [huge_from, huge_to) of
// each batch of 8 among the first `huge_batches` batches times 1e6, so that their scaled loss
// gradients overflow a float at a scale of 2^114 or more.
kdist::ArrayDataset<float> data(std::size_t first_row = 0, std::size_t huge_batches = 0) {
  const auto x = kdist::examples::random_normal(kRows * kFeatures, 1);
  auto y = kdist::examples::random_normal(kRows * kOutputs, 2);
  for (std::size_t r = 0; r < huge_batches * 8; ++r) {
    if (r % 8 < 4) continue;  // the second half of each batch: process 1's rows on 2 processes
    for (std::size_t j = 0; j < kOutputs; ++j) y[r * kOutputs + j] *= 1e6F;
  }
  return kdist::ArrayDataset<float>(
      std::vector<float>(x.begin() + std::ptrdiff_t(first_row * kFeatures), x.end()), {8, 8, 1},
      std::vector<float>(y.begin() + std::ptrdiff_t(first_row * kOutputs), y.end()), kOutputs);
}

const kdist::LossScaleOptimizer<float>& scaling_of(const kdist::Sequential& m) {
  const auto* s = m.optimizer().loss_scaling();
  if (s == nullptr) throw std::logic_error("the model's optimizer is not a LossScaleOptimizer");
  return *s;
}

// The same value on every process (min and max over MPI_COMM_WORLD agree).
void expect_agreed(double v, const std::string& what) {
  double lo = v, hi = v;
  MPI_Allreduce(MPI_IN_PLACE, &lo, 1, MPI_DOUBLE, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(MPI_IN_PLACE, &hi, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  EXPECT_EQ(lo, hi) << what << " differs between processes";
}

std::vector<Dist> dists() {
  return {std::make_shared<kdist::DataParallel>(), guide_model_parallel(meshes().back())};
}

TEST(LossScaleOptimizer, FiniteStepsAreTheInnerOptimizersAndTheScaleDoublesAfterTheGrowthSteps) {
  for (const auto& dist : dists()) {
    const std::string what = name_of(*dist);
    auto plain = small_model();
    plain.compile(dist, kdist::Loss::mean_squared_error, kdist::Adam(0.01), 7);
    auto scaled = small_model();
    scaled.compile(dist, kdist::Loss::mean_squared_error,
                   kdist::LossScaleOptimizer(kdist::Adam(0.01), 1024.0, 2), 7);
    EXPECT_EQ(scaled.optimizer().name(), "LossScaleOptimizer");
    EXPECT_EQ(scaled.optimizer().learning_rate(), 0.01);  // the inner optimizer's
    const kdist::FitOptions fit{.batch_size = 16, .epochs = 1, .shuffle = false, .verbose = 0};
    const double plain_loss = plain.fit(data(), fit).epochs.at(0).loss;
    const double scaled_loss = scaled.fit(data(), fit).epochs.at(0).loss;
    EXPECT_EQ(scaled_loss, plain_loss) << what << ": the reported loss is the unscaled one";
    expect_bitwise_equal(state_of(scaled), state_of(plain), what);
    EXPECT_EQ(scaled.iterations(), 3) << what;
    // steps 1 and 2 count to the growth steps (2): the scale doubles; step 3 counts 1 again
    EXPECT_EQ(scaling_of(scaled).loss_scale(), 2048.0) << what;
    EXPECT_EQ(scaling_of(scaled).step_counter(), 1) << what;
  }
}

TEST(LossScaleOptimizer, OverflowOnAnyProcessSkipsTheStepEverywhereAndHalvesTheScale) {
  for (const auto& dist : dists()) {
    const std::string what = name_of(*dist);
    // 6 steps of 8 rows at a scale of 2^120: the first two overflow (huge targets on the rows of
    // process 1 only, when there are 2) and are skipped; the scale halves twice, and the last
    // four step as a model trained on them alone does.
    auto scaled = small_model();
    scaled.compile(dist, kdist::Loss::mean_squared_error,
                   kdist::LossScaleOptimizer(kdist::Adam(0.01), std::ldexp(1.0, 120)), 7);
    const kdist::FitOptions fit{.batch_size = 8, .epochs = 1, .shuffle = false, .verbose = 0};
    scaled.fit(data(0, 2), fit);
    auto reference = small_model();
    reference.compile(dist, kdist::Loss::mean_squared_error, kdist::Adam(0.01), 7);
    reference.fit(data(16), fit);
    EXPECT_EQ(scaled.iterations(), 4) << what << ": two of six steps skipped";
    EXPECT_EQ(scaling_of(scaled).loss_scale(), std::ldexp(1.0, 118)) << what;
    EXPECT_EQ(scaling_of(scaled).step_counter(), 4) << what;
    expect_agreed(double(scaled.iterations()), what + ": iterations");
    expect_agreed(scaling_of(scaled).loss_scale(), what + ": the loss scale");
    expect_bitwise_equal(state_of(scaled), state_of(reference), what);
  }
}

TEST(LossScaleOptimizer, AScaleThatNeverFitsSkipsEveryStepAndLeavesTheModelAsCompiled) {
  auto scaled = small_model();
  scaled.compile(std::make_shared<kdist::DataParallel>(), kdist::Loss::mean_squared_error,
                 kdist::LossScaleOptimizer(kdist::SGD(0.1), 3e38), 7);
  const auto before = state_of(scaled);
  scaled.fit(data(0, 6), {.batch_size = 8, .epochs = 1, .shuffle = false, .verbose = 0});
  expect_bitwise_equal(state_of(scaled), before, "every step skipped");
  EXPECT_EQ(scaled.iterations(), 0);
  EXPECT_EQ(scaling_of(scaled).loss_scale(), double(3e38F) / 64.0);
  EXPECT_EQ(scaling_of(scaled).step_counter(), 0);
}

TEST(LossScaleOptimizer, AStepAskedToRunAsADeviceGraphRunsLaunchedAndSaysWhy) {
  auto graphed = small_model();
  graphed.compile(std::make_shared<kdist::DataParallel>(), kdist::Loss::mean_squared_error,
                  kdist::LossScaleOptimizer(kdist::Adam(0.01), 1024.0), 7);
  graphed.set_device_graph(true);
  auto launched = small_model();
  launched.compile(std::make_shared<kdist::DataParallel>(), kdist::Loss::mean_squared_error,
                   kdist::LossScaleOptimizer(kdist::Adam(0.01), 1024.0), 7);
  const kdist::FitOptions fit{.batch_size = 16, .epochs = 1, .shuffle = false, .verbose = 0};
  graphed.fit(data(), fit);
  launched.fit(data(), fit);
  const auto status = graphed.device_graph();
  EXPECT_TRUE(status.requested);
  EXPECT_EQ(status.replays, 0u);
  EXPECT_TRUE(contains(status.not_captured, "LossScaleOptimizer")) << status.not_captured;
  expect_bitwise_equal(state_of(graphed), state_of(launched), "graph requested");
}

class LossScaleCheckpoint : public TempDirTest {};

TEST_F(LossScaleCheckpoint, TheScaleAndItsCounterResumeOnAnotherMesh) {
  const auto lso = [] { return kdist::LossScaleOptimizer(kdist::Adam(0.01), 1024.0, 2); };
  const kdist::FitOptions fit{.batch_size = 16, .epochs = 1, .shuffle = false, .verbose = 0};
  auto first = small_model();
  first.compile(dists().back(), kdist::Loss::mean_squared_error, lso(), 7);
  first.fit(data(), fit);  // 3 steps: the scale doubled once, its counter at 1
  const std::string path = file("lso.h5");
  kdist::save_checkpoint(first, path, {.epoch = 1});
  auto second = small_model();
  second.compile(dists().front(), kdist::Loss::mean_squared_error, lso(), 7);
  const auto loaded = kdist::load_checkpoint(second, path);
  EXPECT_EQ(loaded.loss_scale, 2048.0);
  EXPECT_EQ(loaded.loss_scale_step_counter, 1);
  EXPECT_EQ(second.loss_scaling()->loss_scale(), 2048.0);
  EXPECT_EQ(second.loss_scaling()->step_counter(), 1);
  EXPECT_EQ(second.iterations(), 3);
  first.fit(data(), fit);
  second.fit(data(), fit);
  EXPECT_EQ(second.loss_scaling()->loss_scale(), first.loss_scaling()->loss_scale());
  EXPECT_EQ(second.loss_scaling()->loss_scale(), 8192.0);  // doubled after steps 4 and 6
  EXPECT_EQ(second.loss_scaling()->step_counter(), first.loss_scaling()->step_counter());
  const auto a = state_of(first), b = state_of(second);
  for (const auto& [k, v] : a) EXPECT_LE(worst_relative(b.at(k), v), 1e-4) << k;

  // what the model's optimizer does not match is refused on every process alike
  auto sgd = small_model();
  sgd.compile(dists().front(), kdist::Loss::mean_squared_error,
              kdist::LossScaleOptimizer(kdist::SGD(0.1, 0.9)), 7);
  const auto inner = message_of<kdist::ValueError>([&] { kdist::load_checkpoint(sgd, path); });
  EXPECT_TRUE(contains(inner, "LossScaleOptimizer wraps Adam but the model's wraps SGD")) << inner;
  expect_same_on_every_process(inner);
  auto plain = small_model();
  plain.compile(dists().front(), kdist::Loss::mean_squared_error, kdist::Adam(0.01), 7);
  const auto name = message_of<kdist::ValueError>([&] { kdist::load_checkpoint(plain, path); });
  EXPECT_TRUE(contains(name,
                       "saved with optimizer LossScaleOptimizer but the model is compiled "
                       "with Adam"))
      << name;
}

TEST(LossScaleOptimizerErrors, BadSettingsAreRefusedAlikeOnEveryProcess) {
  for (const double bad : {0.0, -1.0, std::nan(""), HUGE_VAL, 1e39}) {
    const auto msg =
        message_of<kdist::ValueError>([&] { kdist::LossScaleOptimizer(kdist::SGD(), bad); });
    EXPECT_TRUE(contains(msg, "initial_scale")) << msg;
    EXPECT_TRUE(contains(msg, "finite number > 0")) << msg;
    expect_same_on_every_process(msg);
  }
  const auto growth =
      message_of<kdist::ValueError>([] { kdist::LossScaleOptimizer(kdist::SGD(), 1024.0, 0); });
  EXPECT_TRUE(contains(growth, "dynamic_growth_steps is 0")) << growth;
  const kdist::Sequential::Optimizer wrapped = kdist::LossScaleOptimizer(kdist::Adam());
  const auto twice =
      message_of<kdist::ValueError>([&] { (void)kdist::LossScaleOptimizer<float>(wrapped); });
  EXPECT_TRUE(contains(twice, "scale the loss twice")) << twice;
  expect_same_on_every_process(twice);
}

}  // namespace
