// kdist::apply_gradient with a gradient whose static extents differ from the variable's: a
// compile error naming both shapes (issue 10).
// expect: gradient_shape_differs_from_the_variables<.*(\(784, 100\)|'\(', '7', '8', '4', ',', ' ', '1', '0', '0', '\)')
#include <kdist/nn/apply_gradient.hpp>
#include <kdist/ops/optimizers.hpp>

using Mesh = kdist::DeviceMesh<kdist::axis<"data">, kdist::axis<"model">>;
using Kernel = kdist::TensorLayout<Mesh, kdist::replicated, "model">;

void step(kdist::DistributedTensor<float[784][200], Kernel>& w,
          const kdist::DistributedTensor<float* [200], Kernel>& g,
          const kdist::DistributedTensor<float[784][100], Kernel>& wrong) {
  const kdist::SGD sgd(0.1f);
#ifdef KDIST_BAD
  kdist::apply_gradient(sgd, w, wrong);
#else
  kdist::apply_gradient(sgd, w, g);  // a run-time extent agrees with any
  (void)wrong;
#endif
}
