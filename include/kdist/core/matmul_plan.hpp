#pragma once
//! \file core/matmul_plan.hpp
//! `kdist::plan_matmul`: the parallelism rule of `kdist::matmul(A, B)`, written once. From the
//! mesh axes of op(A)'s rows and contraction and op(B)'s contraction and columns, it says what
//! the product moves before its local product, and the result's layout and pending sum (Megatron's
//! column / row parallelism, as PyTorch DTensor derives it from placements):
//!   B's columns share a mesh axis with A's rows      B's columns are gathered (replicated) first
//!   contraction sharded alike in A and B              local product, result a pending sum over
//!                                                     those axes (row-parallel)
//!   contraction sharded in one operand only           the other is sliced locally to its block,
//!                                                     result a pending sum over those axes
//!   contraction sharded incompatibly (other axes, or  gathered (replicated) in both operands first
//!   axes the result's rows or columns use)
//!   contraction replicated in both                    local product (column-parallel when B's
//!                                                     columns are sharded)
//! One constexpr function over either form of a dimension's axes (CuTe's one algebra for static and
//! run-time values): `kdist::DimSpec` for typed tensors, where it runs at compile time and gives
//! the result's type, and `kdist::DimAxes` for run-time tensors, where the run-time matmul does
//! what it says. std only: no MPI, no Kokkos.
//!
//! \code
//! auto plan = kdist::plan_matmul(kdist::DimAxes("data"), kdist::DimAxes("model"),
//!                                kdist::DimAxes("model"), kdist::DimAxes());
//! plan.to_string();  // "local product -> ('data', None), pending sum over ['model']"
//! \endcode

#include <concepts>
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include <kdist/core/detail/python_repr.hpp>
#include <kdist/core/dim_spec.hpp>
#include <kdist/core/runtime_layout.hpp>

namespace kdist {

namespace detail {
// The mesh axes of one dimension, read alike from its static and its run-time form.
constexpr std::size_t axis_count(const DimSpec& d) {
  return d.size();
}
constexpr std::string_view axis_name(const DimSpec& d, std::size_t i) {
  return d.axis(i);
}
inline std::size_t axis_count(const DimAxes& d) {
  return d.size();
}
inline std::string_view axis_name(const DimAxes& d, std::size_t i) {
  return d.names()[i];
}
}  // namespace detail

//! The mesh axes one tensor dimension is sharded over, in a form the plans read:
//! `kdist::DimSpec` (a static layout's, constexpr) or `kdist::DimAxes` (a run-time layout's).
//! A value-initialised one is replicated.
template <class D>
concept DimAxesForm = std::copyable<D> && std::default_initializable<D> &&
    requires(const D& d, std::size_t i) {
  { detail::axis_count(d) } -> std::convertible_to<std::size_t>;
  { detail::axis_name(d, i) } -> std::convertible_to<std::string_view>;
};

namespace detail {
//! Whether two dimensions share a mesh axis.
template <DimAxesForm D>
constexpr bool share_an_axis(const D& a, const D& b) {
  for (std::size_t i = 0; i < axis_count(a); ++i) {
    for (std::size_t j = 0; j < axis_count(b); ++j) {
      if (axis_name(a, i) == axis_name(b, j)) return true;
    }
  }
  return false;
}
//! Whether two dimensions are sharded over the same mesh axes in the same order.
template <DimAxesForm D>
constexpr bool same_axes(const D& a, const D& b) {
  if (axis_count(a) != axis_count(b)) return false;
  for (std::size_t i = 0; i < axis_count(a); ++i) {
    if (axis_name(a, i) != axis_name(b, i)) return false;
  }
  return true;
}
}  // namespace detail

//! Which operand the product slices locally to the other's contraction block (the contraction is
//! sharded in one operand only).
enum class MatmulSlice {
  none,  //!< no slicing
  a,     //!< A's contraction is cut to B's block
  b,     //!< B's contraction is cut to A's block
};

//! What `kdist::matmul` does with its operands' layouts: the redistributions before the local
//! product (each to the operand's layout with that dimension replicated), the slicing, and the
//! result's layout (rows, cols) and pending sum. `Dim` is `kdist::DimSpec` or `kdist::DimAxes`.
template <DimAxesForm Dim>
struct MatmulPlan {
  Dim rows{};     //!< the result's rows: op(A)'s row axes
  Dim cols{};     //!< the result's columns: op(B)'s column axes, or replicated when gathered
  Dim pending{};  //!< the mesh axes the result's sum is pending over (replicated: complete)
  bool gather_b_cols = false;         //!< B's columns are redistributed to replicated first
  bool gather_a_contraction = false;  //!< A's contraction is redistributed to replicated first
  bool gather_b_contraction = false;  //!< B's contraction is redistributed to replicated first
  MatmulSlice slice = MatmulSlice::none;

