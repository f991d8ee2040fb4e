// kdist-mpi-ranks: 1 2 4
// Residual connections (issue 20): kdist::layers::Residual, y = x + f(x), inside a Sequential.
// Its gradients agree with finite differences (double, one process); a model with a Megatron
// column -> row pair inside the residual trains to the same losses and weights on every mesh of
// the world's size, with and without a LayoutMap rule on the sum's output; the errors a user meets
// are ValueErrors that say what to fix.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <map>

#include <kdist/nn/layers/residual.hpp>
#include <kdist/nn/model.hpp>
#include <kdist/strategy/layout_map.hpp>
#include <kdist/strategy/model_parallel.hpp>
#include <kdist/tensor/distribute_tensor.hpp>

#include "mpi/model_test_support.hpp"
#include "mpi/mpi_test_util.hpp"

namespace {

using kdist::test::meshes;
using kdist::test::message_of;
using kdist::test::name_of;
using kdist::test::world_size;
using namespace kdist::layers;

static_assert(kdist::Layer<kdist::layers::Residual>);
static_assert(kdist::Layer<kdist::layers::BasicResidual<double>>);

template <class T>
kdist::BasicSequential<T> residual_model() {
  using M = kdist::BasicSequential<T>;
  using Dense = typename M::Dense;
  std::vector<typename M::Layer> l;
  l.emplace_back(typename M::Flatten());
  l.emplace_back(Dense(12, Activation::relu, true, "d1"));
  l.emplace_back(BasicResidual<T>("res", {Dense(20, Activation::relu, true, "res_up"),
                                          Dense(12, Activation::linear, true, "res_down")}));
  l.emplace_back(Dense(10, Activation::softmax, true, "d2"));
  return M({8, 8, 1}, std::move(l));
}

std::shared_ptr<const kdist::Distribution> replicated_everywhere() {
  const std::size_t n = static_cast<std::size_t>(world_size());
  kdist::RuntimeDeviceMesh mesh({1, n}, {"data", "model"}, kdist::list_devices());
  return std::make_shared<kdist::ModelParallel>(kdist::LayoutMap(mesh), "data");
}

// Megatron's pair inside the residual: res_up column-parallel, res_down row-parallel (its output
// a pending sum over "model" that the residual's redistribute resolves); optionally the sum's
// output laid out by a rule.
std::shared_ptr<const kdist::Distribution> megatron(const std::vector<std::size_t>& shape,
                                                    bool output_rule) {
  kdist::RuntimeDeviceMesh mesh(shape, {"data", "model"}, kdist::list_devices());
  kdist::LayoutMap map(mesh);
  map["res_up/kernel"] = {kdist::replicated, "model"};
  map["res_up/bias"] = {"model"};
  map["res_down/kernel"] = {"model", kdist::replicated};
  if (output_rule) map["res/output"] = {"data", "model"};
  return std::make_shared<kdist::ModelParallel>(std::move(map), "data");
}

template <class T>
std::map<std::string, std::vector<double>> weights_of(kdist::BasicSequential<T>& m) {
  std::map<std::string, std::vector<double>> out;
  m.for_each_variable([&](auto& v) {
    auto full = kdist::full_tensor(v.value);
    out[v.path].assign(full.data(), full.data() + full.size());
  });
  return out;
}

// The loss on (x, y) with every variable as it is.
double loss_of(kdist::BasicSequential<double>& m, const kdist::ArrayDataset<double>& data) {
  return m.evaluate(data, {.batch_size = data.size(), .verbose = 0}).loss;
}

// Sets element i (row-major) of variable `path` to `value` (one process: the block is the whole).
void set_element(kdist::BasicSequential<double>& m, const std::string& path, std::size_t i,
                 double value) {
  m.for_each_variable([&](auto& v) {
    if (v.path != path) return;
    auto local = v.value.local();
    auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), local);
    h.data()[i] = value;
    Kokkos::deep_copy(local, h);
  });
}

