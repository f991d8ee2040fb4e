// A mesh axis shards one tensor dimension only.
// expect: mesh_axis_used_twice_in_layout<.*("model"|'m', 'o', 'd', 'e', 'l')
#include <kdist/core/layout.hpp>

using Mesh = kdist::DeviceMesh<kdist::axis<"data", 2>, kdist::axis<"model", 4>>;
#ifdef KDIST_BAD
using Layout = kdist::TensorLayout<Mesh, "model", kdist::axes<"data", "model">>;
#else
using Layout = kdist::TensorLayout<Mesh, "model", kdist::axes<"data">>;
#endif
[[maybe_unused]] constexpr std::size_t rank = Layout::rank();
