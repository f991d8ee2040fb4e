// kdist-mpi-ranks: 1 2 4
// Layers, fit and evaluate (issue 10): the library's Sequential trains the seeds' program (float
// targets, mse, RMSprop, batch 16, 3 epochs) and a Conv2D model (the ModelParallel page's conv
// rules) to the same losses and weights on every mesh of the world's size as on a layout where
// every process computes everything; a user's own layer trains inside a Sequential; the conv
// model's gradients agree with finite differences; every error a user meets is a ValueError on
// every process alike.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <map>
#include <random>

#include <kdist/nn/layers/conv2d.hpp>
#include <kdist/nn/model.hpp>
#include <kdist/strategy/data_parallel.hpp>
#include <kdist/strategy/layout_map.hpp>
#include <kdist/strategy/model_parallel.hpp>
#include <kdist/tensor/distribute_tensor.hpp>

#include "common/random_normal.hpp"
#include "mpi/model_test_support.hpp"
#include "mpi/mpi_test_util.hpp"
#include "mpi/step_allocations.hpp"

namespace {

using kdist::test::contains;
using kdist::test::message_of;
using kdist::test::world_size;
using namespace kdist::layers;
using kdist::test::guide_model_parallel;
using kdist::test::meshes;
using kdist::test::name_of;
using kdist::test::seeds_data;
using kdist::test::seeds_model;

std::vector<float> normal(std::size_t n, std::uint64_t seed) {
  return kdist::examples::random_normal(n, seed);
}

// Every process computes everything: a (1, n) mesh whose batch axis has extent 1 and no rules.
std::shared_ptr<const kdist::Distribution> replicated_everywhere() {
  const std::size_t n = static_cast<std::size_t>(world_size());
  kdist::RuntimeDeviceMesh mesh({1, n}, {"data", "model"}, kdist::list_devices());
  return std::make_shared<kdist::ModelParallel>(kdist::LayoutMap(mesh), "data");
}

// ---- the seeds' programs ------------------------------------------------------------------------

void expect_close(double got, double want, double rel, const std::string& what) {
  EXPECT_LE(std::abs(got - want), rel * std::max(1.0, std::abs(want)))
      << what << ": " << got << " vs " << want;
}

template <class Model>
std::map<std::string, std::vector<float>> weights_of(Model& m) {
  std::map<std::string, std::vector<float>> out;
  m.for_each_variable([&](auto& v) {
    auto full = kdist::full_tensor(v.value);
    out[v.path].assign(full.data(), full.data() + full.size());
  });
  return out;
}

void expect_same_weights(const std::map<std::string, std::vector<float>>& got,
                         const std::map<std::string, std::vector<float>>& want,
                         const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (const auto& [path, w] : want) {
    const auto& g = got.at(path);
    ASSERT_EQ(g.size(), w.size()) << what << " " << path;
    double worst = 0;
    for (std::size_t i = 0; i < w.size(); ++i) {
      worst = std::max(
          worst, std::abs(double(g[i]) - double(w[i])) / std::max(1e-2, std::abs(double(w[i]))));
    }
    EXPECT_LT(worst, 1e-4) << what << " " << path;
  }
}

TEST(SeedsPrograms, FitAndEvaluateGiveTheSameLossesOnEveryMesh) {
  const auto data = seeds_data();
  const kdist::FitOptions fit{.batch_size = 16, .epochs = 3, .shuffle = false, .verbose = 0};
  auto reference = seeds_model();
  reference.compile(replicated_everywhere(), kdist::Loss::mean_squared_error, kdist::RMSprop(), 7);
  const auto want = reference.fit(data, fit);
  const auto want_eval = reference.evaluate(data, {.batch_size = 16, .verbose = 0});
  ASSERT_EQ(want.epochs.size(), 3u);
  for (const auto& e : want.epochs) {
    EXPECT_EQ(e.examples, 128u);
    EXPECT_FALSE(e.has_accuracy);  // float targets: Keras prints only the loss
  }
  // mse on random targets: the loss goes down epoch after epoch, as the notebook's does
  EXPECT_LT(want.epochs[2].loss, want.epochs[0].loss);
  const auto want_weights = weights_of(reference);

  std::vector<std::shared_ptr<const kdist::Distribution>> dists{
      std::make_shared<kdist::DataParallel>()};
  for (const auto& shape : meshes()) dists.push_back(guide_model_parallel(shape));
  for (const auto& dist : dists) {
    auto model = seeds_model();
    model.compile(dist, kdist::Loss::mean_squared_error, kdist::RMSprop(), 7);
    const auto got = model.fit(data, fit);
    for (std::size_t e = 0; e < 3; ++e) {
      expect_close(got.epochs[e].loss, want.epochs[e].loss, 1e-5,
                   name_of(*dist) + " epoch " + std::to_string(e));
    }
    expect_close(model.evaluate(data, {.batch_size = 16, .verbose = 0}).loss, want_eval.loss, 1e-5,
                 name_of(*dist) + " evaluate");
    expect_same_weights(weights_of(model), want_weights, name_of(*dist));
  }
}

// RMSprop's slots in every combination (velocity; average gradient when centered; momentum when
// > 0) reach the right buffers: each variant trains, the same on every mesh.
TEST(SeedsPrograms, RmspropWithMomentumAndCenteredTrainsTheSameOnEveryMesh) {
  const auto data = seeds_data();
  const kdist::FitOptions fit{.batch_size = 16, .epochs = 1, .shuffle = false, .verbose = 0};
  for (bool centered : {false, true}) {
    for (double momentum : {0.0, 0.9}) {
      const kdist::RMSprop opt(0.001, 0.9, momentum, 1e-7, centered);
      auto reference = seeds_model();
      reference.compile(replicated_everywhere(), kdist::Loss::mean_squared_error, opt, 3);
      const double want = reference.fit(data, fit).epochs[0].loss;
      auto model = seeds_model();
      model.compile(guide_model_parallel(meshes().back()), kdist::Loss::mean_squared_error, opt, 3);
      expect_close(model.fit(data, fit).epochs[0].loss, want, 1e-5,
                   std::string("centered ") + (centered ? "yes" : "no") + ", momentum " +
                       std::to_string(momentum));
      expect_same_weights(weights_of(model), weights_of(reference), "RMSprop variant");
    }
  }
}

TEST(SeedsPrograms, CompileWithoutADistributionTakesTheGlobalOneOrDataParallel) {
  const auto data = seeds_data();
  const kdist::FitOptions fit{.batch_size = 16, .epochs = 1, .shuffle = false, .verbose = 0};
  auto reference = seeds_model();
  reference.compile(replicated_everywhere(), kdist::Loss::mean_squared_error, kdist::RMSprop(), 0);
  const double want = reference.fit(data, fit).epochs[0].loss;

  auto plain = seeds_model();  // no distribution anywhere: DataParallel over every process
  plain.compile(kdist::Loss::mean_squared_error);
  EXPECT_EQ(plain.distribution().name(), "DataParallel");
  expect_close(plain.fit(data, fit).epochs[0].loss, want, 1e-5, "no distribution");

  const auto mp = guide_model_parallel(meshes().back());
  kdist::set_distribution(mp);
  auto global = seeds_model();
  global.compile(kdist::Loss::mean_squared_error);
  kdist::set_distribution(nullptr);
  EXPECT_EQ(&global.distribution(), mp.get());
  expect_close(global.fit(data, fit).epochs[0].loss, want, 1e-5, "set_distribution");
}

// ---- Conv2D with the ModelParallel page's rules --------------------------------------------------

kdist::Sequential conv_model() {
  std::vector<kdist::Sequential::Layer> l;
  l.emplace_back(Conv2D(4, {3, 3}, Activation::relu, true, "conv2d"));
  l.emplace_back(Conv2D(4, {2, 2}, Activation::relu, true, "conv2d_1"));
  l.emplace_back(Flatten());
  l.emplace_back(Dense(10, Activation::softmax, true, "d2"));
  return kdist::Sequential({8, 7, 2}, std::move(l));
}

kdist::ArrayDataset<float> conv_data(std::size_t n) {
  std::vector<std::int32_t> labels(n);
  std::mt19937_64 gen(3);
  for (auto& y : labels) y = static_cast<std::int32_t>(gen() % 10);
  return kdist::ArrayDataset<float>(normal(n * 8 * 7 * 2, 4), {8, 7, 2}, std::move(labels));
}

std::shared_ptr<const kdist::Distribution> conv_model_parallel(std::vector<std::size_t> shape) {
  kdist::RuntimeDeviceMesh mesh(shape, {"data", "model"}, kdist::list_devices());
  kdist::LayoutMap map(mesh);
  map["conv2d.*kernel"] = {kdist::replicated, kdist::replicated, kdist::replicated, "model"};
  map["conv2d.*bias"] = {"model"};
  return std::make_shared<kdist::ModelParallel>(std::move(map), "data");
}

// DataParallel, and ModelParallel with the filters sharded on every mesh of the world's size.
std::vector<std::shared_ptr<const kdist::Distribution>> conv_distributions() {
  std::vector<std::shared_ptr<const kdist::Distribution>> dists{
      std::make_shared<kdist::DataParallel>()};
  for (const auto& shape : meshes()) dists.push_back(conv_model_parallel(shape));
  return dists;
}

TEST(Conv2D, TrainsToTheSameLossesAndWeightsOnEveryMesh) {
  const auto data = conv_data(40);  // batch 16: two full steps and a partial one of 8
  const kdist::FitOptions fit{.batch_size = 16, .epochs = 2, .shuffle = true, .verbose = 0};
  auto reference = conv_model();
  reference.compile(replicated_everywhere(), kdist::Loss::categorical_crossentropy,
                    kdist::Adam(0.01), 11);
  const auto want = reference.fit(data, fit);
  EXPECT_TRUE(want.epochs[0].has_accuracy);
  EXPECT_LT(want.epochs[1].loss, want.epochs[0].loss);
  const auto want_weights = weights_of(reference);
  for (const auto& dist : conv_distributions()) {
    auto model = conv_model();
    model.compile(dist, kdist::Loss::categorical_crossentropy, kdist::Adam(0.01), 11);
    for (const auto& v : model.variables()) {
      if (v.path == "conv2d/kernel" && dist->name() == "ModelParallel") {
        EXPECT_EQ(v.layout.axes_repr(), "(None, None, None, 'model')");
      }
    }
    const auto got = model.fit(data, fit);
    for (std::size_t e = 0; e < 2; ++e) {
      expect_close(got.epochs[e].loss, want.epochs[e].loss, 1e-5,
                   name_of(*dist) + " epoch " + std::to_string(e));
      expect_close(got.epochs[e].accuracy, want.epochs[e].accuracy, 1e-9,
                   name_of(*dist) + " accuracy " + std::to_string(e));
    }
    expect_same_weights(weights_of(model), want_weights, name_of(*dist));
  }
}

// kdist::ReusableViews: once its shapes have been seen, a step of the convolutional model
// allocates nothing, data parallel or with the filters sharded: Conv2D's outputs, gradients, patch
// matrix and redistributions and Flatten's gathered, flattened and unflattened blocks reuse the
// last steps' buffers.
TEST(Conv2D, StepsAllocateNothingOnceTheirShapesAreSeenOnEveryMesh) {
  const auto data = conv_data(16);
  for (const auto& dist : conv_distributions()) {
    auto model = conv_model();
    model.compile(dist, kdist::Loss::categorical_crossentropy, kdist::Adam(0.01), 11);
    EXPECT_EQ(kdist::test::allocations_of_steps_3_and_4<4>(model, *dist, data, 16), "")
        << "steps 3 and 4 allocated these Kokkos Views on " << name_of(*dist);
  }
}

// Sets element `flat` of a distributed variable to `value` on every process that holds it (through
// a host copy: the block may live in device memory).
template <class Tensor>
void set_element(Tensor& t, const std::array<std::size_t, Tensor::rank>& index, float value) {
  auto host = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), t.local());
  const auto off = t.offsets();
  std::array<std::size_t, Tensor::rank> local{};
  for (std::size_t d = 0; d < Tensor::rank; ++d) {
    if (index[d] < off[d] || index[d] >= off[d] + t.local().extent(d)) return;
    local[d] = index[d] - off[d];
  }
  if constexpr (Tensor::rank == 4) {
    host(local[0], local[1], local[2], local[3]) = value;
  } else if constexpr (Tensor::rank == 1) {
    host(local[0]) = value;
  } else {
    host(local[0], local[1]) = value;
  }
  Kokkos::deep_copy(t.local(), host);
}

