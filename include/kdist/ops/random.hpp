#pragma once
//! \file ops/random.hpp
//! Counter-based random numbers (Random123's Philox4x32-10) keyed by (seed, stream, step, global
//! element index) and never by rank, so a weight initialised or a dropout mask drawn on any mesh
//! is bit-identical to the one drawn for the full tensor on one device.
//!
//! The keying convention (the contract a distributed implementation must follow; docs/ops.md):
//!
//!  - `stream` names what is drawn: `stream_id("d1/kernel")` = FNV-1a 64 of the variable path's
//!    bytes for an initialiser, `stream_id("dropout")` (the layer's name) for a dropout mask.
//!  - `random_key(seed, stream, step)`: the Philox key is the first two words of
//!    `philox4x32_10(ctr = {lo32(stream), hi32(stream), 0, 0}, key = {lo32(seed), hi32(seed)})`;
//!    the step is kept beside it.
//!  - element `index` (the row-major flat index in the GLOBAL tensor) draws the four words
//!    `philox4x32_10(ctr = {lo32(index), hi32(index), lo32(step), hi32(step)}, key)`.
//!  - `uniform01` = `(word0 >> 8) * 2^-24` (a float in [0, 1), every value exact);
//!    `normal` = Box-Muller on word0, word1 (cosine branch);
//!    `glorot_uniform` = Keras' `-limit + 2 * limit * uniform01` with step 0;
//!    `dropout_keep` = `dropout_uniform < 1 - rate`, where `dropout_uniform(key, index)` draws all
//!    four words of each Philox evaluation: global element `index` uses word
//!    `dropout_word(index) = (index / 16) % 4` of counter
//!    `dropout_counter(index) = (index / 64) * 16 + index % 16` (64 consecutive elements share 16
//!    counters: element `64 g + 16 w + l` is word w of counter `16 g + l`), then
//!    `(word >> 8) * 2^-24`. `dropout_keep_lanes` evaluates 16 counters at once in a loop the
//!    host compiler vectorises; kdist::ops::dropout uses it on the host.
//!
//! Everything here is `KOKKOS_INLINE_FUNCTION` (or constexpr) and stateless: call it inside any
//! Kokkos kernel.

#include <Kokkos_Core.hpp>
#include <cstdint>
#include <string_view>

// Random123 marks its functions R123_CUDA_DEVICE; under nvcc/hipcc it defaults to __device__ only,
// which a KOKKOS_INLINE_FUNCTION (host and device) could not call on the host.
#if (defined(__CUDACC__) || defined(__HIPCC__)) && !defined(R123_CUDA_DEVICE)
#define R123_CUDA_DEVICE __host__ __device__
#endif
// Philox needs no SSE; without it Random123 does not pull in <x86intrin.h> (every x86 intrinsic,
// 0.85 s of each compile: docs/benchmarks.md). A program that includes Random123 first keeps its
// own settings.
#if !defined(R123_USE_SSE)
#define R123_USE_SSE 0
#endif
#if !defined(R123_USE_X86INTRIN_H)
#define R123_USE_X86INTRIN_H 0
#endif
#include <Random123/philox.h>

#include <kdist/ops/detail/kokkos_math.hpp>

