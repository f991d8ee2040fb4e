// An optimizer step with a typed gradient laid out otherwise than its variable: a compile error
// naming both layouts (issue 10).
// expect: gradient_layout_differs_from_the_variables<kdist::TensorLayout<.*(model|109, 111, 100, 101, 108).*kdist::TensorLayout<
#include <kdist/nn/apply_gradient.hpp>
#include <kdist/ops/optimizers.hpp>
#include <kdist/tensor/redistribute.hpp>

using Mesh = kdist::DeviceMesh<kdist::axis<"data", 2>, kdist::axis<"model", 4>>;
using Kernel = kdist::TensorLayout<Mesh, kdist::replicated, "model">;

void step(
    kdist::DistributedTensor<float**, Kernel>& w,
    const kdist::DistributedTensor<float**, kdist::TensorLayout<Mesh, "model", kdist::replicated>>&
        g) {
  const kdist::SGD sgd(0.1);
#ifdef KDIST_BAD
  kdist::apply_gradient(sgd, w, g);
#else
  kdist::apply_gradient(sgd, w, kdist::redistribute(g, w.layout()));
#endif
}
