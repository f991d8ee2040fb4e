// A mesh axis holds at least one device.
// expect: axis_extent_is_zero<.*("model"|'m', 'o', 'd', 'e', 'l')
#include <kdist/core/mesh.hpp>

#ifdef KDIST_BAD
using Mesh = kdist::DeviceMesh<kdist::axis<"data", 2>, kdist::axis<"model", 0>>;
#else
using Mesh = kdist::DeviceMesh<kdist::axis<"data", 2>, kdist::axis<"model", 1>>;
#endif
[[maybe_unused]] constexpr std::size_t rank = Mesh::rank();
