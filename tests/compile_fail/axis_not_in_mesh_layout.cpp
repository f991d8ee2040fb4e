// A layout that names an axis the mesh does not have: the ModelParallel page's 'batch' axis on the
// distributed-training guide's ('data', 'model') mesh.
// expect: axis_not_in_mesh<.*("batch"|'b', 'a', 't', 'c', 'h').*(shape=\(2, 4\), axis_names=\[.*data.*model|'s', 'h', 'a', 'p', 'e', '=', '\(', '2', ',', ' ')
#include <kdist/core/layout.hpp>

using Mesh = kdist::DeviceMesh<kdist::axis<"data", 2>, kdist::axis<"model", 4>>;
#ifdef KDIST_BAD
using Output = kdist::TensorLayout<Mesh, "batch", kdist::replicated>;
#else
using Output = kdist::TensorLayout<Mesh, "data", kdist::replicated>;
#endif
[[maybe_unused]] constexpr std::size_t rank = Output::rank();
