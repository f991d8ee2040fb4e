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
#include <optional>
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
#include <kdist/nn/remat.hpp>
#include <kdist/strategy/distribution.hpp>
#include <kdist/strategy/layout_map.hpp>
#include <kdist/strategy/runtime_layout_map.hpp>

namespace kdist::examples {

struct GptConfig {
  std::size_t vocab = 256;  // bytes
  std::size_t sequence = 128;
  std::size_t d_model = 128;
  std::size_t heads = 4;
  std::size_t blocks = 4;
  double dropout = 0.1;
  //! The kdist::RematScope mode the blocks are created in ("full", "larger_than", ...; Keras'
  //! names), "" for none: their activations are recomputed in the backward pass.
  std::string remat;
  //! Keras' dtype policy the layers are created under ("mixed_bfloat16", ...; kdist::DTypePolicy),
  //! "" for the global one.
  std::string dtype_policy;
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
  std::optional<mixed_precision::PolicyScope> policy;
  if (!c.dtype_policy.empty()) policy.emplace(c.dtype_policy);
  std::vector<typename M::Layer> l;
  l.emplace_back(BasicEmbedding<T>(c.vocab, c.d_model, "token_embedding"));
  l.emplace_back(BasicPositionEmbedding<T>(c.sequence, "position_embedding"));
  std::optional<RematScope> remat;
  if (!c.remat.empty()) remat.emplace(c.remat);
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
  remat.reset();  // the embeddings, the final norm and the logits keep their activations
  l.emplace_back(BasicLayerNormalization<T>("final_norm"));
  l.emplace_back(typename M::Dense(c.vocab, Activation::linear, false, "lm_head"));
  return M(Shape{c.sequence}, std::move(l));
}

//! The variables of make_gpt(c), path and shape, in the model's order, without building it: what
//! a strict LayoutMap checks all at once before compile allocates anything (`check_variables`),
//! so that every unmatched kernel is named in one error. The trainer compares this list with the
//! compiled model's `variables()`.
inline std::vector<VariableInfo> gpt_variables(const GptConfig& c) {
  const std::size_t d = c.d_model, h = c.heads, k = c.heads ? c.d_model / c.heads : 0;
  std::vector<VariableInfo> v{{"token_embedding/embeddings", {c.vocab, d}},
                              {"position_embedding/embeddings", {c.sequence, d}}};
  for (std::size_t b = 0; b < c.blocks; ++b) {
    const std::string p = "block" + std::to_string(b) + "/";
    v.push_back({p + "ln1/gamma", {d}});
    v.push_back({p + "ln1/beta", {d}});
    for (const std::string qkv : {"query", "key", "value"}) {
      v.push_back({p + "mha/" + qkv + "/kernel", {d, h, k}});
      v.push_back({p + "mha/" + qkv + "/bias", {h, k}});
    }
    v.push_back({p + "mha/attention_output/kernel", {h, k, d}});
    v.push_back({p + "mha/attention_output/bias", {d}});
    v.push_back({p + "ln2/gamma", {d}});
    v.push_back({p + "ln2/beta", {d}});
    v.push_back({p + "up/kernel", {d, 4 * d}});
    v.push_back({p + "up/bias", {4 * d}});
    v.push_back({p + "down/kernel", {4 * d, d}});
    v.push_back({p + "down/bias", {d}});
  }
  v.push_back({"final_norm/gamma", {d}});
  v.push_back({"final_norm/beta", {d}});
  v.push_back({"lm_head/kernel", {d, c.vocab}});
  return v;
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
      {"position_embedding/embeddings", {none, none}},            // small: replicated, said so
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

//! The GPT's row-parallel kernels (Megatron: each follows a column-parallel projection and
//! contracts the dimension that projection sharded on "model", so the rule shards it on purpose
//! and the all-reduce of the output is the intended one): the attention's output projection,
//! (heads, head_dim, d_model), and the MLP's `down`, (4 d_model, d_model).
inline constexpr const char* gpt_row_parallel_pattern =
    "block\\d+/(mha/attention_output|down)/kernel";

//! Declares the GPT's layers to `map`'s contracted-dimension check (LayoutMapReport) by their own
//! names, not by the default name pattern's luck (which knows keras-hub's `down_proj`, not the
//! GPT's `down`): the row-parallel kernels above contract nothing the report should flag; the
//! query, key and value kernels (d_model, heads, head_dim), `up` (d_model, 4 d_model) and
//! `lm_head` (d_model, vocab) contract dimension 0. Call it for any map the GPT runs under, the
//! built-in rules' or a JSON file's (--layout-map).
inline void declare_gpt_kernels(RuntimeLayoutMap& map) {
  map.set_row_parallel_pattern(gpt_row_parallel_pattern);
  map.set_contracted_dims("block\\d+/mha/(query|key|value)/kernel", {0});
  map.set_contracted_dims("block\\d+/up/kernel", {0});
  map.set_contracted_dims("lm_head/kernel", {0});
}

//! The LayoutMap of gpt_rules on `mesh`, with the GPT's kernels declared (declare_gpt_kernels).
template <class Mesh>
LayoutMap<Mesh> gpt_layout_map(const Mesh& mesh, const GptSharding& s) {
  LayoutMap<Mesh> map(mesh);
  declare_gpt_kernels(map);
  for (const auto& [key, axes] : gpt_rules(s)) map[key] = RuntimeTensorLayout(axes, std::nullopt);
  return map;
}

}  // namespace kdist::examples
