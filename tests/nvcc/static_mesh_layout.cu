// A static mesh/layout program compiled by plain nvcc (tests/nvcc.cmake), linked and run: the
// guide's 2x4 mesh, the ModelParallel page's kernel and conv2d layouts, checked at compile time
// and at run time, a dynamic extent inferred, and the conversion to the run-time layout.
// tests/hipcc/static_mesh_layout.hip compiles it again under hipcc.
#include <array>
#include <cstdio>
#include <kdist/core/layout.hpp>
#include <kdist/core/mesh.hpp>
#include <kdist/core/runtime_layout.hpp>
#include <kdist/core/runtime_mesh.hpp>

#ifndef KDIST_STATIC_PROGRAM_COMPILER
#define KDIST_STATIC_PROGRAM_COMPILER "nvcc"
#endif

using Mesh = kdist::DeviceMesh<kdist::axis<"data", 2>, kdist::axis<"model", 4>>;
using Kernel = kdist::TensorLayout<Mesh, kdist::replicated, "model">;
using Conv =
    kdist::TensorLayout<Mesh, kdist::replicated, kdist::replicated, kdist::replicated, "model">;
using DataDyn = kdist::DeviceMesh<kdist::axis<"data">, kdist::axis<"model", 4>>;

static_assert(Mesh::axis_index<"model"> == 1 && Mesh::static_size() == 8);
static_assert(Kernel::axes_repr() == "(None, 'model')");
static_assert(Kernel::static_local_extents<784, 200>({1, 3}) ==
              std::array<std::size_t, 2>{784, 50});
static_assert(Conv::static_shards(3) == 4 && Conv::static_shards(0) == 1);

// A __global__ function in the same translation unit: the headers are fine beside device code.
__global__ void touch(int* p) {
  if (p != nullptr) *p = 1;
}

int main() {
  int failures = 0;
  auto check = [&](bool ok, const char* what) {
    if (!ok) {
      std::printf("FAILED: %s\n", what);
      ++failures;
    }
  };
  Mesh mesh(8);
  Kernel kernel(mesh);
  check(kernel.local_extents<2>({784, 200}, 7) == std::array<std::size_t, 2>{784, 50},
        "local extents of device 7");
  check(kernel.offsets<2>({784, 200}, 6) == std::array<std::size_t, 2>{0, 100}, "offsets");
  DataDyn dyn(12);
  check(dyn.extent(0) == 3 && dyn.extent(1) == 4, "dynamic extent inferred from 12 devices");
  const kdist::RuntimeTensorLayout runtime(kernel);
  check(runtime.axes_repr() == "(None, 'model')", "run-time layout from the static one");
  check(mesh.to_string() == "<DeviceMesh shape=(2, 4), axis_names=['data', 'model']>", "repr");
  (void)touch;
  if (failures == 0)
    std::printf("static mesh and layout ok under %s\n", KDIST_STATIC_PROGRAM_COMPILER);
  return failures == 0 ? 0 : 1;
}
