// kdist-mpi-ranks: 1 2 4
// Embedding and LayerNormalization (issue 20) on every mesh (data, model) of the world's size give
// the outputs and gradients that every process computing everything gives (double, 1e-10
// relative): tables replicated, vocabulary-parallel ("model", None), column-parallel
// (None, "model") and FSDP + vocabulary ("data", "model"); tokens batch- or sequence-sharded;
// outputs in the distribution's layout (sequence parallelism: a reduce-scatter); layer-norm inputs
// batch-, sequence- or feature-sharded, gamma and beta sharded or not. Every error a user meets is
// a ValueError with the same message on every process.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <cstddef>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <kdist/nn/layer.hpp>
#include <kdist/nn/layers/embedding.hpp>
#include <kdist/nn/layers/layer_normalization.hpp>
#include <kdist/parallel/devices.hpp>
#include <kdist/strategy/layout_map.hpp>
#include <kdist/strategy/model_parallel.hpp>
#include <kdist/tensor/distribute_tensor.hpp>

#include "mpi/count_allocations.hpp"
#include "mpi/mpi_test_util.hpp"

namespace {

using kdist::test::contains;
using kdist::test::message_of;
using kdist::test::world_size;
using Embedding = kdist::layers::BasicEmbedding<double>;
using LayerNorm = kdist::layers::BasicLayerNormalization<double>;
using Axes = std::vector<kdist::DimAxes>;
using Dist = std::shared_ptr<const kdist::Distribution>;
using kdist::replicated;

static_assert(kdist::Layer<Embedding> && kdist::Layer<LayerNorm>);

std::vector<std::vector<std::size_t>> meshes() {
  const auto n = static_cast<std::size_t>(world_size());
  if (n == 1) return {{1, 1}};
  if (n == 2) return {{2, 1}, {1, 2}};
  return {{4, 1}, {2, 2}, {1, 4}};
}
kdist::RuntimeDeviceMesh mesh_of(const std::vector<std::size_t>& shape) {
  return kdist::RuntimeDeviceMesh(shape, {"data", "model"}, kdist::list_devices());
}
// `rules`: path -> layout on a (data, model) mesh of `shape`.
Dist distribution(const std::vector<std::size_t>& shape, const std::map<std::string, Axes>& rules) {
  kdist::LayoutMap map(mesh_of(shape));
  for (const auto& [path, axes] : rules) map[path] = axes;
  return std::make_shared<kdist::ModelParallel>(std::move(map), "data");
}
// Every process computes everything: a (1, n) mesh without rules.
std::vector<std::size_t> everywhere() {
  return {1, static_cast<std::size_t>(world_size())};
}

std::string repr(const Axes& axes) {
  return kdist::RuntimeTensorLayout(axes).axes_repr();
}
std::vector<double> uniform(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 g(seed);
  std::uniform_real_distribution<double> u(-1, 1);
  std::vector<double> out(n);
  for (auto& v : out) v = u(g);
  return out;
}
template <class Tensor>
std::vector<double> values(const Tensor& t) {
  auto full = kdist::full_tensor(t);
  return std::vector<double>(full.data(), full.data() + full.size());
}
void expect_close(const std::vector<double>& got, const std::vector<double>& want,
                  const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double worst = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    worst = std::max(worst, std::abs(got[i] - want[i]) / std::max(1.0, std::abs(want[i])));
  }
  EXPECT_LE(worst, 1e-10) << what;
}
template <class DataType>
auto spread(const std::vector<double>& global,
            const typename kdist::DistributedTensor<DataType>::shape_type& shape,
            const std::vector<std::size_t>& mesh, const Axes& axes) {
  return kdist::distribute_tensor<DataType>(global.data(), shape,
                                            kdist::RuntimeTensorLayout(axes, mesh_of(mesh)));
}
// A message every process must have alike.
void expect_same_on_every_process(const std::string& msg) {
  int n = static_cast<int>(msg.size());
  MPI_Bcast(&n, 1, MPI_INT, 0, MPI_COMM_WORLD);
  std::string zero = msg;
  zero.resize(static_cast<std::size_t>(n));
  MPI_Bcast(zero.data(), n, MPI_CHAR, 0, MPI_COMM_WORLD);
  EXPECT_EQ(msg, zero) << "process " << kdist::test::world_rank() << " got another message";
}

// ---- Embedding ----------------------------------------------------------------------------------

constexpr std::size_t V = 11, D = 6, B = 4, S = 6;

std::vector<double> token_ids() {
  std::mt19937_64 g(99);
  std::vector<double> ids(B * S);
  for (auto& v : ids) v = static_cast<double>(g() % V);
  ids[0] = ids[7] = ids[13] = 3;  // repeats within and across examples
  return ids;
}

struct EmbeddingResult {
  std::vector<double> table, y, grad;
};

