// kdist-mpi-ranks: 1 2
// Metrics kept on the device (Keras' steps_per_execution, issue 36): fit reads the loss and the
// accuracy after every n steps instead of after each, and trains exactly as before; the step's
// count lives in device memory too (detail::DeviceIterations), and the kernels that depend on it
// (dropout's masks, Adam's bias correction) read it there, so a copied model or a changed count
// trains as the optimizer's count says.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include <kdist/nn/model.hpp>
#include <kdist/strategy/data_parallel.hpp>

#include "common/gpt_model.hpp"
#include "common/random_normal.hpp"
#include "mpi/model_test_support.hpp"
#include "mpi/mpi_test_util.hpp"
#include "mpi/tiny_gpt_config.hpp"

namespace {

using kdist::test::world_rank;

//! The seeds' model (dropout, Adam), data parallel, after two epochs of 6 steps of `data`.
struct Fitted {
  kdist::History history;
  std::vector<float> weights;
};
Fitted fit_seeds(std::size_t steps_per_execution, const kdist::ArrayDataset<float>& data) {
  auto model = kdist::examples::seeds_model();
  model.compile(std::make_shared<kdist::DataParallel>(), kdist::Loss::categorical_crossentropy,
                kdist::Adam(0.001), 7);
  model.set_steps_per_execution(steps_per_execution);
  Fitted out;
  out.history = model.fit(
      data, {.batch_size = 16, .epochs = 2, .shuffle = true, .steps_per_epoch = 6, .verbose = 0});
  out.weights = kdist::test::local_weights(model);
  return out;
}

TEST(MetricsOnDevice, FitTrainsTheSameAndReportsTheSameMetricsWhateverStepsPerExecution) {
  for (const auto& data : {kdist::test::labeled_images(128, 1, 7), kdist::examples::seeds_data()}) {
    const Fitted every = fit_seeds(1, data);
    for (std::size_t n : {4U, 6U, 100U}) {  // 6 steps: reads after 4 and 6; one read; one read
      const Fitted kept = fit_seeds(n, data);
      ASSERT_EQ(kept.history.epochs.size(), 2U);
      for (std::size_t e = 0; e < 2; ++e) {
        const auto& a = kept.history.epochs[e];
        const auto& b = every.history.epochs[e];
        EXPECT_EQ(a.examples, b.examples) << "steps_per_execution " << n;
        EXPECT_NEAR(a.loss, b.loss, 1e-9 * std::abs(b.loss)) << "steps_per_execution " << n;
        EXPECT_NEAR(a.accuracy, b.accuracy, 1e-12) << "steps_per_execution " << n;
        EXPECT_EQ(a.has_accuracy, data.has_labels());
        EXPECT_EQ(b.has_accuracy, data.has_labels());
        EXPECT_NE(a.loss, 0.0);
      }
      EXPECT_EQ(kept.weights, every.weights) << "steps_per_execution " << n;
    }
  }
}

TEST(MetricsOnDevice, ZeroStepsPerExecutionIsAValueError) {
  auto model = kdist::examples::seeds_model();
  try {
    model.set_steps_per_execution(0);
    FAIL() << "no error";
  } catch (const kdist::ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("give at least 1"), std::string::npos) << e.what();
  }
}

TEST(MetricsOnDevice, ALabelOutOfRangeEndsFitOnEveryProcess) {
  // 64 examples, one label out of range on the second batch (step 1), the metrics kept on the
  // device: a ValueError on every process, naming the label, its position and its step.
  std::vector<std::int32_t> y(64, 3);
  y[40] = 12;
  const kdist::ArrayDataset<float> data(kdist::examples::random_normal(64 * 28 * 28, 1),
                                        {28, 28, 1}, std::move(y));
  auto model = kdist::examples::seeds_model();
  model.compile(std::make_shared<kdist::DataParallel>(), kdist::Loss::categorical_crossentropy,
                kdist::Adam(0.001), 7);
  model.set_steps_per_execution(4);
  try {
    model.fit(data, {.batch_size = 32, .epochs = 1, .shuffle = false, .verbose = 0});
    FAIL() << "no error";
  } catch (const kdist::ValueError& e) {
    // Found by the process holding row 40 (its rows add nothing to that step), read with the
    // metrics after the epoch's last step, and every process ends with that process's message.
    EXPECT_NE(std::string(e.what()).find("the label 12 at flat index"), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("(step 1)"), std::string::npos) << e.what();
  }
}

