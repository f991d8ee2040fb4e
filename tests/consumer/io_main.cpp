// A consumer of kdist's io component: a model saved to a sharded checkpoint and loaded into a
// fresh one; the file gives back the seed it was saved with (the checkpoint's resume state).
#include <kdist/io/checkpoint.hpp>
#include <kdist/kdist.hpp>

#include <cstdio>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace {
kdist::BasicSequential<float> make_model() {
  using M = kdist::BasicSequential<float>;
  std::vector<M::Layer> layers;
  layers.emplace_back(M::Flatten());
  layers.emplace_back(M::Dense(4, kdist::layers::Activation::softmax, true, "d1"));
  return M(3, std::move(layers));
}
}  // namespace

int main(int argc, char** argv) {
  kdist::ScopeGuard guard(argc, argv);
  const std::string path = "consumer_checkpoint.h5";
  auto saved = make_model();
  saved.compile(std::make_shared<kdist::DataParallel>(), kdist::Loss::mean_squared_error,
                kdist::Adam(0.01), 7);
  kdist::save_checkpoint(saved, path);
  auto loaded = make_model();
  loaded.compile(std::make_shared<kdist::DataParallel>(), kdist::Loss::mean_squared_error,
                 kdist::Adam(0.01), 99);
  const auto info = kdist::load_checkpoint(loaded, path);
  const bool ok = info.seed == 7;
  if (kdist::process_id() == 0) std::printf("%s\n", ok ? "consumer io ok" : "consumer io FAILED");
  return ok ? 0 : 1;
}
