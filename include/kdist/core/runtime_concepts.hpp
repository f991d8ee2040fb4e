#pragma once
//! \file core/runtime_concepts.hpp
//! The concepts of kdist's public signatures about the run-time value forms, RuntimeDeviceMesh
//! and RuntimeTensorLayout: what converts to them, and rules given as them. (A header of the value
//! forms' own, as the static forms do not depend on them; the other std-only concepts are in
//! kdist/core/concepts.hpp.)

#include <concepts>
#include <type_traits>
#include <vector>

#include <kdist/core/concepts.hpp>
#include <kdist/core/runtime_layout.hpp>
#include <kdist/core/runtime_mesh.hpp>

namespace kdist {

//! A mesh of another type than RuntimeDeviceMesh that converts to one (a static mesh): the
//! constructors that take a RuntimeDeviceMesh by value take it too, as a template.
template <class Mesh>
concept ConvertibleToRuntimeMesh = std::convertible_to<const Mesh&, RuntimeDeviceMesh> &&
    !std::same_as<std::remove_cvref_t<Mesh>, RuntimeDeviceMesh>;

//! A layout of another type than RuntimeTensorLayout that converts to one (a static layout), as
//! a forwarding reference's type.
template <class Layout>
concept ConvertibleToRuntimeLayout = std::convertible_to<Layout, RuntimeTensorLayout> &&
    !std::same_as<std::remove_cvref_t<Layout>, RuntimeTensorLayout>;

//! A layout rule known at run time, as a forwarding reference's type: a `std::vector<DimAxes>`
//! or a RuntimeTensorLayout (a typed LayoutMap checks braces at compile time instead).
template <class Rule>
concept RuntimeLayoutRule =
    SameUnqualified<Rule, std::vector<DimAxes>> || SameUnqualified<Rule, RuntimeTensorLayout>;

}  // namespace kdist
