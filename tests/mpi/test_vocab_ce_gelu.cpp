// kdist-mpi-ranks: 1
// One process, double: GELU (exact form) against its formula and its derivative against finite
// differences; the sparse categorical cross-entropy from logits against a naive log-softmax, its
// gradient against finite differences, its errors; Dense on (batch, sequence, features) against a
// naive product and its gradients against finite differences; Dropout on rank 3 against the
// global-flat-index mask; Flatten on rank 3.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <kdist/nn/layers/dense.hpp>
#include <kdist/nn/layers/dropout.hpp>
#include <kdist/nn/layers/flatten.hpp>
#include <kdist/nn/sparse_categorical_crossentropy.hpp>
#include <kdist/ops/activations.hpp>
#include <kdist/strategy/layout_map.hpp>
#include <kdist/strategy/model_parallel.hpp>
#include <kdist/tensor/distribute_tensor.hpp>

#include "host_views.hpp"

namespace {

using kdist::test::edit_on_host;
using kdist::test::host_copy;
using Tensor3 = kdist::DistributedTensor<double***>;
using Space = Kokkos::DefaultExecutionSpace::memory_space;

kdist::RuntimeDeviceMesh one_mesh() {
  return kdist::RuntimeDeviceMesh({1, 1}, {"data", "model"}, kdist::list_devices());
}
kdist::RuntimeTensorLayout replicated3() {
  return kdist::RuntimeTensorLayout({kdist::DimAxes(), kdist::DimAxes(), kdist::DimAxes()},
                                    one_mesh());
}

std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const kdist::ValueError& e) {
    return e.what();
  }
  return "(no ValueError)";
}
bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

double gelu_ref(double x) {
  return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0)));
}

// ---- GELU ---------------------------------------------------------------------------------------

TEST(Gelu, ValuesMatchTheErfFormulaAndTheDerivativeFiniteDifferences) {
  const std::size_t rows = 4, cols = 9;
  Kokkos::View<double**, Kokkos::LayoutRight, Space> x("x", rows, cols), y("y", rows, cols),
      ones("ones", rows, cols), dx("dx", rows, cols);
  auto value = [](std::size_t i, std::size_t j) { return -4.0 + 0.23 * double(i * 9 + j); };
  edit_on_host(x, [&](auto h) {
    for (std::size_t i = 0; i < rows; ++i)
      for (std::size_t j = 0; j < cols; ++j) h(i, j) = value(i, j);
  });
  Kokkos::deep_copy(ones, 1.0);
  kdist::ops::gelu(x, y);
  kdist::ops::gelu_backward(x, ones, dx);
  const auto hy = host_copy(y);
  const auto hdx = host_copy(dx);
  const double h = 1e-5;
  for (std::size_t i = 0; i < rows; ++i) {
    for (std::size_t j = 0; j < cols; ++j) {
      const double v = value(i, j);
      EXPECT_NEAR(hy(i, j), gelu_ref(v), 1e-14) << v;
      const double fd = (gelu_ref(v + h) - gelu_ref(v - h)) / (2 * h);
      EXPECT_NEAR(hdx(i, j), fd, 1e-9) << v;
    }
  }
  // In place.
  kdist::ops::gelu_inplace(x);
  const auto hx = host_copy(x);
  EXPECT_NEAR(hx(1, 2), gelu_ref(value(1, 2)), 1e-14);
}

// ---- sparse categorical cross-entropy -----------------------------------------------------------

double logit(std::size_t b, std::size_t s, std::size_t v) {
  return std::sin(double(b * 31 + s * 7 + v * 3)) * 2.0 + 0.1 * double(v);
}
int target_of(std::size_t b, std::size_t s, std::size_t vocab) {
  return static_cast<int>((b * 5 + s * 3 + 1) % vocab);
}

// The naive mean over positions of -log softmax(z)[target].
double naive_loss(const std::vector<double>& z, std::size_t B, std::size_t S, std::size_t V) {
  double total = 0;
  for (std::size_t b = 0; b < B; ++b) {
    for (std::size_t s = 0; s < S; ++s) {
      const double* row = &z[(b * S + s) * V];
      double sum = 0;
      for (std::size_t v = 0; v < V; ++v) sum += std::exp(row[v]);
      total += -(row[target_of(b, s, V)] - std::log(sum));
    }
  }
  return total / double(B * S);
}

