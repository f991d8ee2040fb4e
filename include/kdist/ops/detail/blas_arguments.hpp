#pragma once
//! \file ops/detail/blas_arguments.hpp
//! What every BLAS call of kdist (host CBLAS, cuBLAS) needs from a rank-2 LayoutRight View: its
//! dimensions as BLAS' `int` and its leading dimension (the row stride).

#include <climits>
#include <cstddef>
#include <kdist/core/error.hpp>
#include <string>

namespace kdist::ops::detail {

//! A dimension as BLAS' int; kdist::ValueError when it does not fit.
inline int to_blas_int(std::size_t n, const char* who) {
  if (n > static_cast<std::size_t>(INT_MAX)) {
    throw ValueError(std::string(who) + ": a dimension of " + std::to_string(n) +
                     " is more than BLAS' int allows (" + std::to_string(INT_MAX) +
                     "); split the product");
  }
  return static_cast<int>(n);
}

//! The row stride of a LayoutRight rank-2 View as BLAS' leading dimension: elements of a row are
//! adjacent, rows stride(0) apart (>= the row length). A stride below the row length only
//! happens for an empty or one-row View, where any value >= the row length (and >= 1) is valid.
template <class V>
int leading_dimension(const V& v) {
  const auto row = static_cast<std::size_t>(v.stride(0));
  const std::size_t cols = v.extent(1) > 0 ? v.extent(1) : 1;
  return static_cast<int>(row > cols ? row : cols);
}

}  // namespace kdist::ops::detail