// Forward and backward of Embedding "emb" under `dist`, tokens laid out by `token_axes`, the
// output's gradient given in `dy_axes`; checks the layouts it promises.
EmbeddingResult run_embedding(const Dist& dist, const std::vector<std::size_t>& mesh,
                              const Axes& token_axes, const Axes& dy_axes,
                              const std::optional<Axes>& want_output) {
  Embedding emb(V, D, "emb");
  EXPECT_EQ(emb.build({S}, *dist, 1234), (kdist::Shape{S, D}));
  const auto y = emb.forward(spread<double**>(token_ids(), {B, S}, mesh, token_axes));
  if (want_output) {
    EXPECT_EQ(y.layout().axes_repr(), repr(*want_output));
  }
  EXPECT_FALSE(y.is_partial());
  const auto w = uniform(B * S * D, 5);
  kdist::backward_and_resolve(emb, spread<double***>(w, {B, S, D}, mesh, dy_axes));
  EXPECT_EQ(emb.embeddings().grad.layout(), emb.embeddings().value.layout());
  return {values(emb.embeddings().value), values(y), values(emb.embeddings().grad)};
}

TEST(Embedding, EveryTableLayoutAndTokenLayoutGivesTheValuesOfOneProcess) {
  const auto want = run_embedding(distribution(everywhere(), {}), everywhere(), {{}, {}},
                                  {{}, {}, {}}, Axes{{}, {}, {}});
  const std::vector<Axes> tables{{{}, {}}, {"model", {}}, {{}, "model"}, {"data", "model"}};
  for (const auto& shape : meshes()) {
    for (const auto& table : tables) {
      for (const Axes& tokens : {Axes{"data", {}}, Axes{"data", "model"}}) {
        const std::string what = "mesh " + mesh_of(shape).to_string() + ", table " + repr(table) +
                                 ", tokens " + repr(tokens);
        // Default output: the tokens' rows, the table's features unless the tokens use the axis.
        Axes out{tokens[0], tokens[1], table[1] == tokens[1] ? kdist::DimAxes() : table[1]};
        if (table[1] == tokens[0]) out[2] = {};
        const auto got = run_embedding(distribution(shape, {{"emb/embeddings", table}}), shape,
                                       tokens, {"data", {}, {}}, out);
        expect_close(got.table, want.table, what + ": table");
        expect_close(got.y, want.y, what + ": y");
        expect_close(got.grad, want.grad, what + ": d table");
      }
    }
  }
}

TEST(Embedding, SequenceParallelOutputIsReduceScatteredFromTheVocabularyShards) {
  const auto want = run_embedding(distribution(everywhere(), {}), everywhere(), {{}, {}},
                                  {{}, {}, {}}, std::nullopt);
  const Axes sp{"data", "model", {}};
  for (const auto& shape : meshes()) {
    for (const Axes& table : {Axes{"model", {}}, Axes{"data", "model"}, Axes{{}, {}}}) {
      const std::string what = "mesh " + mesh_of(shape).to_string() + ", table " + repr(table);
      const auto dist = distribution(shape, {{"emb/embeddings", table}, {"emb/output", sp}});
      const auto got = run_embedding(dist, shape, {"data", {}}, sp, sp);
      expect_close(got.y, want.y, what + ": y");
      expect_close(got.grad, want.grad, what + ": d table");
    }
  }
}

TEST(Embedding, InvalidTokenIdsAreOneValueErrorOnEveryProcess) {
  for (const auto& shape : meshes()) {
    Embedding emb(V, D, "emb");
    emb.build({S}, *distribution(shape, {{"emb/embeddings", {"model", {}}}}), 1);
    auto ids = token_ids();
    ids[1 * S + 4] = 11;   // the first bad one: == input_dim
    ids[2 * S + 0] = -1;   // negative
    ids[3 * S + 5] = 2.5;  // not an integer
    auto msg = message_of<kdist::ValueError>([&] {
      emb.forward(spread<double**>(ids, {B, S}, shape, {"data", "model"}));
    });
    EXPECT_TRUE(contains(msg,
                         "Embedding 'emb': 3 of the 24 token ids are not integers in [0, 11) "
                         "(input_dim); the first, at (batch 1, position 4), is 11."))
        << msg;
    expect_same_on_every_process(msg);

    ids = token_ids();
    ids[2 * S + 3] = 0.5;
    ids[3 * S + 1] = std::nan("");
    msg = message_of<kdist::ValueError>([&] {
      emb.forward(spread<double**>(ids, {B, S}, shape, {"data", {}}));
    });
    EXPECT_TRUE(contains(msg, "2 of the 24 token ids") && contains(msg,
                                                                   "(batch 2, position 3), "
                                                                   "is 0.5"))
        << msg;
    expect_same_on_every_process(msg);

    ids = token_ids();
    ids[0] = std::nan("");
    msg = message_of<kdist::ValueError>([&] {
      emb.forward(spread<double**>(ids, {B, S}, shape, {{}, "model"}));
    });
    EXPECT_TRUE(contains(msg, "1 of the 24 token ids") &&
                contains(msg, "(batch 0, position 0), is nan"))
        << msg;
    expect_same_on_every_process(msg);
  }
}