Tensor3 tensor_of(const std::vector<double>& z, std::size_t B, std::size_t S, std::size_t V) {
  return kdist::distribute_tensor<double***>(z.data(), {B, S, V}, replicated3());
}

kdist::SparseTargets targets_of(std::size_t B, std::size_t S, std::size_t V) {
  Kokkos::View<std::int32_t**, Kokkos::LayoutRight, Space> t("t", B, S);
  edit_on_host(t, [&](auto h) {
    for (std::size_t b = 0; b < B; ++b)
      for (std::size_t s = 0; s < S; ++s) h(b, s) = target_of(b, s, V);
  });
  return t;
}

TEST(SparseCrossEntropy, LossIsTheNaiveLogSoftmaxAndTheGradientItsFiniteDifferences) {
  const std::size_t B = 2, S = 3, V = 7;
  std::vector<double> z(B * S * V);
  for (std::size_t b = 0; b < B; ++b)
    for (std::size_t s = 0; s < S; ++s)
      for (std::size_t v = 0; v < V; ++v) z[(b * S + s) * V + v] = logit(b, s, v);
  const auto targets = targets_of(B, S, V);
  const auto result = kdist::sparse_categorical_crossentropy(tensor_of(z, B, S, V), targets);
  EXPECT_NEAR(result.loss, naive_loss(z, B, S, V), 1e-13);
  EXPECT_EQ(result.dlogits.layout(), replicated3());
  const auto g = host_copy(result.dlogits.local());
  const double h = 1e-6;
  for (std::size_t k = 0; k < z.size(); ++k) {
    auto plus = z, minus = z;
    plus[k] += h;
    minus[k] -= h;
    const double fd = (naive_loss(plus, B, S, V) - naive_loss(minus, B, S, V)) / (2 * h);
    const std::size_t b = k / (S * V), s = (k / V) % S, v = k % V;
    EXPECT_NEAR(g(b, s, v), fd, 1e-8) << b << " " << s << " " << v;
  }
  // Large logits stay finite (the row max is subtracted).
  std::vector<double> big(z);
  for (auto& e : big) e *= 400.0;
  const auto r2 = kdist::sparse_categorical_crossentropy(tensor_of(big, B, S, V), targets);
  EXPECT_TRUE(std::isfinite(r2.loss));
}

TEST(SparseCrossEntropy, ErrorsAreValueErrorsThatSayWhatToDo) {
  const std::size_t B = 2, S = 3, V = 7;
  std::vector<double> z(B * S * V, 0.5);
  const auto logits = tensor_of(z, B, S, V);
  // A target outside [0, vocabulary).
  Kokkos::View<std::int32_t**, Kokkos::LayoutRight, Space> bad("bad", B, S);
  edit_on_host(bad, [&](auto h) {
    h(0, 1) = 7;
    h(1, 2) = -1;
  });
  auto msg = message_of([&] { (void)kdist::sparse_categorical_crossentropy(logits, bad); });
  EXPECT_TRUE(contains(msg, "2 target(s) on process 0 lie outside [0, 7) (the first is 7)")) << msg;
  // A targets View of another shape than the block's rows.
  Kokkos::View<std::int32_t**, Kokkos::LayoutRight, Space> wrong("wrong", S, B);
  msg = message_of([&] { (void)kdist::sparse_categorical_crossentropy(logits, wrong); });
  EXPECT_TRUE(contains(msg, "the targets View is 3x2 on process 0")) << msg;
  EXPECT_TRUE(contains(msg, "has 2x3 (batch, sequence) rows")) << msg;
  // Logits of rank 2 (through the layer-tensor form).
  const kdist::LayerTensor<double> matrix = kdist::distribute_tensor<double**>(
      z.data(), {B * S, V},
      kdist::RuntimeTensorLayout({kdist::DimAxes(), kdist::DimAxes()}, one_mesh()));
  msg = message_of([&] { (void)kdist::sparse_categorical_crossentropy(matrix, bad); });
  EXPECT_TRUE(contains(msg, "the logits have rank 2; it takes (batch, sequence, vocabulary)"))
      << msg;
  // The rank-3 layer tensor works.
  const kdist::LayerTensor<double> seq = logits;
  EXPECT_NEAR(kdist::sparse_categorical_crossentropy(seq, targets_of(B, S, V)).loss, std::log(7.0),
              1e-13);
}

// ---- Dense on (batch, sequence, features) ---------------------------------------------------------

std::shared_ptr<const kdist::Distribution> one_process_distribution() {
  return std::make_shared<kdist::ModelParallel>(kdist::LayoutMap(one_mesh()), "data");
}

