#pragma once
//! \file core/float16.hpp
//! float16: IEEE 754 binary16 (1 sign, 5 exponent, 10 mantissa bits), what Keras'
//! "float16" and "mixed_float16" policies compute in; as bits, and as `kdist::float16`, the scalar
//! type of float16 Views and tensors. `to_float16_bits` rounds a float to the nearest float16,
//! ties to even, with subnormals (down to 2^-24) as IEEE and CUDA's __float2half_rn have them; a
//! NaN stays a NaN (quiet); values from 65520 up (halfway past the largest finite float16, 65504)
//! round to infinity: the overflow a kdist::LossScaleOptimizer guards gradients against.
//! `from_float16_bits` is exact. Both run in host code and in device kernels, on every Kokkos
//! backend (software conversions: Kokkos 3.4, Debian's, has no Kokkos::Experimental::half_t).
//!
//! Relative rounding error of one conversion: at most 2^-11 for every normal value (magnitudes
//! from 2^-14 to 65504); below that, an absolute error of at most 2^-25.

#include <cstdint>
#include <cstring>

#include <kdist/core/bfloat16.hpp>  // KDIST_HOST_DEVICE, KDIST_MEMCPY, is_sixteen_bit_float_v

namespace kdist {

//! The float16 nearest `x` (ties to even), as its 16 bits.
KDIST_HOST_DEVICE inline std::uint16_t to_float16_bits(float x) {
  std::uint32_t u = 0;
  KDIST_MEMCPY(&u, &x, sizeof u);
  const auto sign = static_cast<std::uint16_t>((u >> 16) & 0x8000U);
  const std::uint32_t a = u & 0x7fffffffU;
  if (a > 0x7f800000U) return static_cast<std::uint16_t>(sign | 0x7e00U | ((a >> 13) & 0x3ffU));
  if (a >= 0x477ff000U) return static_cast<std::uint16_t>(sign | 0x7c00U);  // >= 65520: inf
  if (a >= 0x38800000U) {  // a normal float16 (>= 2^-14): rebias the exponent, round the mantissa
    const std::uint32_t rounded = a + 0xfffU + ((a >> 13) & 1U);
    return static_cast<std::uint16_t>(sign | ((rounded - 0x38000000U) >> 13));
  }
  // A subnormal or zero: adding 0.5 puts the 10 mantissa bits at the bottom of a float, and the
  // float addition rounds to nearest, ties to even (F. Giesen's float_to_half_fast3_rtne).
  float f = 0;
  KDIST_MEMCPY(&f, &a, sizeof f);
  f += 0.5F;
  std::uint32_t v = 0;
  KDIST_MEMCPY(&v, &f, sizeof v);
  return static_cast<std::uint16_t>(sign | (v - 0x3f000000U));
}

//! The float whose float16 bits are `bits` (exact).
KDIST_HOST_DEVICE inline float from_float16_bits(std::uint16_t bits) {
  const std::uint32_t sign = static_cast<std::uint32_t>(bits & 0x8000U) << 16;
  const std::uint32_t exponent = (bits >> 10) & 0x1fU;
  const std::uint32_t mantissa = bits & 0x3ffU;
  std::uint32_t u = 0;
  if (exponent == 0x1fU) {
    u = sign | 0x7f800000U | (mantissa << 13);  // inf, NaN
  } else if (exponent != 0) {
    u = sign | ((exponent + 112U) << 23) | (mantissa << 13);
  } else {  // zero or subnormal: mantissa * 2^-24
    const float f = static_cast<float>(mantissa) * 5.9604644775390625e-8F;
    KDIST_MEMCPY(&u, &f, sizeof u);
    u |= sign;
  }
  float x = 0;
  KDIST_MEMCPY(&x, &u, sizeof x);
  return x;
}

//! A float16 value: the scalar type of `Kokkos::View<kdist::float16*>` and
//! `kdist::DistributedTensor<kdist::float16**>` (Keras' "float16" dtype). As kdist::bfloat16:
//! two bytes, moved by MPI as MPI_UINT16_T, explicit conversions both ways, arithmetic in float32,
//! never summed by a collective.
struct float16 {
  std::uint16_t bits = 0;

  float16() = default;
  KDIST_HOST_DEVICE explicit float16(float x) : bits(to_float16_bits(x)) {}
  KDIST_HOST_DEVICE explicit operator float() const { return from_float16_bits(bits); }
  KDIST_HOST_DEVICE explicit operator double() const { return from_float16_bits(bits); }
  //! The value whose bits are `b` (exact).
  KDIST_HOST_DEVICE static float16 from_bits(std::uint16_t b) {
    float16 v;
    v.bits = b;
    return v;
  }
  KDIST_HOST_DEVICE friend bool operator==(float16 a, float16 b) {
    return static_cast<float>(a) == static_cast<float>(b);
  }
};
static_assert(sizeof(float16) == 2, "kdist::float16 is two bytes");

}  // namespace kdist