TEST(MetricsOnDevice, ALabelOutOfRangeOnOneProcessEndsTheStepOnEveryProcessBeforeTheUpdate) {
  // The metrics read every step: the label 12 at row 40 (step 1) is on one process of two; that
  // process's loss fails, and every process ends in that step with its message, the weights
  // those of step 0 (the failed step updates nothing), none left waiting in a collective.
  std::vector<std::int32_t> y(64, 3);
  y[40] = 12;
  const auto x = kdist::examples::random_normal(64 * 28 * 28, 1);
  const auto compiled = [] {
    auto model = kdist::examples::seeds_model();
    model.compile(std::make_shared<kdist::DataParallel>(), kdist::Loss::categorical_crossentropy,
                  kdist::Adam(0.001), 7);
    return model;
  };
  auto model = compiled();
  try {
    model.fit(kdist::ArrayDataset<float>(x, {28, 28, 1}, y),
              {.batch_size = 32, .epochs = 1, .shuffle = false, .verbose = 0});
    FAIL() << "no error";
  } catch (const kdist::ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("label 12 at row"), std::string::npos) << e.what();
  }
  auto first_step = compiled();  // the first batch alone
  first_step.fit(
      kdist::ArrayDataset<float>(std::vector<float>(x.begin(), x.begin() + 32 * 28 * 28),
                                 {28, 28, 1}, std::vector<std::int32_t>(y.begin(), y.begin() + 32)),
      {.batch_size = 32, .epochs = 1, .shuffle = false, .verbose = 0});
  EXPECT_EQ(kdist::test::local_weights(model), kdist::test::local_weights(first_step));
  EXPECT_EQ(model.optimizer().iterations(), 1);
  // evaluate ends every process the same way.
  try {
    (void)model.evaluate(kdist::ArrayDataset<float>(x, {28, 28, 1}, y), {.batch_size = 32});
    FAIL() << "no error from evaluate";
  } catch (const kdist::ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("label 12 at row"), std::string::npos) << e.what();
  }
}

TEST(MetricsOnDevice, LossesKeepTheirSumOnTheDeviceAsTheyReturnIt) {
  Kokkos::View<float**, Kokkos::LayoutRight> z("z", 5, 3), g1("g1", 5, 3), g2("g2", 5, 3);
  Kokkos::View<std::int32_t*, Kokkos::LayoutRight> labels("labels", 5);
  auto zh = Kokkos::create_mirror_view(z);
  auto lh = Kokkos::create_mirror_view(labels);
  for (std::size_t i = 0; i < 5; ++i) {
    lh(i) = static_cast<std::int32_t>((i * 2) % 3);
    for (std::size_t j = 0; j < 3; ++j) zh(i, j) = 0.1f * static_cast<float>(i * 3 + j % 2);
  }
  Kokkos::deep_copy(z, zh);
  Kokkos::deep_copy(labels, lh);
  const kdist::LossLabels l = labels;
  kdist::LossSum out("out"), correct("correct");
  const double sum = kdist::ops::softmax_cross_entropy(z, l, g1, 0.5f);
  kdist::ops::softmax_cross_entropy_into(z, l, g2, 0.5f, out);
  kdist::ops::count_correct_into(z, l, correct);
  double host_sum = 0, host_correct = 0;
  Kokkos::deep_copy(host_sum, out);
  Kokkos::deep_copy(host_correct, correct);
  EXPECT_DOUBLE_EQ(host_sum, sum);
  EXPECT_DOUBLE_EQ(host_correct, static_cast<double>(kdist::ops::count_correct(z, l)));
  const auto a = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), g1);
  const auto b = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), g2);
  for (std::size_t i = 0; i < 5; ++i) {
    for (std::size_t j = 0; j < 3; ++j) EXPECT_EQ(a(i, j), b(i, j));
  }
}

