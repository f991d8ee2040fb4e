// A mesh needs at least one axis.
// expect: mesh_has_no_axes<kdist::DeviceMesh<>
#include <kdist/core/mesh.hpp>

#ifdef KDIST_BAD
using Mesh = kdist::DeviceMesh<>;
#else
using Mesh = kdist::DeviceMesh<kdist::axis<"batch">>;
#endif
[[maybe_unused]] constexpr std::size_t rank = Mesh::rank();
