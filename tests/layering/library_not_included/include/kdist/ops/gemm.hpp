#pragma once
// Includes what it names: allowed.
#include <Eigen/Core>
#include <Kokkos_Core.hpp>
inline void gemm(Kokkos::View<float**> a, Eigen::MatrixXf& b) {
  (void)a, (void)b;
}
