#pragma once
// What the tests of spatially sharded layers share (issue 38): random values, a tensor's values as
// process 0 sees them, a closeness check, and the meshes that split the world's processes over a
// batch axis and the spatial axes.
#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <random>
#include <string>
#include <vector>

#include <kdist/tensor/distribute_tensor.hpp>

#include "mpi/mpi_test_util.hpp"

namespace kdist::test {

//! n values from N(0, 1), the same on every process for a seed.
inline std::vector<double> normal_values(std::size_t n, unsigned seed) {
  std::mt19937_64 gen(seed);
  std::normal_distribution<double> d(0.0, 1.0);
  std::vector<double> out(n);
  for (auto& v : out) v = d(gen);
  return out;
}

//! Every value of a distributed tensor, in row-major order.
template <class Tensor>
std::vector<double> all_values(const Tensor& t) {
  auto h = kdist::full_tensor(t);
  return std::vector<double>(h.data(), h.data() + h.size());
}

//! got == want within `tol` relative (1 + |want|), naming the first index that is not.
inline void expect_close(const std::vector<double>& got, const std::vector<double>& want,
                         const std::string& what, double tol = 1e-12) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (std::size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], tol * (1 + std::abs(want[i]))) << what << " at " << i;
  }
}

//! Every split of the world's processes over `axes` axes (the first a batch axis, the others
//! spatial): the shapes whose product is the world's size; with `batch_axis_at_most`, those whose
//! first extent is at most that.
inline std::vector<std::vector<std::size_t>> process_splits(std::size_t axes,
                                                            std::size_t batch_axis_at_most = 0) {
  const auto n = static_cast<std::size_t>(world_size());
  std::vector<std::vector<std::size_t>> out;
  std::vector<std::size_t> shape(axes, 1);
  auto fill = [&](auto& self, std::size_t d, std::size_t left) -> void {
    if (d + 1 == axes) {
      shape[d] = left;
      if (batch_axis_at_most == 0 || shape[0] <= batch_axis_at_most) out.push_back(shape);
      return;
    }
    for (std::size_t e = 1; e <= left; ++e) {
      if (left % e != 0) continue;
      shape[d] = e;
      self(self, d + 1, left / e);
    }
  };
  fill(fill, 0, n);
  return out;
}

inline std::string mesh_name(const std::vector<std::size_t>& s) {
  std::string out = "mesh (";
  for (std::size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + ")";
}

}  // namespace kdist::test
