// kdist-mpi-ranks: 1
// Embedding and LayerNormalization on one process, in double: forward values against naive
// loops, gradients against central finite differences of L = sum(y * w) for a fixed random w.
#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <Kokkos_Core.hpp>

#include <kdist/nn/layer.hpp>
#include <kdist/nn/layers/embedding.hpp>
#include <kdist/nn/layers/layer_normalization.hpp>
#include <kdist/strategy/layout_map.hpp>
#include <kdist/strategy/model_parallel.hpp>
#include <kdist/tensor/distribute_tensor.hpp>

#include "host_views.hpp"

namespace {

using Embedding = kdist::layers::BasicEmbedding<double>;
using LayerNorm = kdist::layers::BasicLayerNormalization<double>;
using Tokens = kdist::DistributedTensor<double**>;
using Seq = kdist::DistributedTensor<double***>;
using Mat = kdist::DistributedTensor<double**>;
using Vec = kdist::DistributedTensor<double*>;

static_assert(kdist::Layer<Embedding> && kdist::Layer<kdist::layers::Embedding>);
static_assert(kdist::Layer<LayerNorm> && kdist::Layer<kdist::layers::LayerNormalization>);

kdist::RuntimeDeviceMesh one_mesh() {
  return kdist::RuntimeDeviceMesh({1, 1}, {"data", "model"}, kdist::list_devices());
}
std::shared_ptr<const kdist::Distribution> one_process() {
  return std::make_shared<kdist::ModelParallel>(kdist::LayoutMap(one_mesh()), "data");
}
kdist::RuntimeTensorLayout replicated(std::size_t rank) {
  return kdist::RuntimeTensorLayout(std::vector<kdist::DimAxes>(rank), one_mesh());
}

std::vector<double> uniform(std::size_t n, std::uint64_t seed, double lo = -1, double hi = 1) {
  std::mt19937_64 g(seed);
  std::uniform_real_distribution<double> u(lo, hi);
  std::vector<double> out(n);
  for (auto& v : out) v = u(g);
  return out;
}
template <class Tensor>
std::vector<double> values(const Tensor& t) {
  auto full = kdist::full_tensor(t);
  return std::vector<double>(full.data(), full.data() + full.size());
}
double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (std::size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}
// Sets element i of a replicated tensor.
template <class Tensor>
void set(Tensor& t, std::size_t i, double v) {
  kdist::test::edit_on_host(t.local(), [&](auto& h) { h.data()[i] = v; });
}
void expect_near_rel(double got, double want, double rel, const std::string& what) {
  EXPECT_LE(std::abs(got - want), rel * std::max(1.0, std::abs(want)))
      << what << ": " << got << " vs " << want;
}

constexpr std::size_t V = 7, D = 5, B = 3, S = 4;

Tokens tokens_of(const std::vector<double>& ids) {
  return kdist::distribute_tensor<double**>(ids.data(), {B, S}, replicated(2));
}
std::vector<double> some_ids() {  // repeats (3 twice, 0 three times) and the last id
  return {3, 0, 6, 3, 1, 0, 2, 5, 0, 4, 6, 6};
}

TEST(EmbeddingOneProcess, InitialiserIsKerasUniformKeyedByPath) {
  Embedding emb(V, D, "emb");
  emb.build(*one_process(), 42);
  const auto table = values(emb.embeddings().value);
  const auto key = kdist::random_key(42, kdist::stream_id("emb/embeddings"), 0);
  ASSERT_EQ(table.size(), V * D);
  for (std::size_t i = 0; i < V * D; ++i) {
    // nvcc fuses the multiply-add on the device: one rounding fewer than the host expression.
    EXPECT_NEAR(table[i], -0.05 + 0.1 * static_cast<double>(kdist::uniform01(key, i)), 1e-16) << i;
    EXPECT_LE(std::abs(table[i]), 0.05);
  }
  EXPECT_EQ(emb.embeddings().path, "emb/embeddings");
  EXPECT_EQ(std::string(Embedding::keras_class), "Embedding");
}

TEST(EmbeddingOneProcess, ForwardLooksUpRows) {
  Embedding emb(V, D, "emb");
  EXPECT_EQ(emb.build({S}, *one_process(), 1), (kdist::Shape{S, D}));
  const auto ids = some_ids();
  const Seq y = emb.forward(tokens_of(ids));
  EXPECT_EQ(y.shape(), (Seq::shape_type{B, S, D}));
  const auto table = values(emb.embeddings().value);
  const auto got = values(y);
  for (std::size_t p = 0; p < B * S; ++p) {
    for (std::size_t k = 0; k < D; ++k) {
      EXPECT_EQ(got[p * D + k], table[static_cast<std::size_t>(ids[p]) * D + k]) << p << "," << k;
    }
  }
}

TEST(EmbeddingOneProcess, TableGradientMatchesFiniteDifferences) {
  Embedding emb(V, D, "emb");
  emb.build({S}, *one_process(), 3);
  const auto tokens = tokens_of(some_ids());
  const auto w = uniform(B * S * D, 5);
  const Seq dy = kdist::distribute_tensor<double***>(w.data(), {B, S, D}, replicated(3));
  emb.forward(tokens);
  kdist::backward_and_resolve(emb, dy);
  const auto grad = values(emb.embeddings().grad);
  auto& table = emb.embeddings().value;
  const double h = 1e-3;  // the lookup is linear: central differences are exact up to rounding
  for (std::size_t i = 0; i < V * D; ++i) {
    const double v0 = values(table)[i];
    set(table, i, v0 + h);
    const double lp = dot(values(emb.forward(tokens)), w);
    set(table, i, v0 - h);
    const double lm = dot(values(emb.forward(tokens)), w);
    set(table, i, v0);
    expect_near_rel(grad[i], (lp - lm) / (2 * h), 1e-9, "dtable " + std::to_string(i));
  }
  // Row 0 appears three times, so its gradient is the sum of three rows of w.
  EXPECT_NE(grad[0], 0.0);
}

TEST(EmbeddingOneProcess, BackwardThroughTheLayerConceptGivesNoInputGradient) {
  kdist::AnyLayer<double> layer(Embedding(V, D, "emb"));
  layer.build({S}, *one_process(), 3);
  auto y = layer.forward(kdist::LayerTensor<double>(tokens_of(some_ids())), {});
  ASSERT_TRUE(std::holds_alternative<Seq>(y));
  EXPECT_FALSE(kdist::backward_and_resolve(layer, y, true).has_value());
  EXPECT_EQ(layer.keras_class(), "Embedding");
}

// ---- LayerNormalization -------------------------------------------------------------------------

// Naive y = (x - mean) / sqrt(var + eps) * gamma + beta over the last axis of rows of d.
std::vector<double> naive_layer_norm(const std::vector<double>& x, std::size_t d,
                                     const std::vector<double>& gamma,
                                     const std::vector<double>& beta, double eps) {
  std::vector<double> y(x.size());
  for (std::size_t r = 0; r < x.size() / d; ++r) {
    double mean = 0, var = 0;
    for (std::size_t j = 0; j < d; ++j) mean += x[r * d + j] / double(d);
    for (std::size_t j = 0; j < d; ++j) var += (x[r * d + j] - mean) * (x[r * d + j] - mean);
    var /= double(d);
    for (std::size_t j = 0; j < d; ++j) {
      y[r * d + j] = (x[r * d + j] - mean) / std::sqrt(var + eps) * gamma[j] + beta[j];
    }
  }
  return y;
}

// A built layer with random gamma and beta.
LayerNorm random_layer_norm(std::size_t d) {
  LayerNorm ln("ln");
  ln.build(d, *one_process());
  const auto g = uniform(d, 11, 0.5, 1.5), b = uniform(d, 12);
  for (std::size_t j = 0; j < d; ++j) {
    set(ln.gamma()->value, j, g[j]);
    set(ln.beta()->value, j, b[j]);
  }
  return ln;
}

TEST(LayerNormalizationOneProcess, VariablesAreKerasOnesAndZeros) {
  LayerNorm ln;
  EXPECT_EQ(ln.name(), "layer_normalization");
  EXPECT_EQ(ln.epsilon(), 1e-3);
  EXPECT_EQ(ln.build({S, D}, *one_process(), 0), (kdist::Shape{S, D}));
  EXPECT_EQ(ln.gamma()->path, "layer_normalization/gamma");
  EXPECT_EQ(ln.beta()->path, "layer_normalization/beta");
  EXPECT_EQ(values(ln.gamma()->value), std::vector<double>(D, 1.0));
  EXPECT_EQ(values(ln.beta()->value), std::vector<double>(D, 0.0));
  EXPECT_EQ(ln.variables().size(), 2u);
}

TEST(LayerNormalizationOneProcess, ForwardMatchesNaiveLoopsOnRank3AndRank2) {
  auto ln = random_layer_norm(D);
  const auto x = uniform(B * S * D, 21, -3, 2);
  const auto want =
      naive_layer_norm(x, D, values(ln.gamma()->value), values(ln.beta()->value), 1e-3);
  const auto y3 =
      values(ln.forward(kdist::distribute_tensor<double***>(x.data(), {B, S, D}, replicated(3))));
  const auto y2 =
      values(ln.forward(kdist::distribute_tensor<double**>(x.data(), {B * S, D}, replicated(2))));
  for (std::size_t i = 0; i < x.size(); ++i) {
    expect_near_rel(y3[i], want[i], 1e-13, "rank 3, " + std::to_string(i));
    expect_near_rel(y2[i], want[i], 1e-13, "rank 2, " + std::to_string(i));
  }
}

TEST(LayerNormalizationOneProcess, GradientsMatchFiniteDifferences) {
  auto ln = random_layer_norm(D);
  auto xv = uniform(B * S * D, 31, -2, 2);
  const auto w = uniform(B * S * D, 32);
  auto x = kdist::distribute_tensor<double***>(xv.data(), {B, S, D}, replicated(3));
  const Seq dy = kdist::distribute_tensor<double***>(w.data(), {B, S, D}, replicated(3));
  ln.forward(x);
  const auto dx = kdist::backward_and_resolve(ln, dy, true);
  ASSERT_TRUE(dx.has_value());
  const auto got_dx = values(*dx);
  const auto got_dgamma = values(ln.gamma()->grad);
  const auto got_dbeta = values(ln.beta()->grad);
  const double h = 1e-5;
  auto loss = [&] { return dot(values(ln.forward(x)), w); };
  auto central = [&](auto& t, std::size_t i) {
    const double v0 = values(t)[i];
    set(t, i, v0 + h);
    const double lp = loss();
    set(t, i, v0 - h);
    const double lm = loss();
    set(t, i, v0);
    return (lp - lm) / (2 * h);
  };
  for (std::size_t i = 0; i < xv.size(); ++i) {
    expect_near_rel(got_dx[i], central(x, i), 1e-6, "dx " + std::to_string(i));
  }
  for (std::size_t j = 0; j < D; ++j) {
    expect_near_rel(got_dgamma[j], central(ln.gamma()->value, j), 1e-6, "dgamma");
    expect_near_rel(got_dbeta[j], central(ln.beta()->value, j), 1e-6, "dbeta");
  }
}

TEST(LayerNormalizationOneProcess, WithoutCenterOrScaleHasNoSuchVariable) {
  kdist::layers::BasicLayerNormalization<double> ln("ln", 1e-3, /*center=*/false,
                                                    /*scale=*/false);
  ln.build(D, *one_process());
  EXPECT_TRUE(ln.variables().empty());
  const auto x = uniform(B * D, 41);
  const auto y =
      values(ln.forward(kdist::distribute_tensor<double**>(x.data(), {B, D}, replicated(2))));
  const auto want =
      naive_layer_norm(x, D, std::vector<double>(D, 1.0), std::vector<double>(D, 0.0), 1e-3);
  for (std::size_t i = 0; i < x.size(); ++i) expect_near_rel(y[i], want[i], 1e-13, "y");
}

}  // namespace
