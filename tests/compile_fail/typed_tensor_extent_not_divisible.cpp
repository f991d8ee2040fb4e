// A typed tensor whose static extent an EvenTensorLayout cannot divide: 202 columns over 4
// 'model' shards is a compile error naming the dimension, extent and shards (issue 10).
// expect: extent_not_divisible<1, 202, 4,
#include <kdist/tensor/tensor.hpp>

using Mesh = kdist::DeviceMesh<kdist::axis<"data">, kdist::axis<"model", 4>>;
using Kernel = kdist::EvenTensorLayout<Mesh, kdist::replicated, "model">;

#ifdef KDIST_BAD
kdist::DistributedTensor<float[784][202], Kernel> w;
#else
kdist::DistributedTensor<float[784][200], Kernel> w;
static_assert(std::is_same_v<decltype(w)::view_type::data_type, float[784][50]>);
#endif
