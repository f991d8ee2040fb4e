// A run-time tensor (the layout a value) cannot carry static extents: its blocks' extents are
// known at run time only. Write them as * or give the tensor a static TensorLayout (issue 10).
// expect: run_time_tensor_has_static_extents<float ?\[8\]\[6\]>
#include <kdist/tensor/tensor.hpp>

using Mesh = kdist::DeviceMesh<kdist::axis<"data">>;

#ifdef KDIST_BAD
kdist::DistributedTensor<float[8][6]> t;
#else
kdist::DistributedTensor<float**> t;
kdist::DistributedTensor<float[8][6], kdist::TensorLayout<Mesh, "data", kdist::replicated>> typed;
#endif
