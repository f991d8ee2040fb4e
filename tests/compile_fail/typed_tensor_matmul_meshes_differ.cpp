// kdist::matmul of typed tensors on two mesh types: a compile error naming both meshes (issue 10),
// not a run-time ValueError.
// expect: matmul_operands_on_different_meshes<.*(shape=\(2, 4\).*data.*model.*shape=\(8,\).*batch|'s', 'h', 'a', 'p', 'e', '=', '\(', '2', ',', ' '.*'s', 'h', 'a', 'p', 'e', '=', '\(', '8', ',', '\)')
#include <kdist/tensor/matmul.hpp>

using Mesh = kdist::DeviceMesh<kdist::axis<"data", 2>, kdist::axis<"model", 4>>;
using Other = kdist::DeviceMesh<kdist::axis<"batch", 8>>;

void product(
    const kdist::DistributedTensor<float**, kdist::TensorLayout<Mesh, "data", kdist::replicated>>&
        x,
    const kdist::DistributedTensor<float**, kdist::TensorLayout<Mesh, kdist::replicated, "model">>&
        w,
    const kdist::DistributedTensor<
        float**, kdist::TensorLayout<Other, kdist::replicated, kdist::replicated>>& v) {
#ifdef KDIST_BAD
  auto y = kdist::matmul(x, v);
#else
  auto y = kdist::matmul(x, w);
#endif
  (void)y;
  (void)v;
  (void)w;
}
