// kdist::redistribute of a typed tensor to a static layout on another mesh type: a compile error
// naming both meshes (issue 10).
// expect: redistribute_to_a_layout_of_another_mesh<.*(shape=\(2, 4\).*data.*model.*shape=\(8,\).*batch|'s', 'h', 'a', 'p', 'e', '=', '\(', '2', ',', ' '.*'s', 'h', 'a', 'p', 'e', '=', '\(', '8', ',', '\)')
#include <kdist/tensor/redistribute.hpp>

using Mesh = kdist::DeviceMesh<kdist::axis<"data", 2>, kdist::axis<"model", 4>>;
using Other = kdist::DeviceMesh<kdist::axis<"batch", 8>>;

void move(const kdist::DistributedTensor<float**,
                                         kdist::TensorLayout<Mesh, "data", kdist::replicated>>& x) {
#ifdef KDIST_BAD
  auto y = kdist::redistribute(x, kdist::TensorLayout<Other, "batch", kdist::replicated>{});
#else
  auto y = kdist::redistribute(x, kdist::TensorLayout<Mesh, kdist::replicated, "model">{});
#endif
  (void)y;
}
