// A user's translation unit (issue 39's compile-time target, benchmarks/compile_cost_user.sh): a
// program that builds the seeds' Sequential model, compiles it with Adam and calls `fit` and
// `evaluate` under DataParallel - what every edit of such a file recompiles. With KDIST_CC_LEAN it
// includes only the headers it uses instead of kdist/kdist.hpp.
#include <cstdio>
#include <memory>
#include <utility>
#include <vector>
#ifdef KDIST_CC_LEAN
#include <kdist/nn/layers/dense.hpp>
#include <kdist/nn/layers/dropout.hpp>
#include <kdist/nn/layers/flatten.hpp>
#include <kdist/nn/model.hpp>
#include <kdist/parallel/initialize.hpp>
#include <kdist/strategy/data_parallel.hpp>
#else
#include <kdist/kdist.hpp>
#endif

int main(int argc, char** argv) {
  kdist::ScopeGuard guard(argc, argv);
  using namespace kdist::layers;
  std::vector<kdist::Sequential::Layer> layers;
  layers.emplace_back(Flatten());
  layers.emplace_back(Dense(200, Activation::relu, /*use_bias=*/false, "d1"));
  layers.emplace_back(Dropout(0.4, "dropout"));
  layers.emplace_back(Dense(10, Activation::softmax, true, "d2"));
  kdist::Sequential model({28, 28, 1}, std::move(layers));
  model.compile(std::make_shared<kdist::DataParallel>(), kdist::Loss::categorical_crossentropy,
                kdist::Adam(1e-3), 1337);

  std::vector<float> x(256 * 28 * 28), y(256 * 10, 0.0f);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i % 255) / 255.0f;
  for (std::size_t i = 0; i < 256; ++i) y[i * 10 + i % 10] = 1.0f;
  const kdist::ArrayDataset<float> data(std::move(x), {28, 28, 1}, std::move(y), 10);
  const auto history = model.fit(data, {.batch_size = 64, .epochs = 2});
  const auto m = model.evaluate(data);
  if (kdist::process_id() == 0) {
    std::printf("loss %.4f -> %.4f, evaluate %.4f\n", history.epochs.front().loss,
                history.epochs.back().loss, m.loss);
  }
  return 0;
}