template <class Tensor>
float get_element(const Tensor& t, const std::array<std::size_t, Tensor::rank>& index) {
  auto full = kdist::full_tensor(t);
  std::size_t flat = 0;
  for (std::size_t d = 0; d < Tensor::rank; ++d) flat = flat * t.shape()[d] + index[d];
  return full.data()[flat];
}

TEST(Conv2D, GradientsMatchFiniteDifferencesOnEveryMesh) {
  const auto data = conv_data(8);
  for (const auto& shape : meshes()) {
    for (bool model_parallel : {false, true}) {
      auto dist =
          model_parallel
              ? conv_model_parallel(shape)
              : std::shared_ptr<const kdist::Distribution>(std::make_shared<kdist::DataParallel>(
                    kdist::RuntimeDeviceMesh(shape, {"data", "model"}, kdist::list_devices())));
      auto model = conv_model();
      model.compile(dist, kdist::Loss::categorical_crossentropy, kdist::SGD(0.0), 5);
      const auto in = model.input_layout(8);
      // this process's rows of the 8 examples, by the data layout
      const auto rows = in.local_extents(std::vector<std::size_t>{8, 8, 7, 2}, kdist::process_id());
      const auto first = in.offsets(std::vector<std::size_t>{8, 8, 7, 2}, kdist::process_id());
      Kokkos::View<float****, Kokkos::LayoutRight> x("x", rows[0], 8, 7, 2);
      Kokkos::View<std::int32_t*, Kokkos::LayoutRight> y("y", rows[0]);
      auto hx = Kokkos::create_mirror_view(x);
      auto hy = Kokkos::create_mirror_view(y);
      for (std::size_t r = 0; r < rows[0]; ++r) {
        std::copy_n(data.example(first[0] + r), 8 * 7 * 2, &hx(r, 0, 0, 0));
        hy(r) = data.labels()[first[0] + r];
      }
      Kokkos::deep_copy(x, hx);
      Kokkos::deep_copy(y, hy);
      model.train_step(x, y, 8);  // lr 0: gradients only
      auto* conv = model.layers()[0].get_if<kdist::layers::Conv2D>();
      auto* conv1 = model.layers()[1].get_if<kdist::layers::Conv2D>();
      ASSERT_NE(conv, nullptr);
      const std::string what = name_of(*dist);
      const double eps = 1e-3;  // small enough that no ReLU input crosses 0
      auto check = [&](auto& var, const auto& index) {
        const float g = get_element(var.grad, index);
        const float w = get_element(var.value, index);
        set_element(var.value, index, static_cast<float>(w + eps));
        const double up = model.evaluate_batch(x, y, 8).loss;
        set_element(var.value, index, static_cast<float>(w - eps));
        const double down = model.evaluate_batch(x, y, 8).loss;
        set_element(var.value, index, w);
        const double fd = (up - down) / (2 * eps);
        EXPECT_NEAR(g, fd, 2e-3 + 2e-2 * std::abs(fd)) << what << " " << var.path;
      };
      check(conv->kernel(), std::array<std::size_t, 4>{1, 2, 1, 3});
      check(conv->kernel(), std::array<std::size_t, 4>{0, 0, 0, 0});
      check(*conv->bias(), std::array<std::size_t, 1>{2});
      check(conv1->kernel(), std::array<std::size_t, 4>{1, 0, 3, 1});
    }
  }
}

