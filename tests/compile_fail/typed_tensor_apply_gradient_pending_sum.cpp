// An optimizer step with a typed gradient that is a pending sum (the data-parallel kernel gradient
// before its all-reduce): a compile error naming the pending axis (issue 10), not replicas that
// drift apart.
// expect: gradient_is_a_pending_sum_over<.*(data|'d', 'a', 't', 'a')
#include <kdist/nn/apply_gradient.hpp>
#include <kdist/ops/optimizers.hpp>
#include <kdist/tensor/matmul.hpp>

using Mesh = kdist::DeviceMesh<kdist::axis<"data", 2>, kdist::axis<"model", 4>>;
using Rows = kdist::TensorLayout<Mesh, "data", kdist::replicated>;

void step(const kdist::DistributedTensor<float**, Rows>& x,
          const kdist::DistributedTensor<float**, Rows>& dy,
          kdist::DistributedTensor<
              float**, kdist::TensorLayout<Mesh, kdist::replicated, kdist::replicated>>& w) {
  auto dw = kdist::matmul<kdist::ops::Op::transpose>(x, dy);  // pending over 'data'
  const kdist::SGD sgd(0.1);
#ifdef KDIST_BAD
  kdist::apply_gradient(sgd, w, dw);
#else
  kdist::apply_gradient(sgd, w, kdist::redistribute(dw, w.layout()));
#endif
}
