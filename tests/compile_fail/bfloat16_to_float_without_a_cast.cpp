// bfloat16 and float32 do not mix without a cast (Keras casts to the compute dtype explicitly).
// expect: (cannot convert|no viable conversion|no suitable conversion)
#include <kdist/core/bfloat16.hpp>

float f(kdist::bfloat16 b) {
#ifdef KDIST_BAD
  float x = b;
#else
  float x = static_cast<float>(b);
#endif
  return x;
}