// L = sum(y * w) for a fixed w, so dL/dy = w.
double weight_of(std::size_t b, std::size_t s, std::size_t u) {
  return std::cos(double(b * 13 + s * 5 + u * 2)) + 0.3;
}

double objective(kdist::layers::BasicDense<double>& d, const Tensor3& x) {
  const auto y = host_copy(d.forward(x).local());
  double L = 0;
  for (std::size_t b = 0; b < y.extent(0); ++b)
    for (std::size_t s = 0; s < y.extent(1); ++s)
      for (std::size_t u = 0; u < y.extent(2); ++u) L += y(b, s, u) * weight_of(b, s, u);
  return L;
}

// Perturbs element `k` of a View (flat index) by `delta`.
template <class View>
void nudge(const View& v, std::size_t k, double delta) {
  edit_on_host(v, [&](auto h) { h.data()[k] += delta; });
}

void check_dense_rank3_gradients(kdist::layers::Activation act) {
  const std::size_t B = 2, S = 3, F = 5, U = 4;
  auto dist = one_process_distribution();
  kdist::layers::BasicDense<double> d(U, act, true, "d");
  EXPECT_EQ(d.build(kdist::Shape{S, F}, *dist, 7), (kdist::Shape{S, U}));
  // A non-zero bias, so its effect is tested too.
  edit_on_host(d.bias()->value.local(), [](auto h) {
    for (std::size_t u = 0; u < h.extent(0); ++u) h(u) = 0.1 * double(u) - 0.15;
  });
  Tensor3 x = kdist::distribute_tensor<double***>(
      [](std::size_t b, std::size_t s, std::size_t f) {
        return std::sin(double(b * 11 + s * 3 + f)) * 1.5;
      },
      {B, S, F}, replicated3());
  // Output against a naive product.
  {
    const auto y = host_copy(d.forward(x).local());
    const auto hx = host_copy(x.local());
    const auto hk = host_copy(d.kernel().value.local());
    const auto hb = host_copy(d.bias()->value.local());
    for (std::size_t b = 0; b < B; ++b) {
      for (std::size_t s = 0; s < S; ++s) {
        std::vector<double> z(U);
        double zmax = -1e300;
        for (std::size_t u = 0; u < U; ++u) {
          z[u] = hb(u);
          for (std::size_t f = 0; f < F; ++f) z[u] += hx(b, s, f) * hk(f, u);
          zmax = std::max(zmax, z[u]);
        }
        double sum = 0;
        for (std::size_t u = 0; u < U; ++u) sum += std::exp(z[u] - zmax);
        for (std::size_t u = 0; u < U; ++u) {
          double want = z[u];
          if (act == kdist::layers::Activation::gelu) want = gelu_ref(z[u]);
          if (act == kdist::layers::Activation::relu) want = std::max(z[u], 0.0);
          if (act == kdist::layers::Activation::softmax) want = std::exp(z[u] - zmax) / sum;
          EXPECT_NEAR(y(b, s, u), want, 1e-13);
        }
      }
    }
  }
  (void)d.forward(x);
  Tensor3 dy = kdist::distribute_tensor<double***>(
      [](std::size_t b, std::size_t s, std::size_t u) { return weight_of(b, s, u); }, {B, S, U},
      replicated3());
  const auto dx = kdist::backward_and_resolve(d, dy, true);
  ASSERT_TRUE(dx.has_value());
  const auto hdx = host_copy(dx->local());
  const auto hdk = host_copy(d.kernel().grad.local());
  const auto hdb = host_copy(d.bias()->grad.local());
  const double h = 1e-6;
  for (std::size_t k = 0; k < F * U; ++k) {
    nudge(d.kernel().value.local(), k, h);
    const double lp = objective(d, x);
    nudge(d.kernel().value.local(), k, -2 * h);
    const double lm = objective(d, x);
    nudge(d.kernel().value.local(), k, h);
    EXPECT_NEAR(hdk.data()[k], (lp - lm) / (2 * h), 1e-7) << "kernel " << k;
  }
  for (std::size_t k = 0; k < U; ++k) {
    nudge(d.bias()->value.local(), k, h);
    const double lp = objective(d, x);
    nudge(d.bias()->value.local(), k, -2 * h);
    const double lm = objective(d, x);
    nudge(d.bias()->value.local(), k, h);
    EXPECT_NEAR(hdb(k), (lp - lm) / (2 * h), 1e-7) << "bias " << k;
  }
  for (std::size_t k = 0; k < B * S * F; ++k) {
    nudge(x.local(), k, h);
    const double lp = objective(d, x);
    nudge(x.local(), k, -2 * h);
    const double lm = objective(d, x);
    nudge(x.local(), k, h);
    EXPECT_NEAR(hdx.data()[k], (lp - lm) / (2 * h), 1e-7) << "input " << k;
  }
}

