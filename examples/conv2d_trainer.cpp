// Conv2D trainer: Conv2D(16, 3x3, relu, "conv2d") -> Flatten -> Dense(10, softmax, "d2") on
// Fashion-MNIST images (28, 28, 1), with the ModelParallel page's convolution rules
//   conv2d.*kernel (None, None, None, "model"), conv2d.*bias ("model",)
// on DeviceMesh<axis<"data">, axis<"model">> with extents from the command line, e.g.
//   mpiexec -n 2 build/examples/conv2d_trainer --mesh 1x2 --epochs 1
// Each process convolves its examples with its block of filters; the flattened features are
// gathered over "model" before the Dense layer.
#include <kdist/nn/layers/conv2d.hpp>
#include <kdist/strategy/layout_map.hpp>
#include <kdist/strategy/model_parallel.hpp>

#include "common/layout_map_flag.hpp"
#include "common/trainer.hpp"

int main(int argc, char** argv) {
  using namespace kdist::examples;
  return trainer_main(argc, argv, "conv2d_trainer", "DATAxMODEL", [](const TrainerOptions& o) {
    const TrainerMesh mesh = data_model_mesh(o, kdist::list_devices());
    kdist::LayoutMap layout_map{mesh};
    if (o.layout_map.empty()) {
      layout_map["conv2d.*kernel"] = {kdist::replicated, kdist::replicated, kdist::replicated,
                                      "model"};
      layout_map["conv2d.*bias"] = {"model"};
    } else {
      read_layout_map_flag(o.layout_map, layout_map);  // checked against the mesh at run time
    }
    const kdist::ModelParallel model_parallel(layout_map,
                                              "data");  // "data" checked at compile time
    auto dist = std::make_shared<kdist::ModelParallel>(model_parallel);
    kdist::set_distribution(dist);

    using namespace kdist::layers;
    std::vector<kdist::Sequential::Layer> layers;
    layers.emplace_back(Conv2D(16, {3, 3}, Activation::relu, true, "conv2d"));
    layers.emplace_back(Flatten());
    layers.emplace_back(Dense(10, Activation::softmax, true, "d2"));
    kdist::Sequential model({28, 28, 1}, std::move(layers));
    return train_and_evaluate(model, dist, o, "ModelParallel (Conv2D)");
  });
}
