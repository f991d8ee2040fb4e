#pragma once
// Names Kokkos:: without including Kokkos (layering.rejects_library_not_included must name line 6);
// Eigen::Matrix in a comment is no use of Eigen.
#include <kdist/ops/gemm.hpp>
struct Block {
  Kokkos::View<float*> values;
};
