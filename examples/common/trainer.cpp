// The trainers' shared functions (common/trainer.hpp), compiled once for all of them.
#include "common/trainer.hpp"

#include <cstdio>
#include <filesystem>
#include <iostream>
#include <system_error>

#include <kdist/io/async_checkpoint.hpp>
#include <kdist/io/checkpoint.hpp>
#include <kdist/io/keras_weights.hpp>
#include <kdist/parallel/run.hpp>
#include <kdist/strategy/data_sharding.hpp>

#include "common/load_and_say.hpp"

namespace kdist::examples {

void fit_with_checkpoints(Sequential& model, const ArrayDataset<float>& train, FitOptions fit,
                          const TrainerOptions& o, bool root) {
  std::error_code ignored;
  std::filesystem::create_directories(o.checkpoint_dir, ignored);  // every process: idempotent
  const std::string path = (std::filesystem::path(o.checkpoint_dir) / "checkpoint.h5").string();
  if (o.resume)
    fit.initial_epoch = load_checkpoint_and_say(model, path, "Resumed from", root).epoch;
  const std::size_t last = fit.epochs;
  AsyncCheckpointer checkpointer;
  fit.on_epoch_end = [&](std::size_t done, const Metrics& m) {
    if (done % o.save_every != 0 && done != last) return;
    checkpointer.save(model, path, {.epoch = done, .loss = m.loss}, [=, say = root && fit.verbose] {
      if (!say) return;
      std::printf("Saved %s (epoch %zu)\n", path.c_str(), done);
      std::fflush(stdout);  // now: a job cut later still shows what it published
    });
  };
  model.fit(train, fit);
  checkpointer.wait();  // the last checkpoint is published (or its error raised) before evaluate
}

int train_and_evaluate(Sequential& model, std::shared_ptr<const Distribution> dist,
                       const TrainerOptions& o, const char* title) {
  const bool root = kdist::process_id() == 0;
  Sequential::Optimizer opt = o.optimizer == "adam" ? Sequential::Optimizer(Adam(o.learning_rate))
                              : o.optimizer == "rmsprop"
                                  ? Sequential::Optimizer(RMSprop(o.learning_rate))
                                  : Sequential::Optimizer(SGD(o.learning_rate));
  model.compile(dist, o.loss == "mse" ? Loss::mean_squared_error : Loss::categorical_crossentropy,
                opt, o.seed);
  const auto train = as_dataset(load_fashion_mnist(Split::train), model.input_shape());
  const auto test = as_dataset(load_fashion_mnist(Split::test), model.input_shape());
  const FitOptions fit{.batch_size = o.batch_size,
                       .epochs = o.epochs,
                       .shuffle = true,
                       .drop_remainder = o.drop_remainder,
                       .steps_per_epoch = o.max_steps,
                       .verbose = o.quiet ? 0 : 1};
  if (root && !o.quiet) {
    const BatchPlan plan(train.size(), o.batch_size, *dist, {.drop_remainder = o.drop_remainder});
    std::cout << title << " on " << dist->device_mesh() << "\n";
    for (const auto& v : model.variables()) {
      std::cout << "  " << v.path << " " << kdist::detail::shape_repr(v.shape) << " "
                << v.layout.axes_repr();
      if (const auto part = model.optimizer_state_part(v.path)) {  // KDIST_SHARD_OPTIMIZER_STATE
        if (part->second == 0) {
          std::cout << ", optimizer state on another process";  // a small variable owned whole
        } else {
          std::cout << ", optimizer state sharded: elements [" << part->first << ", "
                    << part->first + part->second << ") of its block here";
        }
      }
      std::cout << "\n";
    }
    std::cout << "global batch " << o.batch_size << ", " << plan.local_batch_size()
              << " rows per data shard, " << plan.steps_per_epoch() << " steps per epoch\n";
  }
  if (!o.load_keras_weights.empty()) {
    load_keras_weights_and_say(model, o.load_keras_weights, root);
  }
  if (o.evaluate_only) {
    if (o.resume) {
      load_checkpoint_and_say(model,
                              (std::filesystem::path(o.checkpoint_dir) / "checkpoint.h5").string(),
                              "Loaded checkpoint", root);
    }
  } else if (o.checkpoint_dir.empty()) {
    model.fit(train, fit);
  } else {
    fit_with_checkpoints(model, train, fit, o, root);
  }
  const Metrics t = model.evaluate(test, {.batch_size = o.batch_size, .verbose = o.quiet ? 0 : 1});
  if (root) std::printf("Test loss: %.4f - Test accuracy: %.4f\n", t.loss, t.accuracy);
  if (!o.save_keras_weights.empty()) {
    save_keras_weights(model, o.save_keras_weights, {.dtype = o.keras_weights_dtype});
    if (root && !o.quiet) std::printf("Saved Keras weights to %s\n", o.save_keras_weights.c_str());
  }
  return 0;
}

int train_and_evaluate(std::shared_ptr<const Distribution> dist, const TrainerOptions& o,
                       const char* title) {
  auto model = make_seed_model();
  return train_and_evaluate(model, std::move(dist), o, title);
}

int trainer_main(int argc, char** argv, const char* program, const char* mesh_usage,
                 const std::function<int(const TrainerOptions&)>& body) {
  return kdist::run(argc, argv, [&](int ac, char** av) {
    const std::string usage =
        std::string("usage: ") + program + " [--mesh " + mesh_usage +
        "] [--epochs N] [--batch-size N] [--learning-rate X] [--optimizer adam|rmsprop|sgd] "
        "[--loss crossentropy|mse] [--seed N] [--steps N] [--quiet] [--drop-remainder] "
        "[--checkpoint-dir DIR [--save-every N] [--resume]]";
    const auto options = parse_options(ac, av, usage.c_str(), kdist::process_id() == 0);
    if (!options) return 0;  // --help
    return body(*options);
  });
}

}  // namespace kdist::examples
