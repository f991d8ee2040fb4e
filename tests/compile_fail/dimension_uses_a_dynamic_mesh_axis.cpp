// Static shard arithmetic on a dimension sharded over a dynamic mesh axis: the extent is known
// only at run time (use local_extents on a mesh object).
// expect: dimension_uses_a_dynamic_mesh_axis<0,
#include <array>

#include <kdist/core/layout.hpp>

using Mesh = kdist::DeviceMesh<kdist::axis<"data">, kdist::axis<"model", 4>>;
#ifdef KDIST_BAD
using Layout = kdist::TensorLayout<Mesh, "data", "model">;
#else
using Layout = kdist::TensorLayout<Mesh, kdist::replicated, "model">;
#endif
[[maybe_unused]] constexpr std::array<std::size_t, 2> local =
    Layout::static_local_extents<784, 200>({0, 1});
