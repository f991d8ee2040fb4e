// Every DeviceMesh argument is a kdist::axis<"name", extent>; here a bare extent type slipped in.
// expect: mesh_argument_is_not_an_axis<int>
#include <kdist/core/mesh.hpp>

#ifdef KDIST_BAD
using Mesh = kdist::DeviceMesh<kdist::axis<"data", 2>, int>;
#else
using Mesh = kdist::DeviceMesh<kdist::axis<"data", 2>, kdist::axis<"model", 4>>;
#endif
[[maybe_unused]] constexpr std::size_t rank = Mesh::rank();
