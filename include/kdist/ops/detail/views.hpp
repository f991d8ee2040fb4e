#pragma once
//! \file ops/detail/views.hpp
//! Compile-time checks on the Views the local kernels take, shape strings for error messages,
//! Eigen maps over host Views, and the Kokkos policies of the fallback kernels.

#include <Eigen/Core>
#include <Kokkos_Core.hpp>
#include <cstdint>
#include <kdist/core/error.hpp>
#include <string>
#include <type_traits>

namespace kdist::ops::detail {

template <class V>
using scalar_t = std::remove_const_t<typename V::value_type>;

//! Checks (at compile time) that `V` is a rank-2 LayoutRight View of float or double.
template <class V>
constexpr bool check_matrix() {
  static_assert(Kokkos::is_view<V>::value, "kdist::ops: expected a Kokkos::View");
  static_assert(static_cast<int>(V::rank) == 2, "kdist::ops: expected a rank-2 View [rows, cols]");
  static_assert(std::is_same_v<typename V::array_layout, Kokkos::LayoutRight>,
                "kdist::ops: expected a Kokkos::LayoutRight View (row-major, as Keras stores "
                "tensors)");
  static_assert(std::is_same_v<scalar_t<V>, float> || std::is_same_v<scalar_t<V>, double>,
                "kdist::ops: expected a View of float or double");
  return true;
}

//! Checks that `V` is a rank-1 contiguous View of float or double (a bias).
template <class V>
constexpr bool check_vector() {
  static_assert(Kokkos::is_view<V>::value, "kdist::ops: expected a Kokkos::View");
  static_assert(static_cast<int>(V::rank) == 1, "kdist::ops: expected a rank-1 View [cols]");
  static_assert(std::is_same_v<typename V::array_layout, Kokkos::LayoutRight> ||
                    std::is_same_v<typename V::array_layout, Kokkos::LayoutLeft>,
                "kdist::ops: expected a contiguous (LayoutRight or LayoutLeft) rank-1 View");
  static_assert(std::is_same_v<scalar_t<V>, float> || std::is_same_v<scalar_t<V>, double>,
                "kdist::ops: expected a View of float or double");
  return true;
}

//! Checks that `V` is a rank-1 View of integers (class labels).
template <class V>
constexpr bool check_labels() {
  static_assert(Kokkos::is_view<V>::value, "kdist::ops: expected a Kokkos::View of labels");
  static_assert(static_cast<int>(V::rank) == 1, "kdist::ops: labels must be a rank-1 View [rows]");
  static_assert(std::is_integral_v<scalar_t<V>>, "kdist::ops: labels must be integers");
  return true;
}

//! Checks that views `A` and `B` hold the same scalar type.
template <class A, class B>
constexpr bool check_same_scalar() {
  static_assert(std::is_same_v<scalar_t<A>, scalar_t<B>>,
                "kdist::ops: all floating-point Views of one call must have the same scalar type");
  return true;
}

//! "128x784" for a rank-2 View, "10" for a rank-1 View.
template <class V>
std::string shape_string(const V& v) {
  std::string s = std::to_string(v.extent(0));
  for (int r = 1; r < static_cast<int>(V::rank); ++r) {
    s += 'x';
    s += std::to_string(v.extent(static_cast<unsigned>(r)));
  }
  return s;
}

//! Throws kdist::ValueError "kdist::ops::<op>: <what> is <shape>, expected <expected>".
template <class V>
void require_shape(const char* op, const char* what, const V& v, std::size_t rows,
                   std::size_t cols) {
  if (v.extent(0) != rows || v.extent(1) != cols) {
    throw ValueError(std::string("kdist::ops::") + op + ": " + what + " is " + shape_string(v) +
                     ", expected " + std::to_string(rows) + "x" + std::to_string(cols));
  }
}

template <class V>
void require_length(const char* op, const char* what, const V& v, std::size_t n) {
  if (v.extent(0) != n) {
    throw ValueError(std::string("kdist::ops::") + op + ": " + what + " has " +
                     std::to_string(v.extent(0)) + " elements, expected " + std::to_string(n));
  }
}

// ---- Eigen maps over host Views ----------------------------------------------------------------

//! Eigen reads a View's memory from the host: device memory (CudaSpace, HIPSpace) is a compile
//! error here, never a crash at run time.
template <class V>
constexpr bool check_host_accessible() {
  static_assert(Kokkos::SpaceAccessibility<Kokkos::HostSpace, typename V::memory_space>::accessible,
                "kdist::ops: an Eigen map of a View in memory the host cannot read (device "
                "memory); use the View's own execution space (backend::automatic) or copy it to a "
                "host mirror first (Kokkos::create_mirror_view_and_copy)");
  return true;
}

template <class T>
using RowMajorMatrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <class T>
using RowVector = Eigen::Matrix<T, 1, Eigen::Dynamic, Eigen::RowMajor>;

//! A row-major Eigen::Map over a rank-2 LayoutRight host View (const View -> const Map), with the
//! View's row stride (a padded View maps correctly).
template <class V>
auto eigen_map(const V& v) {
  static_assert(check_host_accessible<V>());
  using T = typename V::value_type;
  using M = RowMajorMatrix<std::remove_const_t<T>>;
  using Target = std::conditional_t<std::is_const_v<T>, const M, M>;
  const auto rows = static_cast<Eigen::Index>(v.extent(0));
  const auto cols = static_cast<Eigen::Index>(v.extent(1));
  auto stride = static_cast<Eigen::Index>(v.stride(0));
  if (stride < cols) stride = cols;
  return Eigen::Map<Target, Eigen::Unaligned, Eigen::OuterStride<>>(v.data(), rows, cols,
                                                                    Eigen::OuterStride<>(stride));
}

//! A row-major Eigen::Map without stride over a rank-2 View whose rows are contiguous
//! (precondition: `is_packed(v)`); lets Eigen pick its unit-stride kernels.
template <class V>
auto eigen_map_packed(const V& v) {
  static_assert(check_host_accessible<V>());
  using T = typename V::value_type;
  using M = RowMajorMatrix<std::remove_const_t<T>>;
  using Target = std::conditional_t<std::is_const_v<T>, const M, M>;
  return Eigen::Map<Target>(v.data(), static_cast<Eigen::Index>(v.extent(0)),
                            static_cast<Eigen::Index>(v.extent(1)));
}

//! Whether the rows of a rank-2 View follow each other without padding.
template <class V>
bool is_packed(const V& v) {
  return v.extent(0) <= 1 || static_cast<std::size_t>(v.stride(0)) == v.extent(1);
}

//! A row-vector Eigen::Map over a contiguous rank-1 host View.
template <class V>
auto eigen_row(const V& v) {
  static_assert(check_host_accessible<V>());
  using T = typename V::value_type;
  using M = RowVector<std::remove_const_t<T>>;
  using Target = std::conditional_t<std::is_const_v<T>, const M, M>;
  return Eigen::Map<Target>(v.data(), static_cast<Eigen::Index>(v.extent(0)));
}

// ---- Kokkos policies ----------------------------------------------------------------------------

template <class V>
using exec_t = typename V::execution_space;

template <class V>
auto range(std::size_t n) {
  return Kokkos::RangePolicy<exec_t<V>, Kokkos::IndexType<std::int64_t>>(
      0, static_cast<std::int64_t>(n));
}

template <class V>
auto md_range(std::size_t rows, std::size_t cols) {
  using Policy = Kokkos::MDRangePolicy<exec_t<V>, Kokkos::Rank<2>, Kokkos::IndexType<std::int64_t>>;
  using P = typename Policy::point_type;
  P lower;
  P upper;
  lower[0] = 0;
  lower[1] = 0;
  upper[0] = static_cast<std::int64_t>(rows);
  upper[1] = static_cast<std::int64_t>(cols);
  return Policy(lower, upper);
}

}  // namespace kdist::ops::detail
