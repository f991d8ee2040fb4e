// kdist-mpi-ranks: 1 2 4
// Keras' global_clipnorm across shards (kdist/nn/train/gradient_clipping.hpp): the global norm of
// distributed tensors counts every element once whether its block is sharded or replicated, and
// a model trained with global_clipnorm (SGD with momentum, AdamW with a bias excluded from weight
// decay) on every mesh of the world's size, DataParallel and ModelParallel with sharded kernels,
// gives the losses and weights of a single-process reference written here in double from Keras'
// formulas (Dense relu -> Dense linear, mean squared error), clipping at every step.
#include <gtest/gtest.h>
#include <hdf5.h>
#include <mpi.h>

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include <kdist/io/checkpoint.hpp>
#include <kdist/io/keras_weights.hpp>
#include <kdist/nn/model.hpp>
#include <kdist/nn/train/gradient_clipping.hpp>
#include <kdist/strategy/data_parallel.hpp>
#include <kdist/strategy/layout_map.hpp>
#include <kdist/strategy/model_parallel.hpp>
#include <kdist/tensor/distribute_tensor.hpp>

#include "common/random_normal.hpp"
#include "mpi/model_test_support.hpp"
#include "mpi/mpi_test_util.hpp"

namespace {

using namespace kdist::test;

constexpr std::size_t kIn = 12, kHidden = 10, kOut = 4, kExamples = 48, kBatch = 16;

// Dense(10, relu) "d1" -> Dense(4, linear) "d2" on 12 features: the names the support's layout
// rules shard (d1's kernel by columns or rows, d2's kernel by rows, biases by their units).
kdist::Sequential mlp() {
  std::vector<kdist::Sequential::Layer> l;
  l.emplace_back(kdist::Sequential::Dense(kHidden, Activation::relu, true, "d1"));
  l.emplace_back(kdist::Sequential::Dense(kOut, Activation::linear, true, "d2"));
  return kdist::Sequential(kIn, std::move(l));
}

const std::vector<float>& inputs() {
  static const auto x = kdist::examples::random_normal(kExamples * kIn, 11);
  return x;
}
const std::vector<float>& targets() {
  static const auto y = kdist::examples::random_normal(kExamples * kOut, 12);
  return y;
}
kdist::ArrayDataset<float> data() {
  return kdist::ArrayDataset<float>(inputs(), {kIn}, targets(), kOut);
}

// ---- the single-process reference, in double --------------------------------------------------

enum class Opt { sgd_momentum, adamw };

struct Reference {
  Reference(Opt o, double learning_rate, double clip) : opt(o), lr(learning_rate), clipnorm(clip) {}
  Opt opt;
  double lr, clipnorm;
  double momentum = 0.9, wd = 0.05, b1 = 0.9, b2 = 0.999, eps = 1e-7;
  std::map<std::string, std::vector<double>> w, s1, s2;  // variables, slots
  std::vector<double> norms;                             // each step's global norm, unclipped
  int iterations = 0;

