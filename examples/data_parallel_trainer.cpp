// DataParallel trainer: the seeds' model on Fashion-MNIST, variables replicated, the global batch
// split over the mesh's first axis. The mesh comes from the command line: --mesh N is
// DeviceMesh<axis<"batch">> (Keras' DataParallel(devices) mesh), --mesh NxM is the trainers'
// DeviceMesh<axis<"data">, axis<"model">>, e.g.
//   mpiexec -n 2 build/examples/data_parallel_trainer --mesh 2
#include <kdist/data_parallel.hpp>

#include "common/trainer.hpp"

namespace {

template <class Mesh>
int train_on(const Mesh& mesh, const kdist::examples::TrainerOptions& o) {
  auto dist = std::make_shared<kdist::DataParallel>(mesh);
  kdist::set_distribution(dist);
  return kdist::examples::train_and_evaluate(dist, o, "DataParallel");
}

}  // namespace

int main(int argc, char** argv) {
  return kdist::examples::trainer_main(argc, argv, [](int ac, char** av) {
    const char* usage =
        "usage: data_parallel_trainer [--mesh N | NxM] [--epochs N] [--batch-size N] "
        "[--learning-rate X] [--optimizer adam|rmsprop|sgd] [--loss crossentropy|mse] [--seed N] "
        "[--steps N] [--quiet]";
    auto parsed = kdist::examples::parse_options(ac, av, usage, kdist::process_id() == 0);
    if (!parsed) return 0;  // --help
    auto o = *parsed;
    const auto devices = kdist::list_devices();
    if (o.mesh.empty()) o.mesh = {devices.size()};
    if (o.mesh.size() > 2)
      throw kdist::ValueError("--mesh takes one or two extents, e.g. --mesh 4");
    if (o.mesh.size() == 1) {
      return train_on(kdist::DeviceMesh<kdist::axis<"batch">>({o.mesh[0]}, devices), o);
    }
    return train_on(kdist::examples::TrainerMesh({o.mesh[0], o.mesh[1]}, devices), o);
  });
}
