// DataParallel trainer: the seeds' model on Fashion-MNIST, variables replicated, the global batch
// split over the mesh's first axis. The mesh comes from the command line: --mesh N is
// DeviceMesh<axis<"batch">> (Keras' DataParallel(devices) mesh), --mesh NxM is the trainers'
// DeviceMesh<axis<"data">, axis<"model">>, e.g.
//   mpiexec -n 2 build/examples/data_parallel_trainer --mesh 2
#include <kdist/strategy/data_parallel.hpp>

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
  using namespace kdist::examples;
  return trainer_main(argc, argv, "data_parallel_trainer", "N | NxM", [](const TrainerOptions& o) {
    if (!o.layout_map.empty()) {
      throw kdist::ValueError(
          "--layout-map: DataParallel shards only the batch and takes no LayoutMap; use "
          "model_parallel_trainer or conv2d_trainer for rules from a file");
    }
    const auto devices = kdist::list_devices();
    if (o.mesh.size() == 2) return train_on(data_model_mesh(o, devices), o);
    if (o.mesh.size() > 2)
      throw kdist::ValueError("--mesh takes one or two extents, e.g. --mesh 4");
    const std::size_t n = o.mesh.empty() ? devices.size() : o.mesh[0];
    return train_on(kdist::DeviceMesh<kdist::axis<"batch">>({n}, devices), o);
  });
}
