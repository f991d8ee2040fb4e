#pragma once
// The seeds' model trained on Fashion-MNIST under a Keras distribution: shared by the trainers.
// The training itself is the library's (kdist::Sequential::fit / evaluate); this adds the flags,
// the dataset and the summary lines. The functions declared here are compiled once, in
// common/trainer.cpp (the library kdist_example_trainer; in a checked build, the programs' one
// unit: examples/CMakeLists.txt), not in every trainer (CI time).

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <kdist/core/mesh.hpp>
#include <kdist/nn/array_dataset.hpp>
#include <kdist/nn/model.hpp>
#include <kdist/parallel/initialize.hpp>
#include <kdist/strategy/distribution.hpp>

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
void fit_with_checkpoints(Sequential& model, const ArrayDataset<float>& train, FitOptions fit,
                          const TrainerOptions& o, bool root);

//! Compiles `model` under `dist` with the flags' loss and optimizer, prints the variables' layouts,
//! trains with model.fit and evaluates with model.evaluate on Fashion-MNIST; prints from process 0.
int train_and_evaluate(Sequential& model, std::shared_ptr<const Distribution> dist,
                       const TrainerOptions& o, const char* title);

//! The seeds' model on a mesh's distribution.
int train_and_evaluate(std::shared_ptr<const Distribution> dist, const TrainerOptions& o,
                       const char* title);

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
int trainer_main(int argc, char** argv, const char* program, const char* mesh_usage,
                 const std::function<int(const TrainerOptions&)>& body);

}  // namespace kdist::examples
