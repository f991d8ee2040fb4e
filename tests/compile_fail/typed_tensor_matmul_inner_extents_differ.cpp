// kdist::matmul of typed tensors whose static extents cannot contract: (64, 784) times
// (200, 10) is a compile error naming both extents (issue 10), not a run-time ValueError.
// expect: matmul_inner_extents_differ<784, 200>
#include <kdist/tensor/matmul.hpp>

using Mesh = kdist::DeviceMesh<kdist::axis<"data">, kdist::axis<"model">>;
using Rows = kdist::TensorLayout<Mesh, "data", kdist::replicated>;
using Kernel = kdist::TensorLayout<Mesh, kdist::replicated, "model">;

void product(const kdist::DistributedTensor<float* [784], Rows>& x,
             const kdist::DistributedTensor<float[784][10], Kernel>& w,
             const kdist::DistributedTensor<float[200][10], Kernel>& v) {
#ifdef KDIST_BAD
  auto y = kdist::matmul(x, v);
#else
  auto y = kdist::matmul(x, w);
#endif
  (void)y;
  (void)v;
  (void)w;
}
