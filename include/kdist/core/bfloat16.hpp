#pragma once
//! \file core/bfloat16.hpp
//! bfloat16: the upper half of a float32 (1 sign, 8 exponent, 7 mantissa bits), what Keras'
//! "bfloat16" and "mixed_bfloat16" policies store and move; as bits, and as `kdist::bfloat16`,
//! the scalar type of bfloat16 Views and tensors. `to_bfloat16_bits` rounds a
//! float to the nearest bfloat16, ties to even (as PyTorch's c10::BFloat16, JAX's and the bf16
//! instructions of CPUs and GPUs do); a NaN stays a NaN (quiet), values beyond bfloat16's largest
//! finite one (about 3.39e38) round to infinity. `from_bfloat16_bits` is exact. Both run in host
//! code and in device kernels (nvcc, hipcc). Plain bits rather than a Kokkos type: Kokkos 3.4
//! (Debian's) has no `Kokkos::Experimental::bhalf_t`, and the bits are all MPI needs to move:
//! kdist::bfloat16 below works on every Kokkos backend.
//!
//! Relative rounding error of one conversion: at most 2^-8 (half a unit in the last of 8
//! significant bits), for every normal value.

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#if defined(__CUDACC__) || defined(__HIPCC__)
#define KDIST_HOST_DEVICE __host__ __device__
#else
#define KDIST_HOST_DEVICE
#endif
// memcpy for KDIST_HOST_DEVICE functions: hipcc's device side has no ::memcpy unless
// <hip/hip_runtime.h> came first, clang's builtin runs on both sides (nvcc's memcpy does already).
#if defined(__HIPCC__)
#define KDIST_MEMCPY __builtin_memcpy
#else
#define KDIST_MEMCPY memcpy
#endif

namespace kdist {

//! The bfloat16 nearest `x` (ties to even), as its 16 bits.
KDIST_HOST_DEVICE inline std::uint16_t to_bfloat16_bits(float x) {
  std::uint32_t u = 0;
  KDIST_MEMCPY(&u, &x, sizeof u);
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
  KDIST_MEMCPY(&x, &u, sizeof x);
  return x;
}

//! A bfloat16 value: the scalar type of `Kokkos::View<kdist::bfloat16*>` and
//! `kdist::DistributedTensor<kdist::bfloat16**>` (Keras' "bfloat16" dtype). Two bytes, trivially
//! copyable, moved by MPI as MPI_UINT16_T. Conversions are explicit both ways
//! (`kdist::bfloat16(x)` rounds to nearest, ties to even; `static_cast<float>(b)` is exact), so
//! an expression that mixes it with float32 without a cast does not compile; arithmetic is done
//! in float32 (Keras' mixed policies accumulate in float32) and collectives do not sum it (sum
//! float32 values moving bfloat16 with kdist::all_reduce_in_bfloat16). Equality compares values
//! (NaN is unequal to itself, -0 equals +0), as float's does.
struct bfloat16 {
  std::uint16_t bits = 0;

  bfloat16() = default;
  KDIST_HOST_DEVICE explicit bfloat16(float x) : bits(to_bfloat16_bits(x)) {}
  KDIST_HOST_DEVICE explicit operator float() const { return from_bfloat16_bits(bits); }
  KDIST_HOST_DEVICE explicit operator double() const { return from_bfloat16_bits(bits); }
  //! The value whose bits are `b` (exact).
  KDIST_HOST_DEVICE static bfloat16 from_bits(std::uint16_t b) {
    bfloat16 v;
    v.bits = b;
    return v;
  }
  KDIST_HOST_DEVICE friend bool operator==(bfloat16 a, bfloat16 b) {
    return static_cast<float>(a) == static_cast<float>(b);
  }
};
static_assert(sizeof(bfloat16) == 2, "kdist::bfloat16 is two bytes");

//! `out[i]` (i < count) = the float32 sum, in order, of `blocks` runs of `count` bfloat16 values
//! (as bits) lying one after another at `runs`: each value widened exactly, the sum rounded as
//! float32 addition rounds. How a process adds the bfloat16 contributions it received from every
//! process (rank order) of a reduce-scatter moving bfloat16 (host memory).
inline void sum_bfloat16_runs(const std::uint16_t* runs, std::size_t blocks, std::size_t count,
                              float* out) {
  for (std::size_t i = 0; i < count; ++i) out[i] = blocks > 0 ? from_bfloat16_bits(runs[i]) : 0.0F;
  for (std::size_t p = 1; p < blocks; ++p) {
    const std::uint16_t* from = runs + p * count;
    for (std::size_t i = 0; i < count; ++i) out[i] += from_bfloat16_bits(from[i]);
  }
}

struct float16;  // kdist/core/float16.hpp

//! kdist's 16-bit floating-point scalars (kdist::bfloat16, kdist::float16).
template <class T>
inline constexpr bool is_sixteen_bit_float_v =
    std::is_same_v<std::remove_cv_t<T>, bfloat16> || std::is_same_v<std::remove_cv_t<T>, float16>;

//! Whether kdist sums values of type T where they lie (in collectives, pending sums, exchanges):
//! every number but the 16-bit floats, whose sums kdist takes in float32.
template <class T>
inline constexpr bool sums_in_place_v = !is_sixteen_bit_float_v<T>;

}  // namespace kdist
