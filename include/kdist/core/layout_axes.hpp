#pragma once
//! \file core/layout_axes.hpp
//! `kdist::LayoutAxes<Mesh>`: the axes of a layout written in code for a static mesh type,
//! checked at compile time, fmt's consteval format-string pattern applied to layouts. What
//! `LayoutMap<Mesh>` takes in `layout_map["d1/kernel"] = {kdist::replicated, "model"}`:
//! a name that is not an axis of `Mesh`, or a mesh axis used twice, does not compile.
//!
//! The compile error is the call of a consteval constructor that is not a constant expression;
//! compilers show the call with its arguments (the offending name) and the mesh type (its axes),
//! and a note naming the rule: the non-constexpr function
//! `kdist::error::layout_names_an_axis_that_is_not_in_the_mesh()` or
//! `kdist::error::layout_uses_a_mesh_axis_twice()` that the check reached.

#include <array>
#include <cstddef>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include <kdist/core/detail/layout_rules.hpp>
#include <kdist/core/dim_spec.hpp>
#include <kdist/core/mesh.hpp>

namespace kdist {

class DimAxes;  // core/runtime_layout.hpp: the value form of a dimension

namespace error {
// Never defined as constexpr: a consteval check that reaches one fails to compile, and the
// compiler names it in its note. Defined so that nothing else breaks at link time.
inline void layout_names_an_axis_that_is_not_in_the_mesh() {}
inline void layout_uses_a_mesh_axis_twice() {}
inline void layout_dimension_over_dim_spec_limits() {}
inline void layout_has_more_dimensions_than_layout_axes_holds() {}
inline void axis_name_is_not_an_axis_of_the_mesh() {}
}  // namespace error

//! The name of one axis of `Mesh`, written in code and checked at compile time: what
//! `ModelParallel(LayoutMap<Mesh>, batch_dim_name)` takes for its batch axis.
template <class Mesh>
class AxisName {
  static_assert(is_device_mesh_v<Mesh>,
                "kdist::AxisName<Mesh>: Mesh must be a kdist::DeviceMesh<kdist::axis<...>...>");

 public:
  template <std::size_t N>
  consteval AxisName(const char (&name)[N]) : name_(name, N - 1) {  // NOLINT: implicit
    if (!Mesh::find_axis(name_)) error::axis_name_is_not_an_axis_of_the_mesh();
  }
  constexpr std::string_view view() const { return name_; }
  std::string str() const { return std::string(name_); }

 private:
  std::string_view name_;  // a string literal's: lives for the whole program
};

//! One tensor dimension of a layout on `Mesh`: replicated, one axis name, or `kdist::axes<...>`.
//! Converts only in constant expressions, checking every name against `Mesh`'s axes.
template <class Mesh>
class LayoutDim {
  static_assert(is_device_mesh_v<Mesh>,
                "kdist::LayoutDim<Mesh>: Mesh must be a kdist::DeviceMesh<kdist::axis<...>...>");

 public:
  //! `"model"`.
  template <std::size_t N>
  consteval LayoutDim(const char (&name)[N]) : spec_(name) {  // NOLINT: implicit, as in Keras
    check();
  }
  //! `kdist::replicated`, `kdist::axes<"data", "model">`.
  consteval LayoutDim(const DimSpec& spec) : spec_(spec) { check(); }  // NOLINT

  constexpr const DimSpec& spec() const { return spec_; }

 private:
  consteval void check() const {
    if (spec_.overflow) error::layout_dimension_over_dim_spec_limits();
    const auto unknown = detail::first_unknown_axis(
        1, [&](std::size_t) { return spec_.size(); },
        [&](std::size_t, std::size_t k) { return spec_.axis(k); },
        [](std::string_view name) { return Mesh::find_axis(name); });
    if (unknown.found) error::layout_names_an_axis_that_is_not_in_the_mesh();
  }
  DimSpec spec_;
};

//! The axes of a layout on `Mesh`, one LayoutDim per tensor dimension (up to 8), checked at
//! compile time: every name is an axis of `Mesh`, no mesh axis twice.
template <class Mesh>
class LayoutAxes {
 public:
  static constexpr std::size_t max_rank = 8;

  consteval LayoutAxes(std::initializer_list<LayoutDim<Mesh>> dims)  // NOLINT: implicit
      : rank_(dims.size()) {
    if (dims.size() > max_rank) error::layout_has_more_dimensions_than_layout_axes_holds();
    std::size_t d = 0;
    for (const auto& dim : dims) dims_[d++] = dim.spec();
    // The rule of core/detail/layout_rules.hpp, as TensorLayout and RuntimeTensorLayout apply it
    // (each LayoutDim already checked that its names are axes of the mesh).
    const auto reused = detail::first_reused_axis(
        rank_, [&](std::size_t dim) { return dims_[dim].size(); },
        [&](std::size_t dim, std::size_t k) { return dims_[dim].axis(k); },
        [](std::string_view name) { return Mesh::find_axis(name); });
    if (reused.found) error::layout_uses_a_mesh_axis_twice();
  }

  constexpr std::size_t rank() const { return rank_; }
  constexpr const DimSpec& operator[](std::size_t d) const { return dims_[d]; }

  //! As the run-time form (what LayoutMap stores): DimAxes converts from each DimSpec
  //! (core/runtime_layout.hpp, which a caller includes; this header does not depend on it).
  template <class Axes = DimAxes>
  std::vector<Axes> to_runtime() const {
    std::vector<Axes> out;
    for (std::size_t d = 0; d < rank_; ++d) out.emplace_back(dims_[d]);
    return out;
  }

 private:
  std::array<DimSpec, max_rank> dims_{};
  std::size_t rank_ = 0;
};

}  // namespace kdist
