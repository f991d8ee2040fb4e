// A rank-2 layout applied (local_extents) to a rank-3 shape.
// expect: layout_rank_mismatch<2, 3,
#include <array>

#include <kdist/core/layout.hpp>

using Mesh = kdist::DeviceMesh<kdist::axis<"data", 2>, kdist::axis<"model", 4>>;
using Kernel = kdist::TensorLayout<Mesh, kdist::replicated, "model">;

std::size_t local_columns(const Kernel& kernel, std::size_t device) {
#ifdef KDIST_BAD
  const std::array<std::size_t, 3> shape{784, 200, 1};
#else
  const std::array<std::size_t, 2> shape{784, 200};
#endif
  return kernel.local_extents(shape, device)[1];
}
