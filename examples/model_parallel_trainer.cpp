// ModelParallel trainer: the seeds' model on Fashion-MNIST with the guide's LayoutMap
//   d1/kernel (None, "model"), d1/bias ("model",), d2/output ("data", None)
// on a mesh whose axes are named in its type, DeviceMesh<axis<"data">, axis<"model">>, with
// extents from the command line, e.g.
//   mpiexec -n 2 build/examples/model_parallel_trainer --mesh 1x2
// The rules and the batch axis are checked against the mesh type at compile time: "modle" here
// would not compile. `--layout-map FILE` reads the rules from a JSON file instead
// (examples/layout_maps/model_parallel_guide.json is the same map), checked at run time.
#include <kdist/strategy/layout_map.hpp>
#include <kdist/strategy/model_parallel.hpp>

#include "common/layout_map_flag.hpp"
#include "common/trainer.hpp"

int main(int argc, char** argv) {
  using namespace kdist::examples;
  return trainer_main(
      argc, argv, "model_parallel_trainer", "DATAxMODEL", [](const TrainerOptions& o) {
        const TrainerMesh mesh = data_model_mesh(o, kdist::list_devices());
        kdist::LayoutMap layout_map{mesh};
        if (o.layout_map.empty()) {
          layout_map["d1/kernel"] = {kdist::replicated, "model"};
          layout_map["d1/bias"] = {"model"};
          layout_map["d2/output"] = {"data", kdist::replicated};
        } else {
          read_layout_map_flag(o.layout_map, layout_map);  // checked against the mesh at run time
        }
        const kdist::ModelParallel model_parallel(layout_map,
                                                  "data");  // "data" checked at compile time
        auto dist = std::make_shared<kdist::ModelParallel>(model_parallel);
        kdist::set_distribution(dist);
        return train_and_evaluate(dist, o, "ModelParallel");
      });
}
