#pragma once
//! \file ops/concatenate.hpp
//! Concatenation along the last axis (Keras' `layers.Concatenate(axis=-1)`, a U-Net's skip) and its
//! gradient, on tensors seen as (rows, features) LayoutRight matrices: `out = [a | b]`, and `[da |
//! db] = dout` split back. Where the Views live, the kernels run.

#include <Kokkos_Core.hpp>
#include <cstdint>
#include <string>

#include <kdist/core/error.hpp>
#include <kdist/ops/detail/views.hpp>

namespace kdist::ops {

namespace detail {
template <class AV, class BV, class OV>
void check_concatenation(const char* op, const AV& a, const BV& b, const OV& out) {
  static_assert(check_matrix<AV>() && check_matrix<BV>() && check_matrix<OV>() &&
                check_same_scalar<AV, OV>() && check_same_scalar<BV, OV>());
  if (a.extent(0) != out.extent(0) || b.extent(0) != out.extent(0) ||
      a.extent(1) + b.extent(1) != out.extent(1)) {
    throw ValueError(std::string("kdist::ops::") + op + ": the parts are " + shape_string(a) +
                     " and " + shape_string(b) + " but the whole is " + shape_string(out) +
                     "; expected the parts' rows and the sum of their columns");
  }
}
}  // namespace detail

//! out(r, :) = [a(r, :), b(r, :)].
template <class AV, class BV, class OV>
void concatenate_columns(const AV& a, const BV& b, const OV& out) {
  detail::check_concatenation("concatenate_columns", a, b, out);
  const auto ca = static_cast<std::int64_t>(a.extent(1));
  const auto cols = static_cast<std::int64_t>(out.extent(1));
  Kokkos::parallel_for(
      "kdist::ops::concatenate_columns", detail::range<OV>(out.extent(0) * out.extent(1)),
      KOKKOS_LAMBDA(const std::int64_t i) {
        const std::int64_t r = i / cols, c = i % cols;
        out(r, c) = c < ca ? a(r, c) : b(r, c - ca);
      });
}

//! [a(r, :), b(r, :)] = whole(r, :): the gradient of concatenate_columns.
template <class WV, class AV, class BV>
void split_columns(const WV& whole, const AV& a, const BV& b) {
  detail::check_concatenation("split_columns", a, b, whole);
  const auto ca = static_cast<std::int64_t>(a.extent(1));
  const auto cols = static_cast<std::int64_t>(whole.extent(1));
  Kokkos::parallel_for(
      "kdist::ops::split_columns", detail::range<WV>(whole.extent(0) * whole.extent(1)),
      KOKKOS_LAMBDA(const std::int64_t i) {
        const std::int64_t r = i / cols, c = i % cols;
        if (c < ca) {
          a(r, c) = whole(r, c);
        } else {
          b(r, c - ca) = whole(r, c);
        }
      });
}

}  // namespace kdist::ops