TEST(DenseOnSequencesOneProcess, GeluGradientsMatchFiniteDifferences) {
  check_dense_rank3_gradients(kdist::layers::Activation::gelu);
}
TEST(DenseOnSequencesOneProcess, LinearAndSoftmaxGradientsMatchFiniteDifferences) {
  check_dense_rank3_gradients(kdist::layers::Activation::linear);
  check_dense_rank3_gradients(kdist::layers::Activation::softmax);
}

TEST(DenseOnSequencesOneProcess, RankTwoGeluGradientMatchesFiniteDifferences) {
  using Matrix = kdist::DistributedTensor<double**>;
  const std::size_t B = 3, F = 4, U = 2;
  auto dist = one_process_distribution();
  kdist::layers::BasicDense<double> d(U, kdist::layers::Activation::gelu, false, "g");
  d.build(kdist::Shape{F}, *dist, 3);
  const kdist::RuntimeTensorLayout rep({kdist::DimAxes(), kdist::DimAxes()}, one_mesh());
  Matrix x = kdist::distribute_tensor<double**>(
      [](std::size_t b, std::size_t f) { return std::cos(double(b * 4 + f)); }, {B, F}, rep);
  auto objective2 = [&] {
    const auto y = host_copy(d.forward(x).local());
    double L = 0;
    for (std::size_t b = 0; b < B; ++b)
      for (std::size_t u = 0; u < U; ++u) L += y(b, u) * weight_of(b, 0, u);
    return L;
  };
  (void)d.forward(x);
  Matrix dy = kdist::distribute_tensor<double**>(
      [](std::size_t b, std::size_t u) { return weight_of(b, 0, u); }, {B, U}, rep);
  const auto dx = kdist::backward_and_resolve(d, dy, true);
  const auto hdx = host_copy(dx->local());
  const auto hdk = host_copy(d.kernel().grad.local());
  const double h = 1e-6;
  for (std::size_t k = 0; k < F * U; ++k) {
    nudge(d.kernel().value.local(), k, h);
    const double lp = objective2();
    nudge(d.kernel().value.local(), k, -2 * h);
    const double lm = objective2();
    nudge(d.kernel().value.local(), k, h);
    EXPECT_NEAR(hdk.data()[k], (lp - lm) / (2 * h), 1e-7) << "kernel " << k;
  }
  for (std::size_t k = 0; k < B * F; ++k) {
    nudge(x.local(), k, h);
    const double lp = objective2();
    nudge(x.local(), k, -2 * h);
    const double lm = objective2();
    nudge(x.local(), k, h);
    EXPECT_NEAR(hdx.data()[k], (lp - lm) / (2 * h), 1e-7) << "input " << k;
  }
}

TEST(DenseOnSequencesOneProcess, ErrorsNameTheShapes) {
  auto dist = one_process_distribution();
  kdist::layers::BasicDense<double> d(4, kdist::layers::Activation::linear, true, "d");
  auto msg = message_of([&] { d.build(kdist::Shape{2, 3, 4}, *dist, 0); });
  EXPECT_TRUE(contains(msg,
                       "Dense 'd' takes inputs of shape (features,) but the layer before it "
                       "gives (2, 3, 4); put a kdist::layers::Flatten before it"))
      << msg;
  d.build(kdist::Shape{3, 5}, *dist, 0);
  const kdist::LayerTensor<double> images = kdist::DistributedTensor<double****>::zeros(
      {2, 3, 5, 1},
      kdist::RuntimeTensorLayout(
          {kdist::DimAxes(), kdist::DimAxes(), kdist::DimAxes(), kdist::DimAxes()}, one_mesh()));
  msg = message_of([&] { (void)d.forward(images, kdist::StepContext{}); });
  EXPECT_TRUE(contains(msg,
                       "Dense 'd' takes tensors of rank 2 but was given one of rank 4; Dense "
                       "takes (batch, features) or (batch, sequence, features)"))
      << msg;
  Tensor3 x = Tensor3::zeros({2, 3, 6}, replicated3());
  msg = message_of([&] { (void)d.forward(x); });
  EXPECT_TRUE(contains(msg, "the input has shape (2, 3, 6) but the layer was built for 5 features"))
      << msg;
}