TEST(Embedding, ShapesAndRanksKerasRejectsAreValueErrors) {
  auto msg = message_of<kdist::ValueError>([] { Embedding(0, 4, "e"); });
  EXPECT_TRUE(contains(msg,
                       "Embedding 'e': input_dim (the vocabulary size) and output_dim (the "
                       "features) must be >= 1, got input_dim=0, output_dim=4"))
      << msg;
  msg = message_of<kdist::ValueError>([] { Embedding(4, 0, "e"); });
  EXPECT_TRUE(contains(msg, "got input_dim=4, output_dim=0")) << msg;
  const auto dist = distribution(meshes().back(), {});
  msg = message_of<kdist::ValueError>([&] { Embedding(4, 2, "e").build({3, 2}, *dist, 0); });
  EXPECT_TRUE(contains(msg,
                       "Embedding 'e': takes token ids of shape (sequence,) per example, "
                       "(batch, sequence) in all, but the input is (3, 2) per example"))
      << msg;
  Embedding emb(4, 2, "e");
  msg = message_of<kdist::ValueError>([&] {
    emb.forward(spread<double**>(std::vector<double>(4, 0.0), {2, 2}, meshes().back(), {{}, {}}));
  });
  EXPECT_TRUE(contains(msg, "Embedding 'e': is not built")) << msg;
  emb.build({2}, *dist, 0);
  const auto x3 =
      spread<double***>(std::vector<double>(8, 0.0), {2, 2, 2}, meshes().back(), {{}, {}, {}});
  msg = message_of<kdist::ValueError>([&] { emb.forward(kdist::LayerTensor<double>(x3), {}); });
  EXPECT_TRUE(contains(msg,
                       "Embedding 'e' takes tensors of rank 2 but was given one of rank 3; "
                       "give it token ids of shape (batch, sequence)"))
      << msg;
}

// ---- LayerNormalization ---------------------------------------------------------------------------

constexpr std::size_t F = 8;

struct NormResult {
  std::vector<double> y, dx, dgamma, dbeta;
};

// Forward and backward of LayerNormalization "ln" (gamma, beta set to fixed random values) on
// (B, S, F) inputs laid out by `x_axes`; dy laid out as the output.
NormResult run_layer_norm(const Dist& dist, const std::vector<std::size_t>& mesh,
                          const Axes& x_axes, const std::optional<Axes>& want_output) {
  LayerNorm ln("ln");
  EXPECT_EQ(ln.build({S, F}, *dist, 0), (kdist::Shape{S, F}));
  const auto g = uniform(F, 11), b = uniform(F, 12);
  ln.gamma()->value = spread<double*>(g, {F}, mesh, ln.gamma()->value.layout().axes());
  ln.beta()->value = spread<double*>(b, {F}, mesh, ln.beta()->value.layout().axes());
  const auto x = uniform(B * S * F, 13);
  const auto y = ln.forward(spread<double***>(x, {B, S, F}, mesh, x_axes));
  if (want_output) {
    EXPECT_EQ(y.layout().axes_repr(), repr(*want_output));
  }
  const auto w = uniform(B * S * F, 14);
  const auto dx = kdist::backward_and_resolve(
      ln, spread<double***>(w, {B, S, F}, mesh, y.layout().axes()), true);
  EXPECT_TRUE(dx.has_value());
  if (!dx) return {};
  EXPECT_EQ(dx->layout().axes_repr(), repr(x_axes));
  EXPECT_EQ(ln.gamma()->grad.layout(), ln.gamma()->value.layout());
  return {values(y), values(*dx), values(ln.gamma()->grad), values(ln.beta()->grad)};
}

