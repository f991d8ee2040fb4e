#pragma once
// A small GPT (token and position embeddings, pre-norm attention and MLP blocks, a final norm and
// an lm_head) with its token data and three sets of rules, for the tests of memory-saving training
// (test_remat.cpp, test_mixed_precision.cpp). Its layers take the RematScope and the dtype policy
// that live where it is built.
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <kdist/nn/layers/dense.hpp>
#include <kdist/nn/layers/dropout.hpp>
#include <kdist/nn/layers/embedding.hpp>
#include <kdist/nn/layers/layer_normalization.hpp>
#include <kdist/nn/layers/multi_head_attention.hpp>
#include <kdist/nn/layers/position_embedding.hpp>
#include <kdist/nn/layers/residual.hpp>
#include <kdist/nn/model.hpp>
#include <kdist/nn/remat.hpp>
#include <kdist/strategy/data_parallel.hpp>
#include <kdist/strategy/layout_map.hpp>
#include <kdist/strategy/model_parallel.hpp>

#include "mpi/mpi_test_util.hpp"

namespace kdist::test::small_gpt {

using namespace kdist::layers;
using Model = kdist::Sequential;

constexpr std::size_t vocab = 32, seq = 16, d_model = 32, heads = 4, blocks = 3;

//! What a RematScope around the blocks says (nullopt: no scope).
struct Remat {
  std::optional<std::string> mode;
  std::size_t threshold = 1024;
  std::vector<std::string> names = {};
};

std::vector<Model::Layer> block(std::size_t b) {
  const std::string p = "block" + std::to_string(b);
  std::vector<Model::Layer> l;
  l.emplace_back(Residual(p + "/attn", {LayerNormalization(p + "/ln1"),
                                        MultiHeadAttention(heads, d_model / heads, p + "/mha")}));
  l.emplace_back(Residual(p + "/mlp", {LayerNormalization(p + "/ln2"),
                                       Dense(4 * d_model, Activation::gelu, true, p + "/up"),
                                       Dense(d_model, Activation::linear, true, p + "/down"),
                                       Model::Dropout(0.2, p + "/dropout")}));
  return l;
}

Model gpt(const std::optional<Remat>& remat) {
  std::vector<Model::Layer> l;
  l.emplace_back(Embedding(vocab, d_model, "token_embedding"));
  l.emplace_back(PositionEmbedding(seq, "position_embedding"));
  for (std::size_t b = 0; b < blocks; ++b) {
    std::optional<kdist::RematScope> scope;
    if (remat) scope.emplace(remat->mode, remat->threshold, remat->names);
    for (auto& layer : block(b)) l.push_back(std::move(layer));
  }
  l.emplace_back(LayerNormalization("final_norm"));
  l.emplace_back(Dense(vocab, Activation::linear, false, "lm_head"));
  return Model(kdist::Shape{seq}, std::move(l));
}

kdist::ArrayDataset<float> tokens(std::size_t n) {
  std::mt19937 gen(5);
  std::vector<float> x(n * seq), y(n * seq);
  for (std::size_t i = 0; i < n * seq; ++i) {
    x[i] = static_cast<float>(gen() % vocab);
    y[i] = static_cast<float>(gen() % vocab);
  }
  return kdist::ArrayDataset<float>(std::move(x), {seq}, std::move(y), seq);
}

//! fsdp_sequence: mesh (1, N), FSDP rules (a "data" axis of 1) with sequence parallelism;
//! fsdp_over_data: mesh (N, 1), the same kernel and table rules, so every one is gathered.
enum class Rules { data_parallel, tensor, fsdp_sequence, fsdp_over_data };

std::shared_ptr<const kdist::Distribution> distribution(Rules rules) {
  const auto n = static_cast<std::size_t>(world_size());
  if (rules == Rules::data_parallel) {
    return std::make_shared<kdist::DataParallel>(kdist::list_devices());
  }
  const bool over_data = rules == Rules::fsdp_over_data;
  kdist::RuntimeDeviceMesh mesh(
      over_data ? std::vector<std::size_t>{n, 1} : std::vector<std::size_t>{1, n},
      {"data", "model"}, kdist::list_devices());
  kdist::LayoutMap map(mesh);
  using kdist::replicated;
  const bool fsdp = rules == Rules::fsdp_sequence || over_data;
  const kdist::DimAxes data = fsdp ? kdist::DimAxes("data") : kdist::DimAxes();
  map["token_embedding/embeddings"] = {"model", data};
  map[".*mha/(query|key|value)/kernel"] = {data, "model", replicated};
  map[".*mha/(query|key|value)/bias"] = {"model", replicated};
  map[".*mha/attention_output/kernel"] = {"model", replicated, data};
  map[".*up/kernel"] = {data, "model"};
  map[".*up/bias"] = {"model"};
  map[".*down/kernel"] = {"model", data};
  map["lm_head/kernel"] = {data, "model"};
  if (rules == Rules::fsdp_sequence)
    map["block\\d+/(ln1|ln2|mha|down|dropout|attn|mlp)/output"] = {"data", "model", replicated};
  return std::make_shared<kdist::ModelParallel>(std::move(map), "data");
}

}  // namespace kdist::test::small_gpt
