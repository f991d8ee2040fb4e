// The first argument of TensorLayout is a DeviceMesh type (a run-time mesh goes in a
// RuntimeTensorLayout).
// expect: layout_mesh_is_not_a_device_mesh<kdist::RuntimeDeviceMesh>
#include <kdist/core/layout.hpp>
#include <kdist/core/runtime_mesh.hpp>

#ifdef KDIST_BAD
using Kernel = kdist::TensorLayout<kdist::RuntimeDeviceMesh, kdist::replicated, "model">;
#else
using Kernel =
    kdist::TensorLayout<kdist::DeviceMesh<kdist::axis<"model", 4>>, kdist::replicated, "model">;
#endif
[[maybe_unused]] constexpr std::size_t rank = Kernel::rank();
