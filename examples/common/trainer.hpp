#pragma once
// The seeds' model trained on Fashion-MNIST under a Keras distribution: shared by the trainers.
// The training itself is the library's (kdist::Sequential::fit / evaluate); this adds the flags,
// the dataset and the summary lines.

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <kdist/core/mesh.hpp>
#include <kdist/io/async_checkpoint.hpp>
#include <kdist/io/checkpoint.hpp>
#include <kdist/io/keras_weights.hpp>
#include <kdist/nn/array_dataset.hpp>
#include <kdist/nn/model.hpp>
#include <kdist/parallel/initialize.hpp>
#include <kdist/parallel/run.hpp>
#include <kdist/strategy/data_sharding.hpp>

#include "common/fashion_mnist.hpp"
#include "common/load_and_say.hpp"
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

//! Fashion-MNIST as a kdist::ArrayDataset of `example_shape` ((784,) or (28, 28, 1)) with its
//! integer labels; the images are moved out of `data`.
inline ArrayDataset<float> as_dataset(FashionMnist&& data, Shape example_shape) {
  std::vector<std::int32_t> labels(data.labels.begin(), data.labels.end());
  return ArrayDataset<float>(std::move(data.images), std::move(example_shape), std::move(labels));
}

//! model.fit with a checkpoint in --checkpoint-dir every --save-every epochs and after the last
//! (an on_epoch_end callback, Keras' ModelCheckpoint), written in the background while training
//! goes on (kdist::AsyncCheckpointer: "Saved ..." is printed once the file is published); with
//! --resume, first loads that checkpoint (saved on any mesh) and continues after its epoch: the
//! same losses as a run never interrupted.
inline void fit_with_checkpoints(Sequential& model, const ArrayDataset<float>& train,
                                 FitOptions fit, const TrainerOptions& o, bool root) {
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

//! Compiles `model` under `dist` with the flags' loss and optimizer, prints the variables' layouts,
//! trains with model.fit and evaluates with model.evaluate on Fashion-MNIST; prints from process 0.
inline int train_and_evaluate(Sequential& model, std::shared_ptr<const Distribution> dist,
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

//! The seeds' model on a mesh's distribution.
inline int train_and_evaluate(std::shared_ptr<const Distribution> dist, const TrainerOptions& o,
                              const char* title) {
  auto model = make_seed_model();
  return train_and_evaluate(model, std::move(dist), o, title);
}

//! The mesh the trainers run on: two axes named in the type, extents from the command line.
using TrainerMesh = DeviceMesh<axis<"data">, axis<"model">>;

//! The (data, model) mesh of `--mesh DATAxMODEL` over `devices`, (1, N) without the flag.
//! Errors: ValueError for another number of extents, or extents whose product is not N.
inline TrainerMesh data_model_mesh(const TrainerOptions& o,
                                   const std::vector<std::string>& devices) {
  const std::vector<std::size_t> shape =
      o.mesh.empty() ? std::vector<std::size_t>{1, devices.size()} : o.mesh;
  if (shape.size() != 2) {
    throw ValueError("--mesh needs two extents (data x model), e.g. --mesh 2x4");
  }
  return TrainerMesh({shape[0], shape[1]}, devices);
}

//! main() of a trainer: parses the flags (`--help` prints the usage and ends with 0), then runs
//! `body` under kdist::run, so an error on every process is printed once and an error on some
//! processes only ends the whole job (MPI_Abort) with the failing process' message.
inline int trainer_main(int argc, char** argv, const char* program, const char* mesh_usage,
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
