// A rank-2 static layout given to distribute_tensor<float*>: a compile error naming both ranks and
// the layout (issue 10), not a run-time ValueError.
// expect: layout_rank_mismatch<2(UL)?, 1(UL)?, .*(None|'N', 'o', 'n', 'e')
#include <kdist/tensor/distribute_tensor.hpp>

#include <cstddef>

using Mesh = kdist::DeviceMesh<kdist::axis<"data", 2>, kdist::axis<"model", 4>>;

void make() {
  kdist::TensorLayout<Mesh, kdist::replicated, "model"> kernel(Mesh{});
#ifdef KDIST_BAD
  auto bias =
      kdist::distribute_tensor<float*>([](std::size_t i) { return float(i); }, {200}, kernel);
#else
  kdist::TensorLayout<Mesh, "model"> bias_layout(Mesh{});
  auto bias =
      kdist::distribute_tensor<float*>([](std::size_t i) { return float(i); }, {200}, bias_layout);
#endif
  (void)bias;
  (void)kernel;
}