// ---- a user's own layer --------------------------------------------------------------------------

// y = factor * x on (batch, features): no variables. A free function for the kernel (nvcc's
// extended lambdas cannot live in a private member).
kdist::DistributedTensor<float**> scaled(const kdist::DistributedTensor<float**>& x, float factor) {
  using M = kdist::DistributedTensor<float**>;
  M::view_type out("scaled", x.local().extent(0), x.local().extent(1));
  auto in = x.local();
  Kokkos::parallel_for(
      "scale",
      Kokkos::MDRangePolicy<Kokkos::Rank<2>>({0, 0}, {static_cast<std::int64_t>(in.extent(0)),
                                                      static_cast<std::int64_t>(in.extent(1))}),
      KOKKOS_LAMBDA(std::int64_t i, std::int64_t j) { out(i, j) = factor * in(i, j); });
  return M::from_local(out, x.shape(), x.layout());
}

struct Scale {
  using value_type = float;
  float factor = 2;
  int* backward_calls = nullptr;
  std::string name() const { return "scale"; }
  kdist::Shape build(const kdist::Shape& in, const kdist::Distribution&, std::uint64_t) {
    return in;
  }
  kdist::LayerTensor<float> forward(const kdist::LayerTensor<float>& x, const kdist::StepContext&) {
    return scaled(std::get<kdist::DistributedTensor<float**>>(x), factor);
  }
  std::optional<kdist::LayerTensor<float>> backward(const kdist::LayerTensor<float>& dy, bool need,
                                                    kdist::Gradients<float>&) {
    ++*backward_calls;
    if (!need) return std::nullopt;
    return scaled(std::get<kdist::DistributedTensor<float**>>(dy), factor);
  }
  std::vector<kdist::VariableRef<float>> variables() { return {}; }
};
static_assert(kdist::Layer<Scale>);
static_assert(kdist::Layer<kdist::layers::Conv2D> && kdist::Layer<kdist::layers::Flatten> &&
              kdist::Layer<kdist::layers::Dense> && kdist::Layer<kdist::layers::Dropout>);