namespace kdist {

//! FNV-1a, 64 bits, of the bytes of `text`. Stable across platforms, runs and compilers.
//! Example: `static_assert(kdist::fnv1a_64("") == 0xcbf29ce484222325ull);`
constexpr std::uint64_t fnv1a_64(std::string_view text) noexcept {
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (char c : text) {
    h ^= static_cast<std::uint8_t>(c);
    h *= 0x100000001b3ull;
  }
  return h;
}

//! The random stream of a variable path or layer name: `stream_id("d1/kernel")`. FNV-1a 64.
constexpr std::uint64_t stream_id(std::string_view path) noexcept {
  return fnv1a_64(path);
}

//! A Philox key derived from (seed, stream), and the step it draws for. Cheap to copy; build it
//! once outside a kernel with `random_key` and draw elements from it inside.
struct RandomKey {
  std::uint32_t k0 = 0;    //!< first Philox key word
  std::uint32_t k1 = 0;    //!< second Philox key word
  std::uint64_t step = 0;  //!< training step (0 for initialisers)
};

//! Four independent 32-bit random words.
struct RandomBits {
  std::uint32_t word[4];
};

namespace detail {
KOKKOS_INLINE_FUNCTION std::uint32_t lo32(std::uint64_t x) {
  return static_cast<std::uint32_t>(x);
}
KOKKOS_INLINE_FUNCTION std::uint32_t hi32(std::uint64_t x) {
  return static_cast<std::uint32_t>(x >> 32);
}
}  // namespace detail

//! The key of (seed, stream) at `step`: Philox4x32-10 of counter {lo(stream), hi(stream), 0, 0}
//! under key {lo(seed), hi(seed)}, first two words.
KOKKOS_INLINE_FUNCTION RandomKey random_key(std::uint64_t seed, std::uint64_t stream,
                                            std::uint64_t step = 0) {
  philox4x32_ctr_t ctr = {{detail::lo32(stream), detail::hi32(stream), 0u, 0u}};
  philox4x32_key_t key = {{detail::lo32(seed), detail::hi32(seed)}};
  const philox4x32_ctr_t r = philox4x32_R(10, ctr, key);
  RandomKey k;
  k.k0 = r.v[0];
  k.k1 = r.v[1];
  k.step = step;
  return k;
}

//! The four random words of global element `index` under `key`: Philox4x32-10 of counter
//! {lo(index), hi(index), lo(step), hi(step)}.
KOKKOS_INLINE_FUNCTION RandomBits random_bits(const RandomKey& key, std::uint64_t index) {
  philox4x32_ctr_t ctr = {
      {detail::lo32(index), detail::hi32(index), detail::lo32(key.step), detail::hi32(key.step)}};
  philox4x32_key_t k = {{key.k0, key.k1}};
  const philox4x32_ctr_t r = philox4x32_R(10, ctr, k);
  RandomBits b;
  for (int i = 0; i < 4; ++i) b.word[i] = r.v[i];
  return b;
}

//! A float uniform in [0, 1) for element `index`: the top 24 bits of word 0 times 2^-24.
KOKKOS_INLINE_FUNCTION float uniform01(const RandomKey& key, std::uint64_t index) {
  return static_cast<float>(random_bits(key, index).word[0] >> 8) * 0x1p-24f;
}

//! A standard normal float for element `index` (Box-Muller on words 0 and 1, in double, cosine
//! branch: u1 = (word0 + 1) 2^-32 in (0, 1], u2 = word1 2^-32). Do not draw `normal` and
//! `uniform01` from the same key: they share word 0.
KOKKOS_INLINE_FUNCTION float normal(const RandomKey& key, std::uint64_t index) {
  const RandomBits b = random_bits(key, index);
  const double u1 = (static_cast<double>(b.word[0]) + 1.0) * 0x1p-32;
  const double u2 = static_cast<double>(b.word[1]) * 0x1p-32;
  constexpr double two_pi = 6.283185307179586476925286766559;
  return static_cast<float>(detail::kmath::sqrt(-2.0 * detail::kmath::log(u1)) *
                            detail::kmath::cos(two_pi * u2));
}

//! Keras' glorot_uniform limit, `sqrt(3 / max(1, (fan_in + fan_out) / 2))`
//! (= `sqrt(6 / (fan_in + fan_out))` for any real layer).
KOKKOS_INLINE_FUNCTION double glorot_limit(std::uint64_t fan_in, std::uint64_t fan_out) {
  double avg = (static_cast<double>(fan_in) + static_cast<double>(fan_out)) / 2.0;
  if (avg < 1.0) avg = 1.0;
  return detail::kmath::sqrt(3.0 / avg);
}

//! Element `index` (row-major flat index in the global kernel) of a glorot_uniform tensor drawn
//! from `key` (step 0): `-limit + 2 * limit * uniform01(key, index)`, in [-limit, limit].
KOKKOS_INLINE_FUNCTION float glorot_uniform(const RandomKey& key, std::uint64_t fan_in,
                                            std::uint64_t fan_out, std::uint64_t index) {
  const double limit = glorot_limit(fan_in, fan_out);
  return static_cast<float>(-limit + 2.0 * limit * static_cast<double>(uniform01(key, index)));
}

//! Element `global_flat_index` of the glorot_uniform initialiser of stream `stream` (for example
//! `stream_id("d1/kernel")`) under `seed`. A Dense kernel [fan_in, fan_out] uses
//! `index = row * fan_out + col`.
//! Example: `float w = kdist::glorot_uniform(1337, kdist::stream_id("d1/kernel"), 784, 200, 0);`
KOKKOS_INLINE_FUNCTION float glorot_uniform(std::uint64_t seed, std::uint64_t stream,
                                            std::uint64_t fan_in, std::uint64_t fan_out,
                                            std::uint64_t global_flat_index) {
  return glorot_uniform(random_key(seed, stream, 0), fan_in, fan_out, global_flat_index);
}

//! Dropout's Philox counter of global element `index`: `(index / 64) * 16 + index % 16`.
KOKKOS_INLINE_FUNCTION std::uint64_t dropout_counter(std::uint64_t index) {
  return ((index >> 6) << 4) | (index & 15u);
}

//! Which of the four words of `dropout_counter(index)` element `index` uses: `(index / 16) % 4`.
KOKKOS_INLINE_FUNCTION int dropout_word(std::uint64_t index) {
  return static_cast<int>((index >> 4) & 3u);
}

//! Dropout's uniform float in [0, 1) for element `index`: `(word >> 8) * 2^-24` of word
//! `dropout_word(index)` of `random_bits(key, dropout_counter(index))` (the scalar reference of
//! the vectorised `dropout_keep_lanes`).
KOKKOS_INLINE_FUNCTION float dropout_uniform(const RandomKey& key, std::uint64_t index) {
  return static_cast<float>(random_bits(key, dropout_counter(index)).word[dropout_word(index)] >>
                            8) *
         0x1p-24f;
}

//! The integer form of `u < 1 - rate` for `u = m * 2^-24`: element kept iff `m < threshold`, with
//! `threshold = ceil((1 - rate) * 2^24)` (exact: the product is a float times a power of two).
KOKKOS_INLINE_FUNCTION std::uint32_t dropout_threshold(float rate) {
  const float scaled = (1.0f - rate) * 0x1p24f;
  auto t = static_cast<std::uint32_t>(scaled);
  if (static_cast<float>(t) < scaled) ++t;
  return t;
}

//! Whether dropout keeps element `index` under `key`: `dropout_uniform(key, index) < 1 - rate`.
KOKKOS_INLINE_FUNCTION bool dropout_keep(const RandomKey& key, std::uint64_t index, float rate) {
  return dropout_uniform(key, index) < 1.0f - rate;
}

//! Philox4x32-10 of the 16 counters `counter0 + l` (l < 16), each {lo32, hi32, lo32(step),
//! hi32(step)} under `key`, structure of arrays: `words[16 w + l]` is word w of counter
//! `counter0 + l`. Written as plain loops over the 16 lanes so that the host compiler vectorises
//! them (32x32->64 multiplies); equal to `random_bits(key, counter0 + l).word[w]`.
KOKKOS_INLINE_FUNCTION void philox_lanes(const RandomKey& key, std::uint64_t counter0,
                                         std::uint32_t* words) {
  constexpr int L = 16;
  std::uint32_t* x0 = words;
  std::uint32_t* x1 = words + L;
  std::uint32_t* x2 = words + 2 * L;
  std::uint32_t* x3 = words + 3 * L;
  const std::uint32_t s0 = detail::lo32(key.step), s1 = detail::hi32(key.step);
  for (int l = 0; l < L; ++l) {
    const std::uint64_t c = counter0 + static_cast<std::uint64_t>(l);
    x0[l] = detail::lo32(c);
    x1[l] = detail::hi32(c);
    x2[l] = s0;
    x3[l] = s1;
  }
  std::uint32_t k0 = key.k0, k1 = key.k1;
  for (int r = 0; r < 10; ++r) {
    for (int l = 0; l < L; ++l) {
      const std::uint64_t p0 = static_cast<std::uint64_t>(0xD2511F53u) * x0[l];
      const std::uint64_t p1 = static_cast<std::uint64_t>(0xCD9E8D57u) * x2[l];
      const std::uint32_t y0 = static_cast<std::uint32_t>(p1 >> 32) ^ x1[l] ^ k0;
      const std::uint32_t y2 = static_cast<std::uint32_t>(p0 >> 32) ^ x3[l] ^ k1;
      x1[l] = static_cast<std::uint32_t>(p1);
      x3[l] = static_cast<std::uint32_t>(p0);
      x0[l] = y0;
      x2[l] = y2;
    }
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
}

//! The keep decisions of the 64 elements of dropout group `group` (global elements
//! `64 group .. 64 group + 63`): `keep[r] = dropout_keep(key, 64 group + r, rate)` with
//! `threshold = dropout_threshold(rate)`. One `philox_lanes` call, all four words used.
KOKKOS_INLINE_FUNCTION void dropout_keep_lanes(const RandomKey& key, std::uint64_t group,
                                               std::uint32_t threshold, std::uint8_t* keep) {
  std::uint32_t words[64];
  philox_lanes(key, group << 4, words);
  for (int r = 0; r < 64; ++r) keep[r] = static_cast<std::uint8_t>((words[r] >> 8) < threshold);
}

//! Whether dropout at training step `step` keeps element `global_flat_index` (row-major in the
//! global activation [global batch, features]) of stream `stream` (the layer's name hashed).
//! Keep probability 1 - rate.
KOKKOS_INLINE_FUNCTION bool dropout_keep(std::uint64_t seed, std::uint64_t stream,
                                         std::uint64_t step, std::uint64_t global_flat_index,
                                         float rate) {
  return dropout_keep(random_key(seed, stream, step), global_flat_index, rate);
}

}  // namespace kdist
