// Mesh::axis_index<"name"> of a name the mesh does not have (a typo) names it and the mesh's axes.
// expect: axis_not_in_mesh<.*("modle"|'m', 'o', 'd', 'l', 'e').*(shape=\(2, 4\), axis_names=\[.*data.*model|'s', 'h', 'a', 'p', 'e', '=', '\(', '2', ',', ' ')
#include <kdist/core/mesh.hpp>

using Mesh = kdist::DeviceMesh<kdist::axis<"data", 2>, kdist::axis<"model", 4>>;
#ifdef KDIST_BAD
[[maybe_unused]] constexpr std::size_t model = Mesh::axis_index<"modle">;
#else
[[maybe_unused]] constexpr std::size_t model = Mesh::axis_index<"model">;
#endif
static_assert(kdist::axis_index_v<Mesh, "data"> == 0);