static_assert(!kdist::Layer<kdist::layers::BasicDense<double>, float>);

TEST(CustomLayer, TrainsInsideASequentialLikeScaledInputs) {
  int calls = 0;
  std::vector<kdist::Sequential::Layer> with;
  with.emplace_back(Flatten());
  with.emplace_back(Scale{2.0f, &calls});
  with.emplace_back(Dense(10, Activation::softmax, true, "d2"));
  kdist::Sequential a({8, 7, 2}, std::move(with));
  std::vector<kdist::Sequential::Layer> without;
  without.emplace_back(Dense(10, Activation::softmax, true, "d2"));
  kdist::Sequential b(8 * 7 * 2, std::move(without));
  const auto dist = guide_model_parallel(meshes().back());
  a.compile(dist, kdist::Loss::categorical_crossentropy, kdist::SGD(0.1), 3);
  b.compile(dist, kdist::Loss::categorical_crossentropy, kdist::SGD(0.1), 3);
  const auto data = conv_data(32);
  std::vector<float> doubled(32 * 8 * 7 * 2);
  for (std::size_t i = 0; i < 32; ++i) {
    for (std::size_t k = 0; k < 8 * 7 * 2; ++k) doubled[i * 112 + k] = 2 * data.example(i)[k];
  }
  const auto labels = data.labels();
  const kdist::ArrayDataset<float> flat(std::move(doubled), {112},
                                        std::vector<std::int32_t>(labels.begin(), labels.end()));
  const kdist::FitOptions fit{.batch_size = 8, .epochs = 2, .verbose = 0};
  const auto ha = a.fit(data, fit);
  const auto hb = b.fit(flat, fit);
  EXPECT_EQ(calls, 8);  // 4 steps x 2 epochs
  for (std::size_t e = 0; e < 2; ++e) expect_close(ha.epochs[e].loss, hb.epochs[e].loss, 1e-5, "");
}

