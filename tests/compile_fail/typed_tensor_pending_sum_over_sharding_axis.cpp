// A PendingSum over a mesh axis that also shards the tensor: a compile error naming the axis and
// the layout (issue 10); at run time the same is a ValueError of DistributedTensor::from_local.
// expect: pending_sum_over_an_axis_that_shards_the_tensor<.*(model.*model.*None|'m', 'o', 'd', 'e', 'l'.*'m', 'o', 'd', 'e', 'l'.*'N', 'o', 'n', 'e')
#include <kdist/tensor/tensor.hpp>

using Mesh = kdist::DeviceMesh<kdist::axis<"data", 2>, kdist::axis<"model", 4>>;

#ifdef KDIST_BAD
using Partial = kdist::PendingSum<kdist::TensorLayout<Mesh, "model", kdist::replicated>, "model">;
#else
using Partial = kdist::PendingSum<kdist::TensorLayout<Mesh, "data", kdist::replicated>, "model">;
#endif
bool pending() {
  return kdist::DistributedTensor<float**, Partial>::is_pending_sum;
}
