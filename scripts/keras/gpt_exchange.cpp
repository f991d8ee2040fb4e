// The kdist side of scripts/keras/check_gpt_exchange.sh (built by it from gpt_exchange/; not a
// test): examples/common/gpt_model.hpp's make_gpt, tiny, on a mesh (data x model) under the
// example's tensor-parallel LayoutMap, and the fixed batch of gpt_keras_side.py.
//
//   gpt_exchange save FILE MESH SEED   train one step, print the loss on the batch, save FILE
//                                      (weights and AdamW state), train one more step, print the
//                                      loss again
//   gpt_exchange load FILE MESH        load FILE, print the loss on the batch, train one step,
//                                      print the loss again
// MESH is "DxM" (processes = D * M). The sizes come from GPT_VOCAB (32), GPT_SEQ (8),
// GPT_D_MODEL (16), GPT_HEADS (2), GPT_BLOCKS (2), GPT_BATCH (4), as in gpt_keras_side.py.
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include <kdist/io/keras_weights.hpp>
#include <kdist/nn/model.hpp>
#include <kdist/parallel/initialize.hpp>
#include <kdist/strategy/model_parallel.hpp>

#include "common/gpt_model.hpp"

namespace {

std::size_t env(const char* name, std::size_t fallback) {
  const char* v = std::getenv(name);
  return v != nullptr ? static_cast<std::size_t>(std::stoul(v)) : fallback;
}

// token k of the stream: (7 k^2 + 3 k + 1) mod vocab; x[i, j] = token(i seq + j), y the next
kdist::ArrayDataset<float> batch(std::size_t n, std::size_t seq, std::size_t vocab) {
  std::vector<float> x(n * seq), y(n * seq);
  const auto token = [&](std::size_t k) {
    return static_cast<float>((7 * k * k + 3 * k + 1) % vocab);
  };
  for (std::size_t i = 0; i < n; ++i) {
    for (std::size_t j = 0; j < seq; ++j) {
      x[i * seq + j] = token(i * seq + j);
      y[i * seq + j] = token(i * seq + j + 1);
    }
  }
  return kdist::ArrayDataset<float>(std::move(x), {seq}, std::move(y), seq);
}

}  // namespace

int main(int argc, char** argv) {
  kdist::ScopeGuard guard(argc, argv);
  if (argc < 4) {
    std::fprintf(stderr, "usage: gpt_exchange save FILE MESH SEED | load FILE MESH\n");
    return 2;
  }
  const std::string action = argv[1], path = argv[2], mesh_arg = argv[3];
  const std::size_t x = mesh_arg.find('x');
  const std::vector<std::size_t> shape{std::stoul(mesh_arg.substr(0, x)),
                                       std::stoul(mesh_arg.substr(x + 1))};
  kdist::examples::GptConfig c;
  c.vocab = env("GPT_VOCAB", 32);
  c.sequence = env("GPT_SEQ", 8);
  c.d_model = env("GPT_D_MODEL", 16);
  c.heads = env("GPT_HEADS", 2);
  c.blocks = env("GPT_BLOCKS", 2);
  c.dropout = 0;
  const std::size_t n = env("GPT_BATCH", 4);
  const auto data = batch(n, c.sequence, c.vocab);
  kdist::RuntimeDeviceMesh mesh(shape, {"data", "model"}, kdist::list_devices());
  auto dist = std::make_shared<kdist::ModelParallel>(
      kdist::examples::gpt_layout_map(mesh, kdist::examples::GptSharding{}), "data");
  auto model = kdist::examples::make_gpt<float>(c);
  const std::uint64_t seed = action == "save" && argc > 4 ? std::stoull(argv[4]) : 1;
  model.compile(dist, kdist::Loss::sparse_categorical_crossentropy, kdist::AdamW(0.01), seed);
  const kdist::FitOptions step{.batch_size = n, .epochs = 1, .shuffle = false, .verbose = 0};
  const kdist::EvaluateOptions eval{.batch_size = n, .verbose = 0};
  const bool root = kdist::process_id() == 0;
  if (action == "save") {
    model.fit(data, step);
    const double loss = model.evaluate(data, eval).loss;
    kdist::save_keras_weights(model, path);
    model.fit(data, step);
    const double after = model.evaluate(data, eval).loss;
    if (root) std::printf("kdist loss %.9e\nkdist loss after a step %.9e\n", loss, after);
  } else if (action == "load") {
    const auto r = kdist::load_keras_weights(model, path);
    const double loss = model.evaluate(data, eval).loss;
    model.fit(data, step);
    const double after = model.evaluate(data, eval).loss;
    if (root) {
      std::printf("kdist optimizer loaded: %s%s\n",
                  r.optimizer_loaded ? "yes" : "no: ", r.optimizer_note.c_str());
      std::printf("kdist loss %.9e\nkdist loss after a step %.9e\n", loss, after);
    }
  } else {
    std::fprintf(stderr, "gpt_exchange: unknown action '%s'\n", action.c_str());
    return 2;
  }
  return 0;
}