// ---- errors, alike on every process -------------------------------------------------------------

TEST(LayerErrors, ShapesThatDoNotChainAreValueErrorsAtCompile) {
  const auto dist = guide_model_parallel(meshes().back());
  {
    std::vector<kdist::Sequential::Layer> l;
    l.emplace_back(Conv2D(4, {3, 3}, Activation::relu, true, "conv2d"));
    l.emplace_back(Dense(10, Activation::softmax, true, "d2"));
    kdist::Sequential m({8, 8, 1}, std::move(l));
    const auto msg = message_of<kdist::ValueError>(
        [&] { m.compile(dist, kdist::Loss::mean_squared_error, kdist::SGD(), 0); });
    EXPECT_TRUE(contains(msg,
                         "Dense 'd2' takes inputs of shape (features,) but the layer before "
                         "it gives (6, 6, 4); put a kdist::layers::Flatten before it"))
        << msg;
  }
  {
    std::vector<kdist::Sequential::Layer> l;
    l.emplace_back(Conv2D(4, {5, 3}, Activation::relu, true, "conv2d"));
    kdist::Sequential m({4, 4, 1}, std::move(l));
    const auto msg = message_of<kdist::ValueError>(
        [&] { m.compile(dist, kdist::Loss::mean_squared_error, kdist::SGD(), 0); });
    EXPECT_TRUE(contains(msg, "the kernel (5, 3) does not fit examples of shape (4, 4, 1)")) << msg;
  }
  {
    std::vector<kdist::Sequential::Layer> l;
    l.emplace_back(Dense(10, Activation::softmax, true, "d2"));
    kdist::Sequential m({4, 4, 1}, std::move(l));
    const auto msg = message_of<kdist::ValueError>(
        [&] { m.compile(dist, kdist::Loss::mean_squared_error, kdist::SGD(), 0); });
    EXPECT_TRUE(contains(msg, "gives (4, 4, 1); put a kdist::layers::Flatten before it")) << msg;
  }
}

