// kdist-mpi-ranks: 1 2 4
// A GPT (issue 20) written from the library's layers: Embedding, PositionEmbedding, pre-norm
// blocks of Residual(LayerNormalization, MultiHeadAttention) and Residual(LayerNormalization,
// Dense(gelu), Dense), a final LayerNormalization and a vocabulary-parallel lm_head, trained by
// Sequential::fit on (batch, sequence) token targets. A few steps give the one-process losses and
// weights on every (data, model) mesh of the world's size under keras-hub-style LayoutMaps: tensor
// parallel (heads, MLP column -> row, vocabulary-parallel embedding and logits), the same plus
// fully sharded data parallelism (every kernel also sharded on "data") and plus sequence
// parallelism (the blocks' outputs sharded on the sequence).
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <map>
#include <random>

#include <kdist/nn/layers/embedding.hpp>
#include <kdist/nn/layers/layer_normalization.hpp>
#include <kdist/nn/layers/multi_head_attention.hpp>
#include <kdist/nn/layers/position_embedding.hpp>
#include <kdist/nn/layers/residual.hpp>
#include <kdist/nn/model.hpp>
#include <kdist/strategy/layout_map.hpp>
#include <kdist/strategy/model_parallel.hpp>
#include <kdist/tensor/distribute_tensor.hpp>

#include "mpi/model_test_support.hpp"
#include "mpi/mpi_test_util.hpp"
#include "mpi/step_allocations.hpp"