TEST(MetricsOnDevice, DeviceChecksKeepTheFirstFailureWithItsStepAndTheFoldAddsUp) {
  Kokkos::View<std::int32_t*, Kokkos::LayoutRight> labels("labels", 4);
  auto lh = Kokkos::create_mirror_view(labels);
  lh(0) = 1, lh(1) = 2, lh(2) = -3, lh(3) = 9;
  Kokkos::deep_copy(labels, lh);
  Kokkos::View<std::int64_t, Kokkos::LayoutRight> first("first"), step("step");
  kdist::ops::first_invalid_label_into(labels, 3, first);
  std::int64_t f = 0;
  Kokkos::deep_copy(f, first);
  EXPECT_EQ(f, 2);
  kdist::DeviceChecks checks;
  EXPECT_FALSE(checks.pending());
  EXPECT_EQ(checks.take(), "");
  Kokkos::deep_copy(step, 17);
  const kdist::LossLabels l = labels;
  checks.record_first("the label", 3, first, l, step.data());
  Kokkos::deep_copy(step, 18);
  checks.record_first("the label", 3, first, l, step.data());  // the first failure stays
  EXPECT_TRUE(checks.pending());
  EXPECT_EQ(checks.take(),
            "kdist: the label -3 at flat index 2 of this process's block (step 17) is out of "
            "range [0, 3); give class indices / token ids below 3 (found on the device, when the "
            "step's metrics were read)");
  EXPECT_EQ(checks.take(), "");  // read once
  // Every label in range: the largest int64, nothing recorded.
  lh(2) = 0, lh(3) = 2;
  Kokkos::deep_copy(labels, lh);
  kdist::ops::first_invalid_label_into(labels, 3, first);
  Kokkos::deep_copy(f, first);
  EXPECT_EQ(f, std::numeric_limits<std::int64_t>::max());
  checks.record_first("the label", 3, first, l, step.data());
  EXPECT_EQ(checks.take(), "");

  kdist::detail::DeviceTotals totals("totals");
  kdist::LossSum loss("loss"), correct("correct");
  Kokkos::deep_copy(loss, 1.5);
  Kokkos::deep_copy(correct, 2.0);
  for (int s = 0; s < 2; ++s) kdist::detail::fold_step_metrics(totals, loss, 2.0, correct);
  const auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), totals);
  EXPECT_DOUBLE_EQ(h(0), 6.0);
  EXPECT_DOUBLE_EQ(h(1), 4.0);
}

//! The example GPT (dropout, AdamW with global_clipnorm, the vocabulary-parallel loss) after an
//! epoch of 6 steps with `steps_per_execution`; `bad_token` / `bad_target` put an id out of range.
struct GptRun {
  kdist::History history;
  std::vector<float> weights;
};
GptRun fit_gpt(std::size_t steps_per_execution, bool bad_token = false, bool bad_target = false) {
  const kdist::examples::GptConfig config = kdist::test::tiny_gpt_config(1);
  auto model = kdist::examples::make_gpt<float>(config);
  model.compile(std::make_shared<kdist::DataParallel>(),
                kdist::Loss::sparse_categorical_crossentropy,
                kdist::AdamW(0.001).with_global_clipnorm(1.0), 3,
                {.steps_per_execution = steps_per_execution, .device_graph = {}});
  std::vector<float> x(48 * config.sequence), y(48 * config.sequence);
  for (std::size_t i = 0; i < x.size(); ++i) {
    x[i] = static_cast<float>((7 * i + 3) % config.vocab);
    y[i] = static_cast<float>((7 * i + 10) % config.vocab);
  }
  if (bad_token) x[20 * config.sequence + 5] = 40.0f;
  if (bad_target) y[20 * config.sequence + 5] = 33.0f;
  const kdist::ArrayDataset<float> data(std::move(x), {config.sequence}, std::move(y),
                                        config.sequence);
  GptRun r;
  r.history = model.fit(data, {.batch_size = 8, .epochs = 1, .shuffle = false, .verbose = 0});
  r.weights = kdist::test::local_weights(model);
  return r;
}

