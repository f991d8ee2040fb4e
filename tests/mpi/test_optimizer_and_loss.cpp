// kdist-mpi-ranks: 1 2
// Optimizers and losses are open sets (issue 19): an optimizer and a loss written here, not in the
// library, train through kdist::Sequential on every mesh; the optimizer only declares its slot,
// and the model creates it, a checkpoint saves and restores it, a Keras weights file holds it.
#include <gtest/gtest.h>
#include <hdf5.h>
#include <mpi.h>

#include <cmath>
#include <span>
#include <string>
#include <vector>

#include <kdist/io/checkpoint.hpp>
#include <kdist/io/keras_weights.hpp>
#include <kdist/nn/loss.hpp>
#include <kdist/nn/model.hpp>
#include <kdist/nn/optimizer.hpp>
#include <kdist/strategy/data_parallel.hpp>

#include "mpi/model_test_support.hpp"
#include "mpi/mpi_test_util.hpp"

namespace {

using namespace kdist::test;

// Heavy-ball momentum with one slot: v = mu v + g, p -= lr v. The same trajectory as Keras' SGD
// with momentum (whose velocity is -lr v), rounded otherwise. It counts no steps itself.
struct HeavyBall {
  double lr = 0.05;
  double mu = 0.9;
  std::string name() const { return "HeavyBall"; }
  kdist::OptimizerSlots slots() const { return {{"velocity"}}; }
  double learning_rate() const { return lr; }
  void set_learning_rate(double r) { lr = r; }
  void update_step(const kdist::OptimizerView<float>& p, const kdist::OptimizerView<const float>& g,
                   std::span<const kdist::OptimizerView<float>> state) const {
    const auto v = state[0];
    const float rate = static_cast<float>(lr), m = static_cast<float>(mu);
    Kokkos::parallel_for(
        "HeavyBall", p.size(), KOKKOS_LAMBDA(const std::size_t i) {
          v(i) = m * v(i) + g(i);
          p(i) -= rate * v(i);
        });
  }
};
static_assert(kdist::Optimizer<HeavyBall>);

// SGD with decoupled weight decay, no slots: p -= lr (g + wd p).
struct SGDW {
  double lr = 0.05;
  double wd = 0.0;
  std::string name() const { return "SGDW"; }
  kdist::OptimizerSlots slots() const { return {}; }
  void update_step(const kdist::OptimizerView<float>& p, const kdist::OptimizerView<const float>& g,
                   std::span<const kdist::OptimizerView<float>>) const {
    const float rate = static_cast<float>(lr), decay = static_cast<float>(wd);
    Kokkos::parallel_for(
        "SGDW", p.size(),
        KOKKOS_LAMBDA(const std::size_t i) { p(i) -= rate * (g(i) + decay * p(i)); });
  }
};
static_assert(kdist::Optimizer<SGDW>);

// Keras' mean squared error written by hand, dense targets only (labels come one-hot).
struct SquaredError {
  std::string name() const { return "squared_error_by_hand"; }
  double sum(const kdist::LossInput<float>& p, const kdist::LossTargets<float>& t,
             const kdist::LossGradient<float>& g, float scale) const {
    const auto cols = static_cast<int>(p.extent(1));
    double total = 0;
    Kokkos::parallel_reduce(
        "SquaredError", p.extent(0),
        KOKKOS_LAMBDA(const std::size_t i, double& acc) {
          for (int j = 0; j < cols; ++j) {
            const float d = p(i, j) - t(i, j);
            acc += static_cast<double>(d) * d / cols;
            g(i, j) = 2.0f * d / static_cast<float>(cols) * scale;
          }
        },
        total);
    return total;
  }
};
static_assert(kdist::LossFunction<SquaredError>);
static_assert(!kdist::LossFunction<HeavyBall> && !kdist::Optimizer<SquaredError>);

const kdist::FitOptions two_epochs{.batch_size = 16, .epochs = 2, .shuffle = true, .verbose = 0};

// Each epoch's loss of `m` on small_data().
std::vector<double> losses_of(kdist::Sequential& m, const kdist::FitOptions& options = two_epochs) {
  std::vector<double> out;
  for (const auto& e : m.fit(small_data(), options).epochs) out.push_back(e.loss);
  return out;
}

class OpenSets : public TempDirTest {};

TEST_F(OpenSets, AUserOptimizerWithOneSlotTrainsLikeKerasSGDWithMomentumOnEveryMesh) {
  for (const auto& dist : distributions()) {
    auto keras = small_model();
    keras.compile(dist, kdist::Loss::mean_squared_error, kdist::SGD(0.05, 0.9), 3);
    auto user = small_model();
    user.compile(dist, kdist::Loss::mean_squared_error, HeavyBall{0.05, 0.9}, 3);
    const auto want = losses_of(keras);
    const auto got = losses_of(user);
    const std::string what = name_of(*dist);
    ASSERT_EQ(got.size(), want.size());
    for (std::size_t e = 0; e < got.size(); ++e) {
      EXPECT_NEAR(got[e], want[e], 1e-5 * std::abs(want[e])) << what << " epoch " << e;
    }
    EXPECT_LT(got.back(), got.front()) << what;
    EXPECT_EQ(user.iterations(), 6) << what;  // counted by AnyOptimizer: 48 / 16 * 2
    ASSERT_NE(user.optimizer().get_if<HeavyBall>(), nullptr);
    EXPECT_EQ(user.optimizer().name(), "HeavyBall");
    EXPECT_EQ(user.optimizer().slot_count(), 1u);
    // the declared slot is there, shaped like its variable, and holds the momentum
    user.for_each_variable_with_slots([&](auto& v, auto& s) {
      ASSERT_EQ(s.size(), 1u) << v.path;
      EXPECT_EQ(s[0].shape(), v.value.shape()) << v.path;
    });
  }
}

TEST_F(OpenSets, AUserOptimizerWithoutSlotsTrainsAndItsHyperparameterActs) {
  const auto dist = distributions().back();
  auto sgd = small_model();
  sgd.compile(dist, kdist::Loss::mean_squared_error, kdist::SGD(0.01), 5);
  auto plain = small_model();
  plain.compile(dist, kdist::Loss::mean_squared_error, SGDW{0.01, 0.0}, 5);
  auto decayed = small_model();
  decayed.compile(dist, kdist::Loss::mean_squared_error, SGDW{0.01, 2.0}, 5);
  const auto want = losses_of(sgd);
  const auto got = losses_of(plain);
  for (std::size_t e = 0; e < got.size(); ++e) EXPECT_DOUBLE_EQ(got[e], want[e]) << e;
  (void)losses_of(decayed);
  // weight decay shrinks the kernels
  const auto plain_state = state_of(plain);
  const auto decayed_state = state_of(decayed);
  double norm_plain = 0, norm_decayed = 0;
  for (float x : plain_state.at("d1/kernel")) norm_plain += double(x) * x;
  for (float x : decayed_state.at("d1/kernel")) norm_decayed += double(x) * x;
  EXPECT_LT(norm_decayed, 0.9 * norm_plain);
  EXPECT_EQ(plain_state.size(), 4u);  // variables only: no slot declared, none created
}

TEST_F(OpenSets, AUserOptimizersSlotIsSavedInACheckpointAndRestoredOnAnotherMesh) {
  const auto dists = distributions();
  const auto path = file("heavy_ball.h5");
  auto first = small_model();
  first.compile(dists.back(), kdist::Loss::mean_squared_error, HeavyBall{}, 7);
  (void)losses_of(first, {.batch_size = 16, .epochs = 1, .shuffle = true, .verbose = 0});
  const auto want = state_of(first);
  ASSERT_EQ(want.count("d1/kernel/slot0"), 1u);
  kdist::save_checkpoint(first, path, {.epoch = 1});
  if (world_rank() == 0) {
    namespace h5 = kdist::detail::hdf5;
    hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
    ASSERT_GE(f, 0);
    hid_t opt = H5Gopen2(f, "/optimizer", H5P_DEFAULT);
    std::string name;
    std::vector<std::string> slot_names;
    std::uint64_t slots = 0;
    double lr = 0;
    EXPECT_TRUE(h5::read_string(opt, "name", name));
    EXPECT_TRUE(h5::read_strings(opt, "slot_names", slot_names));
    EXPECT_TRUE(h5::read_scalar(opt, "slot_count", slots));
    EXPECT_TRUE(h5::read_scalar(opt, "learning_rate", lr));
    EXPECT_EQ(name, "HeavyBall");
    EXPECT_EQ(slot_names, std::vector<std::string>{"velocity"});
    EXPECT_EQ(slots, 1u);
    EXPECT_EQ(lr, 0.05);
    EXPECT_TRUE(h5::path_exists(f, "optimizer/d1/kernel/slot0"));
    H5Gclose(opt);
    H5Fclose(f);
  }
  // restored on another mesh: the slot bit for bit, the step counter, and the same next epoch
  auto second = small_model();
  second.compile(dists.front(), kdist::Loss::mean_squared_error, HeavyBall{}, 7);
  const auto loaded = kdist::load_checkpoint(second, path);
  EXPECT_EQ(loaded.optimizer, "HeavyBall");
  EXPECT_EQ(second.iterations(), 3);
  expect_bitwise_equal(state_of(second), want, "HeavyBall");
  const kdist::FitOptions next{
      .batch_size = 16, .epochs = 2, .initial_epoch = 1, .shuffle = true, .verbose = 0};
  auto forgetful = small_model();  // the weights without the slot: another next epoch
  forgetful.compile(dists.front(), kdist::Loss::mean_squared_error, HeavyBall{}, 7);
  (void)kdist::load_checkpoint(forgetful, path);
  forgetful.for_each_variable_with_slots(
      [](auto&, auto& s) { Kokkos::deep_copy(s[0].local(), 0); });
  const auto resumed = losses_of(first, next);
  const auto restored = losses_of(second, next);
  const auto without = losses_of(forgetful, next);
  EXPECT_NEAR(restored.at(0), resumed.at(0), 1e-5 * std::abs(resumed.at(0)));
  EXPECT_GT(std::abs(without.at(0) - resumed.at(0)), 1e-4 * std::abs(resumed.at(0)));
  // and another optimizer's checkpoint is refused, naming both
  auto adam = small_model();
  adam.compile(dists.front(), kdist::Loss::mean_squared_error, kdist::Adam(), 7);
  const auto msg = message_of<kdist::ValueError>([&] { kdist::load_checkpoint(adam, path); });
  EXPECT_TRUE(contains(msg, "saved with optimizer HeavyBall but the model is compiled with Adam"))
      << msg;
}

TEST_F(OpenSets, AUserOptimizersSlotGoesThroughAKerasWeightsFile) {
  const auto path = file("heavy_ball.weights.h5");
  auto m = small_model();
  m.compile(std::make_shared<kdist::DataParallel>(), kdist::Loss::mean_squared_error,
            HeavyBall{0.02, 0.8}, 2);
  (void)losses_of(m);
  kdist::save_keras_weights(m, path);
  auto loaded = small_model();
  loaded.compile(distributions().back(), kdist::Loss::mean_squared_error, HeavyBall{0.5, 0.8}, 9);
  const auto r = kdist::load_keras_weights(loaded, path);
  EXPECT_TRUE(r.optimizer_loaded) << r.optimizer_note;
  EXPECT_EQ(loaded.iterations(), 6);
  EXPECT_FLOAT_EQ(static_cast<float>(loaded.optimizer().learning_rate()), 0.02f);
  expect_bitwise_equal(state_of(loaded), state_of(m), "HeavyBall, Keras file");
}

TEST_F(OpenSets, AUserLossTrainsAsTheLibrarysOnEveryMesh) {
  for (const auto& dist : distributions()) {
    auto library = small_model();
    library.compile(dist, kdist::Loss::mean_squared_error, kdist::Adam(0.01), 11);
    auto user = small_model();
    user.compile(dist, SquaredError{}, kdist::Adam(0.01), 11);
    EXPECT_EQ(user.loss().name(), "squared_error_by_hand");
    EXPECT_EQ(library.loss().name(), "mean_squared_error");
    const auto want = losses_of(library);
    const auto got = losses_of(user);
    for (std::size_t e = 0; e < got.size(); ++e) {
      EXPECT_NEAR(got[e], want[e], 1e-5 * std::abs(want[e])) << name_of(*dist) << " epoch " << e;
    }
    EXPECT_LT(got.back(), got.front());
  }
}

// Integer labels reach a loss without a labels overload one-hot: the same as Keras' MSE on them.
TEST_F(OpenSets, AUserLossSeesIntegerLabelsOneHot) {
  const auto x = kdist::examples::random_normal(32 * 64, 3);
  std::vector<std::int32_t> labels(32);
  for (std::size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<std::int32_t>(i % 10);
  const kdist::ArrayDataset<float> data(std::vector<float>(x.begin(), x.end()), {8, 8, 1}, labels);
  const auto dist = distributions().back();
  auto library = small_model();
  library.compile(dist, kdist::Loss::mean_squared_error, kdist::SGD(0.1), 1);
  auto user = small_model();
  user.compile(dist, SquaredError{}, kdist::SGD(0.1), 1);
  const kdist::FitOptions fit{.batch_size = 8, .epochs = 2, .shuffle = false, .verbose = 0};
  const auto want = library.fit(data, fit).epochs;
  const auto got = user.fit(data, fit).epochs;
  for (std::size_t e = 0; e < got.size(); ++e) {
    EXPECT_NEAR(got[e].loss, want[e].loss, 1e-5 * std::abs(want[e].loss)) << e;
    EXPECT_EQ(got[e].accuracy, want[e].accuracy) << e;
  }
}

}  // namespace