namespace {

using kdist::test::message_of;
using kdist::test::world_size;
using namespace kdist::layers;
using Model = kdist::BasicSequential<double>;

constexpr std::size_t vocab = 32, seq = 8, d_model = 16, heads = 4, key_dim = 4, blocks = 2;

Model gpt() {
  std::vector<Model::Layer> l;
  l.emplace_back(BasicEmbedding<double>(vocab, d_model, "token_embedding"));
  l.emplace_back(BasicPositionEmbedding<double>(seq, "position_embedding"));
  for (std::size_t b = 0; b < blocks; ++b) {
    const std::string p = "block" + std::to_string(b);
    l.emplace_back(BasicResidual<double>(
        p + "/attn", {BasicLayerNormalization<double>(p + "/ln1"),
                      BasicMultiHeadAttention<double>(heads, key_dim, p + "/mha")}));
    l.emplace_back(BasicResidual<double>(
        p + "/mlp", {BasicLayerNormalization<double>(p + "/ln2"),
                     Model::Dense(4 * d_model, Activation::gelu, true, p + "/up"),
                     Model::Dense(d_model, Activation::linear, true, p + "/down")}));
  }
  l.emplace_back(BasicLayerNormalization<double>("final_norm"));
  l.emplace_back(Model::Dense(vocab, Activation::linear, false, "lm_head"));
  return Model(kdist::Shape{seq}, std::move(l));
}

// Token windows: x the tokens, y the next ones (as T values; the model casts them).
kdist::ArrayDataset<double> tokens(std::size_t n) {
  std::mt19937 gen(11);
  std::vector<double> x(n * seq), y(n * seq);
  std::vector<int> stream(n * seq + 1);
  for (auto& t : stream) t = static_cast<int>(gen() % vocab);
  for (std::size_t i = 0; i < n; ++i) {
    for (std::size_t j = 0; j < seq; ++j) {
      x[i * seq + j] = stream[i * seq + j];
      y[i * seq + j] = stream[i * seq + j + 1];
    }
  }
  return kdist::ArrayDataset<double>(std::move(x), {seq}, std::move(y), seq);
}

enum class Rules { none, tensor, fsdp, fsdp_sequence };

std::shared_ptr<const kdist::Distribution> distribution(const std::vector<std::size_t>& shape,
                                                        Rules rules) {
  kdist::RuntimeDeviceMesh mesh(shape, {"data", "model"}, kdist::list_devices());
  kdist::LayoutMap map(mesh);
  using kdist::replicated;
  if (rules != Rules::none) {
    // keras-hub's way: regexes over the Keras paths; "data" on a kernel's other dimension is
    // fully sharded data parallelism (gathered for compute, gradients reduce-scattered).
    const bool f = rules == Rules::fsdp || rules == Rules::fsdp_sequence;
    const kdist::DimAxes data = f ? kdist::DimAxes("data") : kdist::DimAxes();
    map["token_embedding/embeddings"] = {"model", data};
    map[".*mha/(query|key|value)/kernel"] = {data, "model", replicated};
    map[".*mha/(query|key|value)/bias"] = {"model", replicated};
    map[".*mha/attention_output/kernel"] = {"model", replicated, data};
    map[".*up/kernel"] = {data, "model"};
    map[".*up/bias"] = {"model"};
    map[".*down/kernel"] = {"model", data};
    map["lm_head/kernel"] = {data, "model"};  // vocabulary-parallel logits, never gathered
    if (rules == Rules::fsdp_sequence) map[".*block.*/output"] = {"data", "model", replicated};
  }
  return std::make_shared<kdist::ModelParallel>(std::move(map), "data");
}

std::vector<std::vector<std::size_t>> meshes() {
  const auto n = static_cast<std::size_t>(world_size());
  if (n == 1) return {{1, 1}};
  if (n == 2) return {{1, 2}, {2, 1}};
  return {{1, 4}, {4, 1}, {2, 2}};
}

std::map<std::string, std::vector<double>> weights_of(Model& m) {
  std::map<std::string, std::vector<double>> out;
  m.for_each_variable([&](auto& v) {
    auto full = kdist::full_tensor(v.value);
    out[v.path].assign(full.data(), full.data() + full.size());
  });
  return out;
}

TEST(Gpt, TrainsToTheOneProcessLossesUnderTensorFsdpAndSequenceParallelRules) {
  const auto data = tokens(16);
  const kdist::FitOptions fit{.batch_size = 8, .epochs = 2, .shuffle = false, .verbose = 0};
  auto reference = gpt();
  reference.compile(distribution({1, static_cast<std::size_t>(world_size())}, Rules::none),
                    kdist::Loss::sparse_categorical_crossentropy, kdist::Adam(0.01), 21);
  const auto want = reference.fit(data, fit);
  ASSERT_EQ(want.epochs.size(), 2u);
  EXPECT_NEAR(want.epochs[0].loss, std::log(double(vocab)), 0.5);  // starts near uniform
  EXPECT_LT(want.epochs[1].loss, want.epochs[0].loss);
  const auto want_weights = weights_of(reference);
  for (const auto& shape : meshes()) {
    for (const Rules rules : {Rules::tensor, Rules::fsdp, Rules::fsdp_sequence}) {
      auto dist = distribution(shape, rules);
      auto model = gpt();
      model.compile(dist, kdist::Loss::sparse_categorical_crossentropy, kdist::Adam(0.01), 21);
      // the rules are in force: the query kernels are sharded as keras-hub's maps shard them
      for (const auto& v : model.variables()) {
        if (v.path == "block0/mha/query/kernel") {
          EXPECT_EQ(v.layout.axes_repr(),
                    rules == Rules::tensor ? "(None, 'model', None)" : "('data', 'model', None)");
        }
      }
      const auto got = model.fit(data, fit);
      const std::string what =
          kdist::test::name_of(*dist) + " rules " + std::to_string(static_cast<int>(rules));
      for (std::size_t e = 0; e < 2; ++e) {
        EXPECT_NEAR(got.epochs[e].loss, want.epochs[e].loss, 1e-9 * want.epochs[e].loss) << what;
      }
      const auto w = weights_of(model);
      for (const auto& [path, ref] : want_weights) {
        double worst = 0;
        for (std::size_t i = 0; i < ref.size(); ++i) {
          worst =
              std::max(worst, std::abs(w.at(path)[i] - ref[i]) / std::max(1e-3, std::abs(ref[i])));
        }
        EXPECT_LT(worst, 1e-7) << what << " " << path;
      }
    }
  }
}

// kdist::ReusableViews: once its shapes have been seen, a GPT step allocates nothing, data
// parallel or sharded: embeddings, norms, attention (projections, probabilities, their gradients
// and scratch), the MLP, residual sums, the loss and its gradient reuse the last steps' buffers,
// and so do the layers' redistributions (the tensor-parallel all-reduces, FSDP's gathered
// kernels, sequence parallelism's gathers and reduce-scatters).
TEST(Gpt, StepsAllocateNothingOnceTheirShapesAreSeenOnEveryMesh) {
  const auto data = tokens(8);
  const std::size_t n = static_cast<std::size_t>(world_size());
  const std::vector<std::size_t> square =
      n == 4 ? std::vector<std::size_t>{2, 2} : std::vector<std::size_t>{n, 1};
  const std::vector<std::pair<std::vector<std::size_t>, Rules>> cases = {
      {{n, 1}, Rules::none},
      {{1, n}, Rules::tensor},
      {square, Rules::fsdp},
      {n == 2 ? std::vector<std::size_t>{1, 2} : square, Rules::fsdp_sequence}};
  for (const auto& [shape, rules] : cases) {
    auto model = gpt();
    const auto dist = distribution(shape, rules);
    model.compile(dist, kdist::Loss::sparse_categorical_crossentropy, kdist::Adam(0.01), 21);
    EXPECT_EQ(kdist::test::allocations_of_steps_3_and_4<2>(model, *dist, data, 8), "")
        << "steps 3 and 4 allocated these Kokkos Views on " << kdist::test::name_of(*dist)
        << " with rules " << static_cast<int>(rules);
  }
}

TEST(Gpt, AnotherLossIsAnError) {
  auto model = gpt();
  model.compile(distribution({1, static_cast<std::size_t>(world_size())}, Rules::none),
                kdist::Loss::mean_squared_error, kdist::Adam(), 1);
  const std::string m = message_of<kdist::ValueError>(
      [&] { model.fit(tokens(4), {.batch_size = 4, .epochs = 1, .verbose = 0}); });
  EXPECT_NE(m.find("sparse_categorical_crossentropy"), std::string::npos) << m;
}

TEST(Gpt, AnEmbeddingAfterAnotherLayerIsAnError) {
  std::vector<Model::Layer> l;
  l.emplace_back(Model::Dropout(0.0, "first"));  // the identity: token ids stay integers
  l.emplace_back(BasicEmbedding<double>(vocab, d_model, "token_embedding"));
  l.emplace_back(Model::Dense(vocab, Activation::linear, false, "lm_head"));
  Model model(kdist::Shape{seq}, std::move(l));
  model.compile(distribution({1, static_cast<std::size_t>(world_size())}, Rules::none),
                kdist::Loss::sparse_categorical_crossentropy, kdist::Adam(), 1);
  const std::string m = message_of<kdist::ValueError>(
      [&] { model.fit(tokens(4), {.batch_size = 4, .epochs = 1, .verbose = 0}); });
  EXPECT_NE(m.find("layer 'token_embedding' (layer 1) gives no gradient of its input"),
            std::string::npos)
      << m;
}

TEST(Gpt, LabelsInsteadOfTokenTargetsAreAnError) {
  auto model = gpt();
  model.compile(distribution({1, static_cast<std::size_t>(world_size())}, Rules::none),
                kdist::Loss::sparse_categorical_crossentropy, kdist::Adam(), 1);
  std::vector<double> x(4 * seq, 1.0);
  kdist::ArrayDataset<double> labelled(std::move(x), {seq}, std::vector<std::int32_t>(4, 0));
  const std::string m = message_of<kdist::ValueError>(
      [&] { model.fit(labelled, {.batch_size = 4, .epochs = 1, .verbose = 0}); });
  EXPECT_NE(m.find("(batch, sequence) token ids"), std::string::npos) << m;
}

}  // namespace
