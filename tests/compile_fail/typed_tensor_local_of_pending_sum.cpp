// local() of a typed tensor that is a pending sum (a row-parallel matmul's result): a compile
// error naming the pending axes and the layout (issue 10); local_summand() says it on purpose,
// and redistribute resolves the sum.
// expect: local_of_a_pending_sum_over<.*(model.*data.*None|'m', 'o', 'd', 'e', 'l'.*'d', 'a', 't', 'a'.*'N', 'o', 'n', 'e')
#include <kdist/tensor/matmul.hpp>

using Mesh = kdist::DeviceMesh<kdist::axis<"data", 2>, kdist::axis<"model", 4>>;

float first(
    const kdist::DistributedTensor<float**, kdist::TensorLayout<Mesh, "data", "model">>& h,
    const kdist::DistributedTensor<float**, kdist::TensorLayout<Mesh, "model", kdist::replicated>>&
        w2) {
  auto y = kdist::matmul(h, w2);  // PendingSum<TensorLayout<Mesh, "data", replicated>, "model">
#ifdef KDIST_BAD
  return y.local()(0, 0);
#else
  return kdist::redistribute(y, y.layout()).local()(0, 0) + y.local_summand()(0, 0);
#endif
}
