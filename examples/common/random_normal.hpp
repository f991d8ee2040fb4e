#pragma once
//! \file common/random_normal.hpp
//! `np.random.normal(size=n)` for the examples and tests: float32 samples of N(0, 1) from one
//! seeded generator, the same on every process.

#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

namespace kdist::examples {

inline std::vector<float> random_normal(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::normal_distribution<float> d;
  std::vector<float> v(n);
  for (auto& x : v) x = d(gen);
  return v;
}

}  // namespace kdist::examples