TEST(LayerNormalization, EveryInputLayoutAndVariableLayoutGivesTheValuesOfOneProcess) {
  const auto want =
      run_layer_norm(distribution(everywhere(), {}), everywhere(), {{}, {}, {}}, std::nullopt);
  for (const auto& shape : meshes()) {
    for (const Axes& x : {Axes{"data", {}, {}}, Axes{"data", "model", {}},
                          Axes{"data", {}, "model"}, Axes{{}, {"data", "model"}, {}}}) {
      for (const bool sharded_vars : {false, true}) {
        std::map<std::string, Axes> rules;
        if (sharded_vars) rules = {{"ln/gamma", {"model"}}, {"ln/beta", {"data"}}};
        const std::string what = "mesh " + mesh_of(shape).to_string() + ", x " + repr(x) +
                                 (sharded_vars ? ", gamma/beta sharded" : "");
        const Axes out{x[0], x[1], {}};
        const auto got = run_layer_norm(distribution(shape, rules), shape, x, out);
        expect_close(got.y, want.y, what + ": y");
        expect_close(got.dx, want.dx, what + ": dx");
        expect_close(got.dgamma, want.dgamma, what + ": dgamma");
        expect_close(got.dbeta, want.dbeta, what + ": dbeta");
      }
    }
    // The distribution's output layout (sequence parallelism).
    const Axes sp{"data", "model", {}};
    const std::string what = "mesh " + mesh_of(shape).to_string() + ", ln/output " + repr(sp);
    const auto got =
        run_layer_norm(distribution(shape, {{"ln/output", sp}}), shape, {"data", {}, {}}, sp);
    expect_close(got.y, want.y, what + ": y");
    expect_close(got.dx, want.dx, what + ": dx");
    expect_close(got.dgamma, want.dgamma, what + ": dgamma");
  }
}

// Keras' center=False, scale=False: no variables, the values of a layer whose gamma is ones and
// beta zeros (its initial values), on every mesh; its constants are made once, so repeated steps
// allocate nothing once their shapes are seen.
TEST(LayerNormalization, WithoutScaleAndCenterItOnlyNormalisesAndAllocatesNothingPerStep) {
  for (const auto& shape : meshes()) {
    const auto dist = distribution(shape, {});
    const std::string what = "mesh " + mesh_of(shape).to_string();
    for (const auto& [center, scale] : {std::pair{false, false}, {true, false}, {false, true}}) {
      LayerNorm plain("ln", 1e-3, center, scale);
      plain.build({S, F}, *dist, 0);
      EXPECT_EQ(plain.variables().size(), (center ? 1u : 0u) + (scale ? 1u : 0u)) << what;
      EXPECT_EQ(plain.gamma().has_value(), scale) << what;
      EXPECT_EQ(plain.beta().has_value(), center) << what;
      LayerNorm full("ln");  // gamma ones, beta zeros
      full.build({S, F}, *dist, 0);
      const Axes axes{"data", {}, {}};
      const auto x = spread<double***>(uniform(B * S * F, 21), {B, S, F}, shape, axes);
      const auto dy = spread<double***>(uniform(B * S * F, 22), {B, S, F}, shape, axes);
      const auto want_y = values(full.forward(x));
      const auto want_dx = values(*kdist::backward_and_resolve(full, dy, true));
      const auto step = [&] {
        const auto y = plain.forward(x);
        return std::pair{y, *kdist::backward_and_resolve(plain, dy, true)};
      };
      const auto [y, dx] = step();
      EXPECT_EQ(values(y), want_y) << what;
      EXPECT_EQ(values(dx), want_dx) << what;
      step();
      const kdist::test::CountAllocations count;
      step();
      step();
      EXPECT_EQ(count.seen(), "") << what << ", center " << center << ", scale " << scale;
    }
  }
}

TEST(LayerNormalization, RanksKerasRejectsAreValueErrors) {
  const auto dist = distribution(meshes().back(), {});
  auto msg = message_of<kdist::ValueError>([&] { LayerNorm("n").build({2, 3, 4}, *dist, 0); });
  EXPECT_TRUE(contains(msg,
                       "LayerNormalization 'n': takes examples of shape (features,) or "
                       "(sequence, features), not (2, 3, 4)"))
      << msg;
  msg = message_of<kdist::ValueError>([&] { LayerNorm("n").build({3, 0}, *dist, 0); });
  EXPECT_TRUE(contains(msg, "LayerNormalization 'n': the inputs have 0 features")) << msg;
  msg = message_of<kdist::ValueError>([] { LayerNorm("n", 0.0); });
  EXPECT_TRUE(contains(msg, "epsilon must be > 0")) << msg;
  LayerNorm ln("n");
  ln.build({4}, *dist, 0);
  const auto x4 = spread<double****>(std::vector<double>(16, 0.0), {1, 2, 2, 4}, meshes().back(),
                                     {{}, {}, {}, {}});
  msg = message_of<kdist::ValueError>([&] { ln.forward(kdist::LayerTensor<double>(x4), {}); });
  EXPECT_TRUE(contains(msg,
                       "LayerNormalization 'n' takes tensors of rank 3 but was given one of "
                       "rank 4"))
      << msg;
  const auto x5 = spread<double**>(std::vector<double>(10, 0.0), {2, 5}, meshes().back(), {{}, {}});
  msg = message_of<kdist::ValueError>([&] { ln.forward(x5); });
  EXPECT_TRUE(contains(msg, "was built for 4 features but the input has 5")) << msg;
}

}  // namespace
