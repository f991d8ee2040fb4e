// Every mesh axis has a name.
// expect: axis_name_is_empty<4>
#include <kdist/core/mesh.hpp>

#ifdef KDIST_BAD
using Mesh = kdist::DeviceMesh<kdist::axis<"data", 2>, kdist::axis<"", 4>>;
#else
using Mesh = kdist::DeviceMesh<kdist::axis<"data", 2>, kdist::axis<"model", 4>>;
#endif
[[maybe_unused]] constexpr std::size_t rank = Mesh::rank();