TEST(MetricsOnDevice, TheGptTrainsTheSameWithItsLossAndChecksOnTheDevice) {
  const GptRun every = fit_gpt(1);
  const GptRun kept = fit_gpt(4);
  EXPECT_EQ(kept.weights, every.weights);
  ASSERT_EQ(kept.history.epochs.size(), 1U);
  EXPECT_EQ(kept.history.epochs[0].examples, every.history.epochs[0].examples);
  EXPECT_NEAR(kept.history.epochs[0].loss, every.history.epochs[0].loss,
              1e-9 * every.history.epochs[0].loss);
  EXPECT_FALSE(kept.history.epochs[0].has_accuracy);
  // Ids out of range: the step with the metrics on the host stops at once; kept on the device,
  // fit ends at the next read (after step 4 here) on every process, the id named.
  for (const std::size_t n : {1U, 4U}) {
    try {
      (void)fit_gpt(n, true, false);
      ADD_FAILURE() << "no error for a token id out of range, steps_per_execution " << n;
    } catch (const kdist::ValueError& e) {
      EXPECT_NE(std::string(e.what()).find("40"), std::string::npos) << e.what();
    }
    try {
      (void)fit_gpt(n, false, true);
      ADD_FAILURE() << "no error for a target out of range, steps_per_execution " << n;
    } catch (const kdist::ValueError& e) {
      EXPECT_NE(std::string(e.what()).find("33"), std::string::npos) << e.what();
    }
  }
}

TEST(DeviceIterations, ACountSetBetweenStepsReachesTheKernels) {
  // Dropout's masks follow the optimizer's count as the kernels read it from the device: two steps,
  // the count set to 40 (as a restored checkpoint does), a third step draws step 40's mask, not
  // step 2's (SGD: the update does not depend on the count, only the mask does); and training is
  // deterministic.
  const auto data = kdist::test::labeled_images(128, 1, 7);
  const std::size_t rows = 32 / static_cast<std::size_t>(kdist::test::world_size());
  kdist::detail::BatchLoader<float, 4> loader(data, rows);
  std::vector<std::size_t> idx(rows);
  for (std::size_t i = 0; i < rows; ++i) {
    idx[i] = static_cast<std::size_t>(world_rank()) * rows + i;
  }
  const auto x = loader.load_examples(idx);
  const auto y = loader.load_labels(idx);
  const auto three_steps = [&](std::optional<std::int64_t> count_before_the_third) {
    auto model = kdist::examples::seeds_model();
    model.compile(std::make_shared<kdist::DataParallel>(), kdist::Loss::categorical_crossentropy,
                  kdist::SGD(0.1), 3);
    model.train_step(x, y, 32);
    model.train_step(x, y, 32);
    if (count_before_the_third) model.set_iterations(*count_before_the_third);
    model.train_step(x, y, 32);
    EXPECT_EQ(model.iterations(), count_before_the_third.value_or(2) + 1);
    return kdist::test::local_weights(model);
  };
  const auto set = three_steps(40);
  EXPECT_EQ(set, three_steps(40));
  EXPECT_NE(set, three_steps(std::nullopt));
  EXPECT_EQ(three_steps(2), three_steps(std::nullopt));
}

}  // namespace
