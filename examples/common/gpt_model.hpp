#pragma once
//! \file common/gpt_model.hpp
//! The example GPT: a byte-level decoder-only transformer written from kdist's layers, and its
//! LayoutMap written the keras-hub way (regexes over the Keras variable paths). Shared by
//! examples/gpt_trainer.cpp and benchmarks/bench_gpt.cpp.
//!
//!   token_embedding     Embedding(vocab, d_model)
//!   position_embedding  PositionEmbedding(sequence)          (added to the tokens' embeddings)
//!   block<i>/attn       Residual(LayerNormalization, MultiHeadAttention(heads, d_model / heads))
//!   block<i>/mlp        Residual(LayerNormalization, Dense(4 d_model, gelu), Dense(d_model),
//!                                Dropout)
//!   final_norm          LayerNormalization
//!   lm_head             Dense(vocab), no bias: the logits

#include <cstddef>
#include <iostream>
#include <string>
#include <utility>
#include <vector>

#include <kdist/core/error.hpp>
#include <kdist/nn/layers/dropout.hpp>
#include <kdist/nn/layers/embedding.hpp>
#include <kdist/nn/layers/layer_normalization.hpp>
#include <kdist/nn/layers/multi_head_attention.hpp>
#include <kdist/nn/layers/position_embedding.hpp>
#include <kdist/nn/layers/residual.hpp>
#include <kdist/nn/model.hpp>
#include <kdist/strategy/layout_map.hpp>

namespace kdist::examples {

struct GptConfig {
  std::size_t vocab = 256;  // bytes
  std::size_t sequence = 128;
  std::size_t d_model = 128;
  std::size_t heads = 4;
  std::size_t blocks = 4;
  double dropout = 0.1;
};

//! Errors: ValueError for a d_model that the heads do not divide, or a zero size.
template <class T = float>
BasicSequential<T> make_gpt(const GptConfig& c) {
  if (c.heads == 0 || c.d_model % c.heads != 0) {
    throw ValueError("the GPT's d_model " + std::to_string(c.d_model) +
                     " is not a multiple of its " + std::to_string(c.heads) +
                     " heads; give --d-model a multiple of --heads");
  }
  if (c.vocab == 0 || c.sequence == 0 || c.blocks == 0) {
    throw ValueError("the GPT needs a vocabulary, a sequence length and blocks (none may be 0)");
  }
  using namespace kdist::layers;
  using M = BasicSequential<T>;
  std::vector<typename M::Layer> l;
  l.emplace_back(BasicEmbedding<T>(c.vocab, c.d_model, "token_embedding"));
  l.emplace_back(BasicPositionEmbedding<T>(c.sequence, "position_embedding"));
  for (std::size_t b = 0; b < c.blocks; ++b) {
    const std::string p = "block" + std::to_string(b);
    l.emplace_back(BasicResidual<T>(
        p + "/attn", {BasicLayerNormalization<T>(p + "/ln1"),
                      BasicMultiHeadAttention<T>(c.heads, c.d_model / c.heads, p + "/mha")}));
    std::vector<AnyLayer<T>> mlp;
    mlp.emplace_back(BasicLayerNormalization<T>(p + "/ln2"));
    mlp.emplace_back(typename M::Dense(4 * c.d_model, Activation::gelu, true, p + "/up"));
    mlp.emplace_back(typename M::Dense(c.d_model, Activation::linear, true, p + "/down"));
    if (c.dropout > 0) mlp.emplace_back(typename M::Dropout(c.dropout, p + "/dropout"));
    l.emplace_back(BasicResidual<T>(p + "/mlp", std::move(mlp)));
  }
  l.emplace_back(BasicLayerNormalization<T>("final_norm"));
  l.emplace_back(typename M::Dense(c.vocab, Activation::linear, false, "lm_head"));
  return M(Shape{c.sequence}, std::move(l));
}

//! How the GPT is sharded: tensor parallelism on "model" always (heads, the MLP's column -> row
//! pair, a vocabulary-parallel embedding and lm_head); `fsdp` also shards every kernel's other
//! dimension on "data" (keras-hub's (2, N) maps: gathered for compute, gradients reduce-scattered,
//! optimizer slots sharded like the kernel); `sequence_parallel` shards the blocks' outputs on the
//! sequence (Megatron's sequence parallelism: norms on sequence shards, an all-gather before the
//! column-parallel projections, a reduce-scatter after the row-parallel ones).
struct GptSharding {
  bool fsdp = false;
  bool sequence_parallel = false;
};

//! The rules, as (regex, layout) pairs in keras-hub's spelling, for printing and for the map.
inline std::vector<std::pair<std::string, std::vector<DimAxes>>> gpt_rules(const GptSharding& s) {
  const DimAxes data = s.fsdp ? DimAxes("data") : DimAxes();
  const DimAxes none;
  std::vector<std::pair<std::string, std::vector<DimAxes>>> r{
      {"token_embedding/embeddings", {"model", data}},            // vocabulary-parallel
      {".*mha/(query|key|value)/kernel", {data, "model", none}},  // heads
      {".*mha/(query|key|value)/bias", {"model", none}},
      {".*mha/attention_output/kernel", {"model", none, data}},  // row-parallel
      {".*up/kernel", {data, "model"}},                          // column-parallel
      {".*up/bias", {"model"}},
      {".*down/kernel", {"model", data}},   // row-parallel
      {"lm_head/kernel", {data, "model"}},  // vocabulary-parallel logits
  };
  // every block output but the column-parallel `up` projection's, which stays sharded on its
  // features for `down` (".*block.*/output" would move it to sequence shards and back)
  if (s.sequence_parallel) {
    r.push_back({"block\\d+/(ln1|ln2|mha|down|dropout|attn|mlp)/output", {"data", "model", none}});
  }
  return r;
}

//! The LayoutMap of gpt_rules on `mesh`.
template <class Mesh>
LayoutMap<Mesh> gpt_layout_map(const Mesh& mesh, const GptSharding& s) {
  LayoutMap<Mesh> map(mesh);
  for (const auto& [key, axes] : gpt_rules(s)) map[key] = RuntimeTensorLayout(axes, std::nullopt);
  return map;
}

}  // namespace kdist::examples