TEST(DenseOnSequencesOneProcess, AnOutputRuleOfRankTwoIsAValueError) {
  kdist::LayoutMap map(one_mesh());
  map["d/output"] = {"data", kdist::replicated};
  const auto dist = std::make_shared<kdist::ModelParallel>(std::move(map), "data");
  kdist::layers::BasicDense<double> d(4, kdist::layers::Activation::linear, true, "d");
  d.build(kdist::Shape{3, 5}, *dist, 0);
  const Tensor3 x = Tensor3::zeros({2, 3, 5}, replicated3());
  const auto msg = message_of([&] { (void)d.forward(x); });
  EXPECT_TRUE(contains(msg,
                       "the distribution lays out 'd/output' as ('data', None) (rank 2) but "
                       "the output is (batch, sequence, units); give a layout of rank 3"))
      << msg;
}

TEST(DropoutBlock, ErrorsNameTheBlockAndTheRate) {
  Kokkos::View<double***, Kokkos::LayoutRight, Space> x("x", 2, 4, 3);
  kdist::ops::DropoutBlockParams<3> p;
  p.rate = 0.5;
  p.offsets = {0, 4, 0};
  p.global_extents = {2, 6, 3};
  auto msg = message_of([&] { kdist::ops::dropout_block(x, x, p); });
  EXPECT_TRUE(contains(msg, "dimension 1: elements [4, 8) do not fit in the global extent 6"))
      << msg;
  p.offsets = {0, 0, 0};
  p.rate = 1.0;
  msg = message_of([&] { kdist::ops::dropout_block(x, x, p); });
  EXPECT_TRUE(contains(msg, "rate is 1.000000; the dropout rate must be in [0, 1)")) << msg;
  p.rate = 0.5;
  Kokkos::View<double***, Kokkos::LayoutRight, Space> y("y", 2, 4, 2);
  msg = message_of([&] { kdist::ops::dropout_block(x, y, p); });
  EXPECT_TRUE(contains(msg, "y is 2x4x2, expected 2x4x3")) << msg;
}

// ---- Dropout and Flatten on rank 3 --------------------------------------------------------------

TEST(DropoutOnSequencesOneProcess, MaskIsKeyedByTheGlobalFlatIndex) {
  const std::size_t B = 3, S = 4, F = 5;
  kdist::layers::BasicDropout<double> drop(0.4, "drop");
  Tensor3 x = kdist::distribute_tensor<double***>(
      [](std::size_t, std::size_t, std::size_t) { return 1.0; }, {B, S, F}, replicated3());
  kdist::StepContext ctx;
  ctx.seed = 11;
  ctx.step = 2;
  const auto y = std::get<Tensor3>(drop.forward(kdist::LayerTensor<double>(x), ctx));
  const auto hy = host_copy(y.local());
  const auto key = kdist::random_key(11, kdist::stream_id("drop"), 2);
  std::size_t kept = 0;
  for (std::size_t k = 0; k < B * S * F; ++k) {
    const bool keep = kdist::dropout_keep(key, k, 0.4f);
    EXPECT_DOUBLE_EQ(hy.data()[k], keep ? 1.0 / 0.6 : 0.0) << k;
    kept += keep ? 1 : 0;
  }
  EXPECT_GT(kept, 0u);
  EXPECT_LT(kept, B * S * F);
  const auto dx =
      std::get<Tensor3>(*kdist::backward_and_resolve(drop, kdist::LayerTensor<double>(x), true));
  const auto hdx = host_copy(dx.local());
  for (std::size_t k = 0; k < B * S * F; ++k) EXPECT_DOUBLE_EQ(hdx.data()[k], hy.data()[k]);
  // Outside training: the identity.
  ctx.training = false;
  const auto same = std::get<Tensor3>(drop.forward(kdist::LayerTensor<double>(x), ctx));
  EXPECT_EQ(same.local().data(), x.local().data());
}