TEST(Residual, GradientsAgreeWithFiniteDifferences) {
  if (world_size() != 1) GTEST_SKIP() << "one process";
  const auto data = kdist::test::small_data<double>();
  auto model = residual_model<double>();
  // SGD(1): one step moves every variable by minus its gradient.
  model.compile(replicated_everywhere(), kdist::Loss::mean_squared_error, kdist::SGD(1.0), 3);
  const auto before = weights_of(model);
  const double base = loss_of(model, data);
  model.fit(data, {.batch_size = data.size(), .epochs = 1, .shuffle = false, .verbose = 0});
  const auto after = weights_of(model);
  // back to the start, then central differences on a few elements of each residual variable
  for (const auto& [path, w] : before) {
    for (std::size_t i = 0; i < w.size(); ++i) set_element(model, path, i, w[i]);
  }
  EXPECT_NEAR(loss_of(model, data), base, 1e-12);
  const double eps = 1e-6;
  for (const std::string path :
       {"res_up/kernel", "res_up/bias", "res_down/kernel", "res_down/bias", "d1/kernel"}) {
    const auto& w = before.at(path);
    for (std::size_t i = 0; i < w.size(); i += w.size() / 5 + 1) {
      set_element(model, path, i, w[i] + eps);
      const double up = loss_of(model, data);
      set_element(model, path, i, w[i] - eps);
      const double down = loss_of(model, data);
      set_element(model, path, i, w[i]);
      const double numeric = (up - down) / (2 * eps);
      const double analytic = w[i] - after.at(path)[i];
      EXPECT_NEAR(analytic, numeric, 1e-6 * std::max(1.0, std::abs(numeric)))
          << path << "[" << i << "]";
    }
  }
}

TEST(Residual, MegatronPairInsideTrainsTheSameOnEveryMesh) {
  const auto data = kdist::test::small_data<double>();
  const kdist::FitOptions fit{.batch_size = 16, .epochs = 2, .shuffle = false, .verbose = 0};
  auto reference = residual_model<double>();
  reference.compile(replicated_everywhere(), kdist::Loss::mean_squared_error, kdist::Adam(), 5);
  const auto want = reference.fit(data, fit);
  const auto want_weights = weights_of(reference);
  for (const auto& shape : meshes()) {
    for (const bool rule : {false, true}) {
      auto dist = megatron(shape, rule);
      auto model = residual_model<double>();
      model.compile(dist, kdist::Loss::mean_squared_error, kdist::Adam(), 5);
      const auto got = model.fit(data, fit);
      const std::string what = name_of(*dist) + (rule ? " with res/output rule" : "");
      for (std::size_t e = 0; e < 2; ++e) {
        EXPECT_NEAR(got.epochs[e].loss, want.epochs[e].loss, 1e-10 * std::abs(want.epochs[e].loss))
            << what;
      }
      const auto w = weights_of(model);
      for (const auto& [path, ref] : want_weights) {
        double worst = 0;
        for (std::size_t i = 0; i < ref.size(); ++i) {
          worst =
              std::max(worst, std::abs(w.at(path)[i] - ref[i]) / std::max(1e-3, std::abs(ref[i])));
        }
        EXPECT_LT(worst, 1e-9) << what << " " << path;
      }
    }
  }
}

TEST(Residual, ErrorsSayWhatToFix) {
  const std::string empty = message_of<kdist::ValueError>([] { kdist::layers::Residual("r", {}); });
  EXPECT_NE(empty.find("at least one inner layer"), std::string::npos) << empty;
  // f changes the shape: 12 -> 7 features
  std::vector<kdist::Sequential::Layer> l;
  l.emplace_back(kdist::Sequential::Dense(12, Activation::relu, true, "d1"));
  l.emplace_back(Residual("res", {kdist::Sequential::Dense(7, Activation::relu, true, "bad")}));
  kdist::Sequential model(16, std::move(l));
  const std::string shape = message_of<kdist::ValueError>([&] {
    model.compile(replicated_everywhere(), kdist::Loss::mean_squared_error, kdist::SGD(0.1), 1);
  });
  EXPECT_NE(shape.find("Residual 'res'"), std::string::npos) << shape;
  EXPECT_NE(shape.find("(12,) to (7,)"), std::string::npos) << shape;
  EXPECT_NE(shape.find("Dense(12)"), std::string::npos) << shape;
}

}  // namespace