TEST(LayerErrors, ConstructorsRejectWhatKerasRejects) {
  auto msg = message_of<kdist::ValueError>([] { Conv2D(0, {3, 3}, Activation::relu, true, "c"); });
  EXPECT_TRUE(contains(msg, "Conv2D 'c': filters must be >= 1")) << msg;
  msg = message_of<kdist::ValueError>([] { Conv2D(2, {0, 3}, Activation::relu, true, "c"); });
  EXPECT_TRUE(contains(msg, "kernel_size (0, 3) must be >= 1")) << msg;
  msg = message_of<kdist::ValueError>([] { Conv2D(2, {3, 3}, Activation::softmax, true, "c"); });
  EXPECT_TRUE(contains(msg, "softmax activation over a feature map")) << msg;
  msg = message_of<kdist::ValueError>([] { kdist::Sequential({4, 4}, {Flatten()}); });
  EXPECT_TRUE(contains(msg,
                       "input shape (4, 4) is none of (features,), (height, width, channels) "
                       "and (depth, height, width, channels)"))
      << msg;
  msg = message_of<kdist::ValueError>([] { kdist::Sequential(4, {}); });
  EXPECT_TRUE(contains(msg, "needs at least one layer")) << msg;
  const auto dist = guide_model_parallel(meshes().back());
  msg = message_of<kdist::ValueError>([&] { Flatten("f").build({2, 3}, *dist, 0); });
  EXPECT_TRUE(contains(msg,
                       "Flatten 'f' takes examples of shape (features,), (height, width, "
                       "channels) or (depth, height, width, channels), not (2, 3)"))
      << msg;
}