// The layer draws the mask once, in the forward, and its backward applies exactly that mask (the
// naive reference: the scalar generator at each global flat index), step after step.
TEST(DropoutLayer, BackwardAppliesTheForwardsMask) {
  using Matrix = kdist::DistributedTensor<double**>;
  const std::size_t B = 6, F = 37;
  const kdist::RuntimeTensorLayout replicated2({kdist::DimAxes(), kdist::DimAxes()}, one_mesh());
  kdist::layers::BasicDropout<double> drop(0.4, "drop");
  const Matrix x = kdist::distribute_tensor<double**>(
      [](std::size_t i, std::size_t j) { return 1.0 + double(i * 100 + j); }, {B, F}, replicated2);
  const Matrix dy = kdist::distribute_tensor<double**>(
      [](std::size_t i, std::size_t j) { return -0.5 - double(i + 7 * j); }, {B, F}, replicated2);
  kdist::StepContext ctx;
  ctx.seed = 11;
  for (std::uint64_t step : {2u, 3u}) {
    ctx.step = step;
    const auto y = std::get<Matrix>(drop.forward(kdist::LayerTensor<double>(x), ctx));
    const auto dx =
        std::get<Matrix>(*kdist::backward_and_resolve(drop, kdist::LayerTensor<double>(dy), true));
    const auto hx = host_copy(x.local()), hy = host_copy(y.local()), hdy = host_copy(dy.local()),
               hdx = host_copy(dx.local());
    const auto key = kdist::random_key(11, kdist::stream_id("drop"), step);
    std::size_t kept = 0;
    for (std::size_t i = 0; i < B; ++i) {
      for (std::size_t j = 0; j < F; ++j) {
        const bool keep = kdist::dropout_uniform(key, i * F + j) < 0.6f;
        kept += keep ? 1 : 0;
        EXPECT_EQ(hy(i, j), keep ? hx(i, j) / 0.6 : 0.0) << i << ", " << j;
        EXPECT_EQ(hdx(i, j), keep ? hdy(i, j) / 0.6 : 0.0) << i << ", " << j;
      }
    }
    EXPECT_GT(kept, 0u);
    EXPECT_LT(kept, B * F);
  }
  // Rank 3 after rank 2: the mask buffer follows the block, and the backward the rank-3 mask.
  const std::size_t S = 4;
  Tensor3 x3 = kdist::distribute_tensor<double***>(
      [](std::size_t, std::size_t, std::size_t) { return 2.0; }, {B, S, F}, replicated3());
  Tensor3 dy3 = kdist::distribute_tensor<double***>(
      [](std::size_t b, std::size_t s, std::size_t f) { return double(b + s + f); }, {B, S, F},
      replicated3());
  ctx.step = 4;
  const auto y3 = std::get<Tensor3>(drop.forward(kdist::LayerTensor<double>(x3), ctx));
  const auto dx3 =
      std::get<Tensor3>(*kdist::backward_and_resolve(drop, kdist::LayerTensor<double>(dy3), true));
  const auto hy3 = host_copy(y3.local()), hdy3 = host_copy(dy3.local()),
             hdx3 = host_copy(dx3.local());
  const auto key4 = kdist::random_key(11, kdist::stream_id("drop"), 4);
  for (std::size_t k = 0; k < B * S * F; ++k) {
    const bool keep = kdist::dropout_uniform(key4, k) < 0.6f;
    EXPECT_EQ(hy3.data()[k], keep ? 2.0 / 0.6 : 0.0) << k;
    EXPECT_EQ(hdx3.data()[k], keep ? hdy3.data()[k] / 0.6 : 0.0) << k;
  }
}

TEST(FlattenOnSequences, FlattensRowMajorAndBack) {
  const std::size_t B = 2, S = 3, F = 4;
  kdist::layers::BasicFlatten<double> flat("f");
  Tensor3 x = kdist::distribute_tensor<double***>(
      [](std::size_t b, std::size_t s, std::size_t f) { return double(b * 100 + s * 10 + f); },
      {B, S, F}, replicated3());
  const auto y = std::get<kdist::DistributedTensor<double**>>(
      flat.forward(kdist::LayerTensor<double>(x), kdist::StepContext{}));
  EXPECT_EQ(y.shape()[1], S * F);
  const auto hy = host_copy(y.local());
  EXPECT_EQ(hy(1, 2 * F + 3), 123.0);
  const auto back =
      std::get<Tensor3>(*kdist::backward_and_resolve(flat, kdist::LayerTensor<double>(y), true));
  const auto hb = host_copy(back.local());
  EXPECT_EQ(hb(1, 2, 3), 123.0);
  EXPECT_EQ(back.layout(), x.layout());
}

}  // namespace
