// ModelParallel trainer: the seeds' model on Fashion-MNIST with the guide's LayoutMap
//   d1/kernel (None, "model"), d1/bias ("model",), d2/output ("data", None)
// on a mesh whose axes are named in its type, DeviceMesh<axis<"data">, axis<"model">>, with
// extents from the command line, e.g.
//   mpiexec -n 2 build/examples/model_parallel_trainer --mesh 1x2
// The rules and the batch axis are checked against the mesh type at compile time: "modle" here
// would not compile.
#include <kdist/layout_map.hpp>
#include <kdist/model_parallel.hpp>

#include "common/trainer.hpp"

int main(int argc, char** argv) {
  return kdist::examples::trainer_main(argc, argv, [](int ac, char** av) {
    const char* usage =
        "usage: model_parallel_trainer [--mesh DATAxMODEL] [--epochs N] [--batch-size N] "
        "[--learning-rate X] [--optimizer adam|rmsprop|sgd] [--loss crossentropy|mse] [--seed N] "
        "[--steps N] [--quiet]";
    auto parsed = kdist::examples::parse_options(ac, av, usage, kdist::process_id() == 0);
    if (!parsed) return 0;  // --help
    auto o = *parsed;
    const auto devices = kdist::list_devices();
    if (o.mesh.empty()) o.mesh = {1, devices.size()};
    if (o.mesh.size() != 2) {
      throw kdist::ValueError("--mesh needs two extents (data x model), e.g. --mesh 2x4");
    }
    const kdist::examples::TrainerMesh mesh({o.mesh[0], o.mesh[1]}, devices);
    kdist::LayoutMap layout_map{mesh};
    layout_map["d1/kernel"] = {kdist::replicated, "model"};
    layout_map["d1/bias"] = {"model"};
    layout_map["d2/output"] = {"data", kdist::replicated};
    const kdist::ModelParallel model_parallel(layout_map,
                                              "data");  // "data" checked at compile time
    auto dist = std::make_shared<kdist::ModelParallel>(model_parallel);
    kdist::set_distribution(dist);
    return kdist::examples::train_and_evaluate(dist, o, "ModelParallel");
  });
}
