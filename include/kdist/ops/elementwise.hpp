#pragma once
//! \file ops/elementwise.hpp
//! Elementwise kernels on whole contiguous Views of any rank, seen as their elements in memory
//! order: `add` (a residual connection, Keras' `layers.Add`). Where the Views live, the kernel
//! runs (a Kokkos RangePolicy in the Views' execution space).

#include <Kokkos_Core.hpp>
#include <cstddef>
#include <cstdint>
#include <kdist/core/error.hpp>
#include <string>
#include <type_traits>

namespace kdist::ops {

namespace detail {
template <class V>
void require_packed(const char* op, const char* what, const V& v) {
  if (!v.span_is_contiguous()) {
    throw ValueError(std::string("kdist::ops::") + op + ": " + what +
                     " is not contiguous; elementwise kernels take whole (packed) Views");
  }
}
}  // namespace detail

//! `out = a + b`, elementwise; `out` may be `a` or `b` (in place). The three Views have the same
//! extents (and rank), any LayoutRight data of float or double in one memory space.
//! Errors: kdist::ValueError for extents that differ (naming both) or non-contiguous Views.
template <class AV, class BV, class OV>
void add(const AV& a, const BV& b, const OV& out) {
  static_assert(
      Kokkos::is_view<AV>::value && Kokkos::is_view<BV>::value && Kokkos::is_view<OV>::value,
      "kdist::ops::add: expected Kokkos::Views");
  static_assert(static_cast<int>(AV::rank) == static_cast<int>(BV::rank) &&
                    static_cast<int>(AV::rank) == static_cast<int>(OV::rank),
                "kdist::ops::add: the three Views must have one rank");
  static_assert(!std::is_const_v<typename OV::value_type>,
                "kdist::ops::add: the output View must not be const");
  for (std::size_t d = 0; d < static_cast<std::size_t>(AV::rank); ++d) {
    if (a.extent(d) != b.extent(d) || a.extent(d) != out.extent(d)) {
      throw ValueError("kdist::ops::add: extent " + std::to_string(d) +
                       " differs: " + std::to_string(a.extent(d)) + ", " +
                       std::to_string(b.extent(d)) + " and " + std::to_string(out.extent(d)) +
                       " (a residual connection adds tensors of one shape and layout)");
    }
  }
  detail::require_packed("add", "a", a);
  detail::require_packed("add", "b", b);
  detail::require_packed("add", "out", out);
  using Exec = typename OV::execution_space;
  const auto* pa = a.data();
  const auto* pb = b.data();
  auto* po = out.data();
  Kokkos::parallel_for(
      "kdist::ops::add",
      Kokkos::RangePolicy<Exec, Kokkos::IndexType<std::int64_t>>(
          0, static_cast<std::int64_t>(out.size())),
      KOKKOS_LAMBDA(const std::int64_t i) { po[i] = pa[i] + pb[i]; });
}

}  // namespace kdist::ops
