// A misspelt axis on a mesh with a dynamic extent: the diagnostic prints the mesh with the dynamic
// extent as `?` (shape=(?, 4)), and the compiler's instantiation notes print the axis as
// kdist::axis<..."data"..., kdist::detail::axis_extent{"dynamic_extent"}>: nowhere as
// 18446744073709551615 (std::dynamic_extent's value).
// expect: axis_not_in_mesh<.*("modle"|'m', 'o', 'd', 'l', 'e').*(shape=\(\?, 4\), axis_names=\[.*data.*model|'s', 'h', 'a', 'p', 'e', '=', '\(', '\?', ',', ' ')
// forbid: 18446744073709551615
#include <kdist/core/layout.hpp>

using Mesh = kdist::DeviceMesh<kdist::axis<"data">, kdist::axis<"model", 4>>;
#ifdef KDIST_BAD
using Kernel = kdist::TensorLayout<Mesh, kdist::replicated, "modle">;
#else
using Kernel = kdist::TensorLayout<Mesh, kdist::replicated, "model">;
#endif
[[maybe_unused]] constexpr std::size_t rank = Kernel::rank();
