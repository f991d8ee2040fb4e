#pragma once
//! \file core/bfloat16.hpp
//! bfloat16 as bits: the upper half of a float32 (1 sign, 8 exponent, 7 mantissa bits), what
//! Keras' "bfloat16" and "mixed_bfloat16" policies store and move. `to_bfloat16_bits` rounds a
//! float to the nearest bfloat16, ties to even (as PyTorch's c10::BFloat16, JAX's and the bf16
//! instructions of CPUs and GPUs do); a NaN stays a NaN (quiet), values beyond bfloat16's largest
//! finite one (about 3.39e38) round to infinity. `from_bfloat16_bits` is exact. Both run in host
//! code and in device kernels (nvcc, hipcc). Plain bits rather than a Kokkos type: Kokkos 3.4
//! (Debian's) has no `Kokkos::Experimental::bhalf_t`, and the bits are all MPI needs to move.
//!
//! Relative rounding error of one conversion: at most 2^-8 (half a unit in the last of 8
//! significant bits), for every normal value.

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__) || defined(__HIPCC__)
#define KDIST_HOST_DEVICE __host__ __device__
#else
#define KDIST_HOST_DEVICE
#endif

namespace kdist {

//! The bfloat16 nearest `x` (ties to even), as its 16 bits.
KDIST_HOST_DEVICE inline std::uint16_t to_bfloat16_bits(float x) {
  std::uint32_t u = 0;
  memcpy(&u, &x, sizeof u);
  if ((u & 0x7fffffffU) > 0x7f800000U) {  // NaN: keep its sign and payload's top,
    return static_cast<std::uint16_t>((u >> 16) | 0x0040U);  // quiet
  }
  u += 0x7fffU + ((u >> 16) & 1U);  // round to nearest, ties to even (carries into the exponent)
  return static_cast<std::uint16_t>(u >> 16);
}

//! The float whose upper half is `bits` (exact).
KDIST_HOST_DEVICE inline float from_bfloat16_bits(std::uint16_t bits) {
  const std::uint32_t u = static_cast<std::uint32_t>(bits) << 16;
  float x = 0;
  memcpy(&x, &u, sizeof x);
  return x;
}

}  // namespace kdist