  // Keras' step on rows [r0, r0 + kBatch): returns the batch's mean squared error.
  double step(std::size_t r0) {
    const auto& W1 = w["d1/kernel"];
    const auto& B1 = w["d1/bias"];
    const auto& W2 = w["d2/kernel"];
    const auto& B2 = w["d2/bias"];
    std::map<std::string, std::vector<double>> g;
    for (const auto& [k, v] : w) g[k].assign(v.size(), 0.0);
    double loss = 0;
    const double scale = 1.0 / double(kBatch * kOut);
    for (std::size_t r = r0; r < r0 + kBatch; ++r) {
      std::vector<double> h(kHidden), y(kOut), dy(kOut), dh(kHidden);
      for (std::size_t j = 0; j < kHidden; ++j) {
        double z = B1[j];
        for (std::size_t i = 0; i < kIn; ++i) z += inputs()[r * kIn + i] * W1[i * kHidden + j];
        h[j] = z > 0 ? z : 0;
      }
      for (std::size_t o = 0; o < kOut; ++o) {
        double z = B2[o];
        for (std::size_t j = 0; j < kHidden; ++j) z += h[j] * W2[j * kOut + o];
        const double d = z - targets()[r * kOut + o];
        loss += d * d * scale;
        dy[o] = 2 * d * scale;
      }
      for (std::size_t o = 0; o < kOut; ++o) {
        g["d2/bias"][o] += dy[o];
        for (std::size_t j = 0; j < kHidden; ++j) g["d2/kernel"][j * kOut + o] += h[j] * dy[o];
      }
      for (std::size_t j = 0; j < kHidden; ++j) {
        double s = 0;
        for (std::size_t o = 0; o < kOut; ++o) s += dy[o] * W2[j * kOut + o];
        dh[j] = h[j] > 0 ? s : 0;
        g["d1/bias"][j] += dh[j];
        for (std::size_t i = 0; i < kIn; ++i)
          g["d1/kernel"][i * kHidden + j] += inputs()[r * kIn + i] * dh[j];
      }
    }
    // Keras' clip_by_global_norm
    double sq = 0;
    for (const auto& [k, v] : g)
      for (double x : v) sq += x * x;
    const double norm = std::sqrt(sq);
    norms.push_back(norm);
    const double c = norm > clipnorm ? clipnorm / norm : 1.0;
    for (auto& [k, v] : g)
      for (double& x : v) x *= c;
    // the optimizer
    const double t = iterations + 1;
    for (auto& [k, p] : w) {
      auto& m = s1[k];
      auto& v = s2[k];
      m.resize(p.size());
      v.resize(p.size());
      const auto& gk = g[k];
      for (std::size_t i = 0; i < p.size(); ++i) {
        if (opt == Opt::sgd_momentum) {  // Keras' SGD: m = mu m - lr g; p += m
          m[i] = momentum * m[i] - lr * gk[i];
          p[i] += m[i];
        } else {  // Keras' AdamW, "bias" excluded from weight decay
          if (k.find("bias") == std::string::npos) p[i] = p[i] - p[i] * wd * lr;
          m[i] += (gk[i] - m[i]) * (1 - b1);
          v[i] += (gk[i] * gk[i] - v[i]) * (1 - b2);
          const double alpha = lr * std::sqrt(1 - std::pow(b2, t)) / (1 - std::pow(b1, t));
          p[i] -= m[i] * alpha / (std::sqrt(v[i]) + eps);
        }
      }
    }
    ++iterations;
    return loss;
  }
};

// The model's variables as full tensors, in double.
std::map<std::string, std::vector<double>> weights_of(kdist::Sequential& m) {
  std::map<std::string, std::vector<double>> out;
  m.for_each_variable([&](auto& v) {
    const auto full = full_from_zero(v.value);
    out[v.path] = std::vector<double>(full.begin(), full.end());
  });
  return out;
}

double relative(double got, double want) {
  return std::abs(got - want) / std::max(1e-2, std::abs(want));
}

kdist::Sequential::Optimizer optimizer_for(Opt opt, double lr, double clipnorm) {
  if (opt == Opt::sgd_momentum) return kdist::SGD(lr, 0.9).with_global_clipnorm(clipnorm);
  kdist::AdamW w(lr, 0.05);
  w.exclude_from_weight_decay({"bias"});
  w.set_global_clipnorm(clipnorm);
  return w;
}

// What one process computes: a mesh (1, world) whose model axis no layout uses, so that every
// process holds and computes everything (the batch is split over "data", of extent 1).
Dist one_process_equivalent() {
  kdist::RuntimeDeviceMesh mesh({1, static_cast<std::size_t>(world_size())}, {"data", "model"},
                                kdist::list_devices());
  return std::make_shared<kdist::ModelParallel>(kdist::LayoutMap(mesh), "data");
}

std::vector<Dist> all_distributions() {
  std::vector<Dist> out{std::make_shared<kdist::DataParallel>()};
  for (const auto& s : meshes()) {
    out.push_back(guide_model_parallel(s));
    out.push_back(row_model_parallel(s));
  }
  return out;
}

// Trains mlp() 2 epochs of 3 steps with `opt`; returns the epoch losses and the final weights,
// and checks them against the double reference run from the same initial weights.
struct Run {
  std::vector<double> losses;
  std::map<std::string, std::vector<double>> weights;
};
Run train(const Dist& dist, Opt opt, double lr, double clipnorm, double weight_tolerance,
          const std::string& what) {
  auto model = mlp();
  model.compile(dist, kdist::Loss::mean_squared_error, optimizer_for(opt, lr, clipnorm), 7);
  Reference ref(opt, lr, clipnorm);
  ref.w = weights_of(model);  // the same initial weights
  Run run;
  for (const auto& e :
       model.fit(data(), {.batch_size = kBatch, .epochs = 2, .shuffle = false, .verbose = 0})
           .epochs) {
    run.losses.push_back(e.loss);
    double want = 0;
    for (std::size_t b = 0; b < kExamples / kBatch; ++b) want += ref.step(b * kBatch);
    want /= double(kExamples / kBatch);
    EXPECT_LE(relative(e.loss, want), 1e-5) << what << ": loss " << e.loss << " vs " << want;
  }
  EXPECT_EQ(run.losses.size(), 2u) << what;
  // every step clipped, by a factor that matters
  for (double n : ref.norms) EXPECT_GT(n, 1.5 * clipnorm) << what;
  run.weights = weights_of(model);
  for (const auto& [path, want] : ref.w) {
    const auto& g = run.weights.at(path);
    double worst = 0;
    for (std::size_t i = 0; i < want.size(); ++i) worst = std::max(worst, relative(g[i], want[i]));
    EXPECT_LE(worst, weight_tolerance) << what << " " << path << " against the double reference";
  }
  return run;
}

TEST(GlobalClipnorm, TrainsLikeOneProcessOnEveryMesh) {
  struct Case {
    Opt opt;
    double lr, clipnorm;
    // Against the double reference: float32 rounding of small gradients, which Adam's
    // m / sqrt(v) normalises to steps of about lr, leaves AdamW's weights ~3e-5 away (also on
    // one process); SGD's steps are linear in the gradient.
    double reference_tolerance;
    const char* what;
  };
  for (const Case c :
       {Case{Opt::sgd_momentum, 0.05, 0.1, 1e-5, "SGD(0.05, 0.9), global_clipnorm 0.1"},
        Case{Opt::adamw, 0.01, 0.05, 1e-4, "AdamW(0.01, 0.05), global_clipnorm 0.05"}}) {
    // every process computing everything, as one process would, in float32
    const auto one = train(one_process_equivalent(), c.opt, c.lr, c.clipnorm, c.reference_tolerance,
                           std::string(c.what) + " on one process");
    for (const auto& dist : all_distributions()) {
      auto probe = mlp();
      probe.compile(dist, kdist::Loss::mean_squared_error, kdist::SGD(), 7);
      const std::string what = std::string(c.what) + " on " + layouts_of(probe);
      const auto run = train(dist, c.opt, c.lr, c.clipnorm, c.reference_tolerance, what);
      ASSERT_EQ(run.losses.size(), one.losses.size());
      for (std::size_t e = 0; e < one.losses.size(); ++e) {
        EXPECT_LE(relative(run.losses[e], one.losses[e]), 1e-5) << what << " epoch " << e;
      }
      for (const auto& [path, want] : one.weights) {
        const auto& g = run.weights.at(path);
        double worst = 0;
        for (std::size_t i = 0; i < want.size(); ++i)
          worst = std::max(worst, relative(g[i], want[i]));
        EXPECT_LE(worst, 1e-5) << what << " " << path << " against one process";
      }
    }
  }
}

// The gradients a train_step leaves, as full tensors.
double full_norm_of_gradients(kdist::Sequential& m) {
  double sq = 0;
  m.for_each_variable([&](auto& v) {
    for (float x : full_from_zero(v.grad)) sq += double(x) * double(x);
  });
  return std::sqrt(sq);
}

double global_norm_of_gradients(kdist::Sequential& m) {
  kdist::GlobalNorm n;
  m.for_each_variable([&](auto& v) { n.add(v.grad); });
  return n.norm();
}

TEST(GlobalClipnorm, TheNormIsTheFullGradientsAndTheClippedGradientsHaveTheClipnorm) {
  for (const auto& dist : all_distributions()) {
    // no clipping: the stored gradients are the full gradient, whose norm the reference knows
    auto plain = mlp();
    plain.compile(dist, kdist::Loss::mean_squared_error, kdist::SGD(0.05), 7);
    Reference ref(Opt::sgd_momentum, 0.05, 1e30);
    ref.w = weights_of(plain);
    const std::string what = layouts_of(plain);
    const auto x = data();
    plain.fit(
        x,
        {.batch_size = kBatch, .epochs = 1, .shuffle = false, .steps_per_epoch = 1, .verbose = 0});
    ref.step(0);
    const double norm = global_norm_of_gradients(plain);
    EXPECT_LE(std::abs(norm - full_norm_of_gradients(plain)), 1e-6 * norm) << what;
    EXPECT_LE(std::abs(norm - ref.norms[0]), 1e-5 * ref.norms[0]) << what;
    // the same on every process
    double extremes[2] = {norm, -norm};
    MPI_Allreduce(MPI_IN_PLACE, extremes, 2, MPI_DOUBLE, MPI_MIN, MPI_COMM_WORLD);
    EXPECT_EQ(extremes[0], -extremes[1]) << what;

    // clipped: the gradients the step used have the global norm clipnorm
    auto clipped = mlp();
    clipped.compile(dist, kdist::Loss::mean_squared_error,
                    kdist::Adam(0.01).with_global_clipnorm(0.25 * norm), 7);
    clipped.fit(
        x,
        {.batch_size = kBatch, .epochs = 1, .shuffle = false, .steps_per_epoch = 1, .verbose = 0});
    EXPECT_LE(std::abs(full_norm_of_gradients(clipped) - 0.25 * norm), 1e-5 * norm) << what;
    EXPECT_LE(std::abs(global_norm_of_gradients(clipped) - 0.25 * norm), 1e-5 * norm) << what;
  }
}

TEST(GlobalNorm, CountsReplicatedBlocksOnceAndShardedBlocksEach) {
  // A (5, 6) tensor of i * 6 + j + 1 - 15 on every mesh and layout: replicated, sharded by rows,
  // by columns, by both; its norm is known. A replicated vector of 3 and 4 adds 25.
  double sq = 0;
  for (int k = 0; k < 30; ++k) sq += double(k + 1 - 15) * double(k + 1 - 15);
  const double want = std::sqrt(sq + 25.0);
  for (const auto& shape : meshes()) {
    kdist::RuntimeDeviceMesh mesh(shape, {"data", "model"}, kdist::list_devices());
    const std::vector<kdist::RuntimeTensorLayout> layouts = {
        kdist::RuntimeTensorLayout({kdist::replicated, kdist::replicated}, mesh),
        kdist::RuntimeTensorLayout({"data", kdist::replicated}, mesh),
        kdist::RuntimeTensorLayout({kdist::replicated, "model"}, mesh),
        kdist::RuntimeTensorLayout({"model", "data"}, mesh)};
    for (const auto& layout : layouts) {
      const auto v =
          kdist::distribute_tensor<float*>([](std::size_t i) { return i == 0 ? 3.0f : 4.0f; }, {2},
                                           kdist::RuntimeTensorLayout({kdist::replicated}, mesh));
      auto t = kdist::distribute_tensor<float**>(
          [](std::size_t i, std::size_t j) { return float(i * 6 + j + 1) - 15.0f; }, {5, 6},
          layout);
      const std::string what = mesh.to_string() + " " + layout.axes_repr();
      EXPECT_NEAR(kdist::global_norm(t, v), want, 1e-12 * want) << what;
      EXPECT_DOUBLE_EQ(kdist::global_norm(v), 5.0) << what;
      // clipping to half the norm halves every element, on every block
      auto u =
          kdist::distribute_tensor<float*>([](std::size_t i) { return i == 0 ? 3.0f : 4.0f; }, {2},
                                           kdist::RuntimeTensorLayout({kdist::replicated}, mesh));
      const double before = kdist::clip_by_global_norm(want / 2, t, u);
      EXPECT_NEAR(before, want, 1e-12 * want) << what;
      EXPECT_NEAR(kdist::global_norm(t, u), want / 2, 1e-6 * want) << what;
      const auto full = full_from_zero(t);
      for (int k = 0; k < 30; ++k) {
        EXPECT_FLOAT_EQ(full[k], (float(k + 1) - 15.0f) * float(0.5)) << what << " " << k;
      }
      // under the clipnorm nothing changes
      EXPECT_NEAR(kdist::clip_by_global_norm(want, t, u), want / 2, 1e-6 * want) << what;
      EXPECT_EQ(full_from_zero(t), full) << what;
    }
  }
  EXPECT_EQ(kdist::global_norm(), 0.0);
}

TEST(GlobalNormErrors, APendingSumOrABadClipnorm) {
  kdist::RuntimeDeviceMesh mesh({static_cast<std::size_t>(world_size())}, {"x"},
                                kdist::list_devices());
  const kdist::RuntimeTensorLayout layout({kdist::replicated}, mesh);
  auto t = kdist::distribute_tensor<float*>([](std::size_t) { return 1.0f; }, {4}, layout);
  for (const double bad : {0.0, -1.0}) {
    const auto msg = message_of<kdist::ValueError>([&] { kdist::clip_by_global_norm(bad, t); });
    EXPECT_TRUE(contains(msg, "kdist::clip_by_global_norm: clipnorm is")) << msg;
    EXPECT_TRUE(contains(msg, "it must be a finite number > 0")) << msg;
  }
  if (world_size() == 1) GTEST_SKIP() << "a pending sum needs a mesh axis of 2 or more processes";
  const auto partial = kdist::DistributedTensor<float*>::from_local(t.local(), {4}, layout, {"x"});
  ASSERT_TRUE(partial.is_partial());
  const auto msg = message_of<kdist::ValueError>([&] { (void)kdist::global_norm(partial); });
  EXPECT_TRUE(contains(msg, "kdist::global_norm: <DistributedTensor")) << msg;
  EXPECT_TRUE(contains(msg, "is a pending sum; its norm is not the norm of its summands")) << msg;
  expect_same_on_every_process(msg);
}

// AdamW's state (momentum, velocity) and hyperparameters go through a checkpoint, across meshes,
// and through a Keras weights file under Keras' name "adam_w" (keras.optimizers.AdamW().name).
class AdamWFiles : public TempDirTest {};

TEST_F(AdamWFiles, StateSurvivesACheckpointOnAnotherMeshAndAKerasWeightsFile) {
  const auto dists = all_distributions();
  const auto path = file("adamw.h5");
  const kdist::FitOptions first_epoch{
      .batch_size = kBatch, .epochs = 1, .shuffle = false, .verbose = 0};
  const kdist::FitOptions second_epoch{
      .batch_size = kBatch, .epochs = 2, .initial_epoch = 1, .shuffle = false, .verbose = 0};
  auto first = mlp();
  first.compile(dists.back(), kdist::Loss::mean_squared_error,
                optimizer_for(Opt::adamw, 0.01, 0.05), 7);
  first.fit(data(), first_epoch);
  const auto want = state_of(first);
  ASSERT_EQ(want.count("d1/kernel/slot1"), 1u);
  kdist::save_checkpoint(first, path, {.epoch = 1});
  if (world_rank() == 0) {
    namespace h5 = kdist::detail::hdf5;
    hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
    ASSERT_GE(f, 0);
    hid_t opt = H5Gopen2(f, "/optimizer", H5P_DEFAULT);
    std::string name;
    std::vector<std::string> slot_names;
    double wd = 0, clip = 0;
    EXPECT_TRUE(h5::read_string(opt, "name", name));
    EXPECT_TRUE(h5::read_strings(opt, "slot_names", slot_names));
    EXPECT_TRUE(h5::read_scalar(opt, "weight_decay", wd));
    EXPECT_TRUE(h5::read_scalar(opt, "global_clipnorm", clip));
    EXPECT_EQ(name, "AdamW");
    EXPECT_EQ(slot_names, (std::vector<std::string>{"momentum", "velocity"}));
    EXPECT_EQ(wd, 0.05);
    EXPECT_EQ(clip, 0.05);
    H5Gclose(opt);
    H5Fclose(f);
  }
  auto second = mlp();
  second.compile(dists.front(), kdist::Loss::mean_squared_error,
                 optimizer_for(Opt::adamw, 0.01, 0.05), 7);
  const auto loaded = kdist::load_checkpoint(second, path);
  EXPECT_EQ(loaded.optimizer, "AdamW");
  EXPECT_EQ(second.iterations(), 3);
  expect_bitwise_equal(state_of(second), want, "AdamW checkpoint");
  const auto resumed = first.fit(data(), second_epoch).epochs.at(0).loss;
  const auto restored = second.fit(data(), second_epoch).epochs.at(0).loss;
  EXPECT_NEAR(restored, resumed, 1e-5 * std::abs(resumed));
  // Adam's checkpoint is not AdamW's
  auto adam = mlp();
  adam.compile(dists.front(), kdist::Loss::mean_squared_error, kdist::Adam(), 7);
  const auto msg = message_of<kdist::ValueError>([&] { kdist::load_checkpoint(adam, path); });
  EXPECT_TRUE(contains(msg, "saved with optimizer AdamW but the model is compiled with Adam"))
      << msg;

  // a Keras weights file
  const auto keras = file("adamw.weights.h5");
  kdist::save_keras_weights(first, keras);
  if (world_rank() == 0) {
    namespace h5 = kdist::detail::hdf5;
    hid_t f = H5Fopen(keras.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
    ASSERT_GE(f, 0);
    hid_t vars = H5Gopen2(f, "/optimizer/vars", H5P_DEFAULT);
    std::string name;
    EXPECT_TRUE(h5::read_string(vars, "name", name));
    EXPECT_EQ(name, "adam_w");
    H5Gclose(vars);
    H5Fclose(f);
  }
  auto third = mlp();
  third.compile(dists.front(), kdist::Loss::mean_squared_error, kdist::AdamW(0.5, 0.05), 9);
  const auto r = kdist::load_keras_weights(third, keras);
  EXPECT_TRUE(r.optimizer_loaded) << r.optimizer_note;
  EXPECT_EQ(third.iterations(), 6);
  EXPECT_FLOAT_EQ(static_cast<float>(third.optimizer().learning_rate()), 0.01f);
  expect_bitwise_equal(state_of(third), state_of(first), "AdamW, Keras file");
}

TEST(GlobalClipnormErrors, AModelCompiledWithABadClipnormCannotBe) {
  const auto msg =
      message_of<kdist::ValueError>([] { (void)kdist::AdamW().with_global_clipnorm(-2.0); });
  EXPECT_TRUE(contains(msg, "kdist::AdamW: global_clipnorm is -2; it must be a finite number > 0"))
      << msg;
}

}  // namespace