  //! Whether the result is a pending sum (a row-parallel product).
  constexpr bool is_partial() const { return detail::axis_count(pending) != 0; }

  //! What happens, in order: "gather B's columns; local product -> ('data', None), pending sum
  //! over ['model']".
  std::string to_string() const {
    std::vector<std::string> steps;
    if (gather_b_cols) steps.emplace_back("gather B's columns (A's rows use their mesh axes)");
    if (gather_a_contraction) steps.emplace_back("gather A's contraction");
    if (gather_b_contraction) steps.emplace_back("gather B's contraction");
    if (slice == MatmulSlice::a) steps.emplace_back("slice A's contraction to B's block");
    if (slice == MatmulSlice::b) steps.emplace_back("slice B's contraction to A's block");
    const std::vector<std::string> dims{repr(rows), repr(cols)};
    std::string product = "local product -> " + detail::py_tuple(dims);
    if (is_partial()) {
      std::vector<std::string> names;
      for (std::size_t i = 0; i < detail::axis_count(pending); ++i) {
        names.emplace_back(detail::axis_name(pending, i));
      }
      product += ", pending sum over " + detail::join_quoted(names);
    }
    steps.push_back(std::move(product));
    std::string out;
    for (std::size_t i = 0; i < steps.size(); ++i) out += (i ? "; " : "") + steps[i];
    return out;
  }

 private:
  static std::string repr(const Dim& d) { return DimAxes(d).repr(); }
};

//! The plan of op(A) op(B) from the mesh axes of op(A)'s rows (`a_rows`) and contraction
//! (`a_contraction`) and op(B)'s contraction (`b_contraction`) and columns (`b_cols`): the rule
//! in this file's header, in that order (B's columns first, then the contraction, judged against
//! the columns that remain). constexpr for `kdist::DimSpec`.
template <DimAxesForm Dim>
constexpr MatmulPlan<Dim> plan_matmul(const Dim& a_rows, const Dim& a_contraction,
                                      const Dim& b_contraction, const Dim& b_cols) {
  MatmulPlan<Dim> plan;
  plan.rows = a_rows;
  // Output dimensions may not share mesh axes with each other or with the pending sum.
  plan.gather_b_cols = detail::share_an_axis(a_rows, b_cols);
  if (!plan.gather_b_cols) plan.cols = b_cols;
  const bool a_sharded = detail::axis_count(a_contraction) != 0;
  const bool b_sharded = detail::axis_count(b_contraction) != 0;
  const Dim& k = a_sharded ? a_contraction : b_contraction;
  if ((a_sharded && b_sharded && !detail::same_axes(a_contraction, b_contraction)) ||
      detail::share_an_axis(k, plan.rows) || detail::share_an_axis(k, plan.cols)) {
    // Contraction sharded incompatibly: replicate it in both operands; the product is complete.
    plan.gather_a_contraction = a_sharded;
    plan.gather_b_contraction = b_sharded;
    return plan;
  }
  plan.pending = k;
  if (a_sharded != b_sharded) plan.slice = a_sharded ? MatmulSlice::b : MatmulSlice::a;
  return plan;
}

}  // namespace kdist
