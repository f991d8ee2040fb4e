#pragma once
// The seeds' model trained on Fashion-MNIST under a Keras distribution: shared by the
// DataParallel and ModelParallel trainers. Flags, Keras-style progress output, evaluation.

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <kdist/data_sharding.hpp>
#include <kdist/model.hpp>
#include <kdist/run.hpp>
#include <kdist/runtime.hpp>

#include "common/batch_loader.hpp"
#include "common/fashion_mnist.hpp"
#include "common/trainer_flags.hpp"

namespace kdist::examples {

//! The seeds' model: Flatten -> Dense(200, relu, no bias, "d1") -> Dropout(0.4) ->
//! Dense(10, softmax, "d2").
inline Sequential make_seed_model() {
  using namespace kdist::layers;
  std::vector<Sequential::Layer> l;
  l.emplace_back(Dense(200, Activation::relu, false, "d1"));
  l.emplace_back(Dropout(0.4, "dropout"));
  l.emplace_back(Dense(10, Activation::softmax, true, "d2"));
  return Sequential(fashion_mnist_features, std::move(l));
}

//! Keras' progress line: `469/469 ━━━━━━━━━━━━━━━━━━━━ 2s 4ms/step - loss: 0.4312 - accuracy: 0.8451`.
inline std::string progress_line(std::size_t step, std::size_t steps, double seconds, double loss,
                                 double accuracy) {
  const std::size_t width = 20, done = steps ? step * width / steps : width;
  std::string bar;
  for (std::size_t i = 0; i < width; ++i) bar += i < done ? "━" : "─";
  char buf[256];
  const double per_step_ms = step ? seconds * 1000.0 / static_cast<double>(step) : 0.0;
  // Keras switches to microseconds below one millisecond per step ("977us/step").
  const bool micro = per_step_ms < 1.0;
  std::snprintf(buf, sizeof buf, "%zu/%zu %s %.0fs %.0f%s/step - loss: %.4f - accuracy: %.4f", step,
                steps, bar.c_str(), seconds, micro ? per_step_ms * 1000.0 : per_step_ms,
                micro ? "us" : "ms", loss, accuracy);
  return buf;
}

//! Runs an epoch (training when `train`) over `data` with the model; returns the mean metrics.
inline Metrics run_epoch(Sequential& model, const FashionMnist& data, const BatchPlan& plan,
                         std::size_t epoch, std::size_t max_steps, bool train, bool print) {
  const auto order = plan.order(epoch);
  std::size_t steps = plan.steps_per_epoch();
  if (max_steps && max_steps < steps) steps = max_steps;
  const bool tty = print && isatty(STDOUT_FILENO);
  double loss_sum = 0, correct = 0;
  std::size_t seen = 0;
  const auto t0 = std::chrono::steady_clock::now();
  auto last = t0;
  BatchLoader loader(steps ? plan.local_indices(order, 0).size() : 0, data.features);
  for (std::size_t s = 0; s < steps; ++s) {
    const auto idx = plan.local_indices(order, s);
    const std::size_t global = plan.global_batch_size_at(s);
    const auto [x, y] = loader.load(data, idx);
    const Metrics m = train ? model.train_step(x, y, global) : model.evaluate_batch(x, y, global);
    loss_sum += m.loss * static_cast<double>(global);
    correct += m.accuracy * static_cast<double>(global);
    seen += global;
    const auto now = std::chrono::steady_clock::now();
    if (tty && (now - last > std::chrono::milliseconds(100) || s + 1 == steps)) {
      last = now;
      std::printf("\r%s",
                  progress_line(s + 1, steps, std::chrono::duration<double>(now - t0).count(),
                                loss_sum / double(seen), correct / double(seen))
                      .c_str());
      std::fflush(stdout);
    }
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  Metrics out{loss_sum / double(seen), correct / double(seen), seen};
  if (print) {
    std::printf("%s%s\n", tty ? "\r" : "",
                progress_line(steps, steps, secs, out.loss, out.accuracy).c_str());
    std::fflush(stdout);
  }
  return out;
}

//! Builds the model under `dist`, trains, evaluates; prints from process 0 only.
inline int train_and_evaluate(std::shared_ptr<const Distribution> dist, const TrainerOptions& o,
                              const char* title) {
  const bool root = kdist::process_id() == 0;
  auto model = make_seed_model();
  Sequential::Optimizer opt = o.optimizer == "adam" ? Sequential::Optimizer(Adam(o.learning_rate))
                                                    : Sequential::Optimizer(SGD(o.learning_rate));
  model.compile(dist, o.loss == "mse" ? Loss::mean_squared_error : Loss::categorical_crossentropy,
                opt, o.seed);
  const auto train = load_fashion_mnist(Split::train);
  const auto test = load_fashion_mnist(Split::test);
  BatchPlan plan(train.count, o.batch_size, *dist,
                 {.drop_remainder = o.drop_remainder, .shuffle = true, .seed = o.seed});
  BatchPlan eval_plan(test.count, o.batch_size, *dist, {.drop_remainder = false});
  if (root && !o.quiet) {
    std::cout << title << " on " << dist->device_mesh() << "\n";
    for (const auto& v : model.variables()) {
      std::cout << "  " << v.path << " " << kdist::detail::shape_repr(v.shape) << " "
                << v.layout.axes_repr() << "\n";
    }
    std::cout << "global batch " << o.batch_size << ", " << plan.local_batch_size()
              << " rows per data shard, " << plan.steps_per_epoch() << " steps per epoch\n";
  }
  for (std::size_t e = 0; e < o.epochs; ++e) {
    if (root && !o.quiet) std::printf("Epoch %zu/%zu\n", e + 1, o.epochs);
    run_epoch(model, train, plan, e, o.max_steps, true, root && !o.quiet);
  }
  const Metrics t = run_epoch(model, test, eval_plan, 0, 0, false, root && !o.quiet);
  if (root) std::printf("Test loss: %.4f - Test accuracy: %.4f\n", t.loss, t.accuracy);
  return 0;
}

//! main() of a trainer: kdist::run, so an error on every process is printed once and an error
//! on some processes only ends the whole job (MPI_Abort) with the failing process' message.
inline int trainer_main(int argc, char** argv, const std::function<int(int, char**)>& body) {
  return kdist::run(argc, argv, body);
}

}  // namespace kdist::examples