TEST(LayerErrors, RankMismatchesInTheForwardPassAreValueErrors) {
  const auto dist = guide_model_parallel(meshes().back());
  const auto data = conv_data(8);
  {  // Dropout before Flatten: any rank now (issue 20), so this trains
    std::vector<kdist::Sequential::Layer> l;
    l.emplace_back(Dropout(0.5, "dropout"));
    l.emplace_back(Flatten());
    l.emplace_back(Dense(10, Activation::softmax, true, "d2"));
    kdist::Sequential m({8, 7, 2}, std::move(l));
    m.compile(dist, kdist::Loss::categorical_crossentropy, kdist::SGD(), 0);
    EXPECT_EQ(m.fit(data, {.verbose = 0}).epochs.size(), 1u);
  }
  {  // gelu over a feature map
    const auto msg = message_of<kdist::ValueError>([] {
      Conv2D(2, {3, 3}, Activation::gelu, true, "conv2d");
    });
    EXPECT_TRUE(contains(msg, "a gelu activation over a feature map is not supported")) << msg;
  }
  {  // ends in a feature map (a field), given class labels
    std::vector<kdist::Sequential::Layer> l;
    l.emplace_back(Conv2D(2, {3, 3}, Activation::relu, true, "conv2d"));
    kdist::Sequential m({8, 7, 2}, std::move(l));
    m.compile(dist, kdist::Loss::categorical_crossentropy, kdist::SGD(), 0);
    const auto msg = message_of<kdist::ValueError>([&] { m.fit(data, {.verbose = 0}); });
    EXPECT_TRUE(contains(msg, "not class labels; end it with a Flatten and a Dense to classify"))
        << msg;
  }
}

TEST(LayerErrors, FitAndEvaluateCheckTheModelAndTheData) {
  auto m = seeds_model();
  const auto data = seeds_data();
  auto msg = message_of<kdist::ValueError>([&] { m.fit(data); });
  EXPECT_TRUE(contains(msg,
                       "kdist::Sequential::fit: the model is not compiled; call "
                       "model.compile(...) first"))
      << msg;
  m.compile(guide_model_parallel(meshes().back()), kdist::Loss::mean_squared_error,
            kdist::RMSprop(), 0);
  const kdist::ArrayDataset<float> other(normal(4 * 7, 1), {7}, normal(4 * 10, 2), 10);
  msg = message_of<kdist::ValueError>([&] { m.evaluate(other); });
  EXPECT_TRUE(contains(msg,
                       "kdist::Sequential::evaluate: examples of shape (7,) given to a model "
                       "of input shape (28, 28, 1)"))
      << msg;
  const kdist::ArrayDataset<float> narrow(normal(4 * 784, 1), {28, 28, 1}, normal(4 * 3, 2), 3);
  msg = message_of<kdist::ValueError>([&] { m.fit(narrow); });
  EXPECT_TRUE(contains(msg, "targets of 3 values per example for a model of 10 outputs")) << msg;
  if (world_size() > 1) {  // a global batch the data shards cannot divide
    const auto dp = std::make_shared<kdist::DataParallel>();
    auto d = seeds_model();
    d.compile(dp, kdist::Loss::mean_squared_error, kdist::RMSprop(), 0);
    msg = message_of<kdist::ValueError>([&] {
      d.fit(data, {.batch_size = static_cast<std::size_t>(16 * world_size() + 1), .verbose = 0});
    });
    EXPECT_TRUE(contains(msg, "multiple")) << msg;
  }
  Kokkos::View<float**, Kokkos::LayoutRight> x("x", 2, 784);
  Kokkos::View<std::int32_t*, Kokkos::LayoutRight> y("y", 2);
  msg = message_of<kdist::ValueError>([&] { m.train_step(x, y, 2 * world_size()); });
  EXPECT_TRUE(contains(msg, "x_local has rank 2 but the model takes examples of shape (28, 28, 1)"))
      << msg;
}

}  // namespace
