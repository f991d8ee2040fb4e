// Quickstart: the DeviceMesh and TensorLayout part of Keras' distributed-training guide, in C++.
//
//   mpiexec -n 8 build/examples/quickstart     (fewer ranks work too: a mesh is a description)
//
// Prints, from rank 0: the guide's 2x4 mesh over the world's devices, the guide's layouts as Keras
// prints them, each mesh shape of the guide, and which block of the (784, 200) kernel of layout
// (None, "model") each device holds.
#include <array>
#include <cstdio>
#include <string>
#include <vector>

#include <kdist/core/layout.hpp>
#include <kdist/parallel/initialize.hpp>

namespace {

// Axis names and the 2x4 shape are part of the type; the devices are given at run time.
using Mesh = kdist::DeviceMesh<kdist::axis<"data", 2>, kdist::axis<"model", 4>>;
using kdist::replicated;

std::string range(std::size_t begin, std::size_t size) {
  return "[" + std::to_string(begin) + ", " + std::to_string(begin + size) + ")";
}

void print_kernel_blocks(const Mesh& mesh) {
  const std::array<std::size_t, 2> shape{784, 200};
  const kdist::TensorLayout<Mesh, replicated, "model"> kernel(mesh);
  std::printf("\nd1/kernel of shape (784, 200), layout %s:\n",
              std::string(kernel.axes_repr()).c_str());
  std::printf("  %-9s %-13s %-11s %-11s %s\n", "device", "(data,model)", "rows", "columns",
              "local shape");
  for (std::size_t d = 0; d < mesh.size(); ++d) {
    const auto coords = mesh.coords_of(d);
    const auto offset = kernel.offsets(shape, d);
    const auto local = kernel.local_extents(shape, d);
    std::printf("  %-9s (%zu, %zu)%-7s %-11s %-11s (%zu, %zu)\n", mesh.devices()[d].c_str(),
                coords[0], coords[1], "", range(offset[0], local[0]).c_str(),
                range(offset[1], local[1]).c_str(), local[0], local[1]);
  }
}

}  // namespace

int main(int argc, char** argv) {
  kdist::ScopeGuard guard(argc, argv);  // MPI and Kokkos, finalised at scope exit
  if (kdist::process_id() != 0) return 0;

  // The guide's mesh: DeviceMesh(shape=(2, 4), axis_names=["data", "model"], devices=devices).
  std::vector<std::string> devices = kdist::list_devices();
  if (devices.size() != Mesh::static_size()) {
    std::printf(
        "(%zu devices in this run; the 2x4 mesh below uses 8 named devices: "
        "mpiexec -n 8 gives it the world's)\n",
        devices.size());
    devices = Mesh(Mesh::static_size()).devices();
  }
  const Mesh mesh(devices);
  std::printf("mesh = %s\n", mesh.to_string().c_str());

  // The guide's layouts, printed as Keras prints them.
  const kdist::TensorLayout<Mesh, "model", "data"> layout_2d(mesh);
  const kdist::TensorLayout<Mesh, "data", replicated, replicated, replicated> replicated_layout_4d(
      mesh);
  std::printf("layout_2d = %s\n", layout_2d.to_string().c_str());
  std::printf("replicated_layout_4d = %s\n", replicated_layout_4d.to_string().c_str());
  // The LayoutMap rules of the guide's ModelParallel example.
  std::printf("d1/kernel: %s\n",
              kdist::TensorLayout<Mesh, replicated, "model">(mesh).to_string().c_str());
  std::printf("d1/bias:   %s\n", kdist::TensorLayout<Mesh, "model">(mesh).to_string().c_str());
  std::printf("d2/output: %s\n",
              kdist::TensorLayout<Mesh, "data", replicated>(mesh).to_string().c_str());

  // "Change the mesh structure ... no changes are needed for any other code": one mesh type with
  // both extents dynamic takes every shape of the guide.
  using AnyMesh = kdist::DeviceMesh<kdist::axis<"data">, kdist::axis<"model">>;
  std::printf("\nmesh shapes of the guide, and the kernel's local shape on each:\n");
  for (const auto& shape : {std::array<std::size_t, 2>{8, 1}, {4, 2}, {2, 4}, {1, 8}, {2, 1}}) {
    const AnyMesh any(shape, shape[0] * shape[1]);
    const kdist::TensorLayout<AnyMesh, replicated, "model"> kernel(any);
    const auto local = kernel.local_extents(std::array<std::size_t, 2>{784, 200}, 0);
    std::printf("  %s  kernel per device: (%zu, %zu)\n", any.to_string().c_str(), local[0],
                local[1]);
  }

  print_kernel_blocks(mesh);
  return 0;
}
