#pragma once
// What the MPI tensor tests share: the world size, smooth matrices given by a function of the
// global index (distribute_tensor's third form), a check that a call throws a kdist::ValueError
// whose message says what it should, and host access to device Views (host_views.hpp).
#include <gtest/gtest.h>
#include <mpi.h>

#include <kdist/core/error.hpp>

#include <cmath>
#include <cstddef>
#include <string>
#include <vector>

#include "host_views.hpp"

namespace kdist_test {

using kdist::test::edit_on_host;
using kdist::test::host_copy;
using kdist::test::local_on_host;
using kdist::test::to_default_space;

inline std::size_t world() {
  int s = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &s);
  return static_cast<std::size_t>(s);
}

// Three matrices with distinct, non-trivial values at every (i, j).
inline double matrix_a(std::size_t i, std::size_t j) {
  return std::sin(double(i * 7 + j)) + 0.1 * double(j);
}
inline double matrix_b(std::size_t i, std::size_t j) {
  return std::cos(double(i * 3 + j * 5));
}
inline double matrix_c(std::size_t i, std::size_t j) {
  return 0.01 * double(i) - 0.02 * double(j);
}

// Runs `f`, which must throw a kdist::ValueError containing every one of `parts`.
template <class F>
void expect_value_error(F&& f, const std::vector<std::string>& parts) {
  try {
    f();
    ADD_FAILURE() << "no error";
  } catch (const kdist::ValueError& e) {
    for (const auto& p : parts) {
      EXPECT_NE(std::string(e.what()).find(p), std::string::npos)
          << "message: " << e.what() << "\nexpected to contain: " << p;
    }
  }
}

}  // namespace kdist_test
