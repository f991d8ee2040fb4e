// Axis names are unique (Keras does not check this).
// expect: duplicate_axis_name<.*("data"|'d', 'a', 't', 'a')
#include <kdist/core/mesh.hpp>

#ifdef KDIST_BAD
using Mesh = kdist::DeviceMesh<kdist::axis<"data", 2>, kdist::axis<"data", 4>>;
#else
using Mesh = kdist::DeviceMesh<kdist::axis<"data", 2>, kdist::axis<"model", 4>>;
#endif
[[maybe_unused]] constexpr std::size_t rank = Mesh::rank();
