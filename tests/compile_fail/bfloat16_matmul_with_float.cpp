// A product of a bfloat16 tensor and a float32 one does not compile: cast one first (kdist::cast).
// expect: matmul_operands_hold_different_scalar_types
#include <kdist/tensor/cast.hpp>
#include <kdist/tensor/matmul.hpp>

void f(const kdist::DistributedTensor<kdist::bfloat16**>& a,
       const kdist::DistributedTensor<float**>& b) {
#ifdef KDIST_BAD
  (void)kdist::matmul(a, b);
#else
  (void)kdist::matmul(kdist::cast<float>(a), b);
#endif
}
