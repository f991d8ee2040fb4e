#pragma once
//! \file core/concepts.hpp
//! The concepts of kdist's public signatures that need nothing but the standard library and
//! kdist's core types (those about the run-time value forms are in kdist/core/runtime_concepts.hpp,
//! the Kokkos and MPI ones in kdist/parallel/concepts.hpp). Each names a
//! trait or a combination that a signature would otherwise spell out in a `requires` clause:
//! `template <StaticDataType DataType, class MemorySpace, IndexFunction<DataType> F,
//! StaticLayout Layout>`.
//!
//! - meshes and layouts: StaticMesh, StaticLayout, TypedTensorLayout;
//! - data types (Kokkos spellings, read without Kokkos): DynamicDataType, StaticDataType,
//!   SameDynamicDataType;
//! - functions and arguments: IndexFunction, MainFunction, ShapeRange, SameUnqualified,
//!   DifferentFrom.
//!
//! A concept says which overload a call picks; what a call gets wrong once an overload is picked
//! (a layout of another rank, a pending sum where values are needed) stays a kdist diagnostic, a
//! static_assert naming the mistake (docs/errors.md).

#include <concepts>
#include <cstddef>
#include <ranges>
#include <span>
#include <type_traits>
#include <utility>

#include <kdist/core/detail/data_type_extents.hpp>
#include <kdist/core/layout.hpp>
#include <kdist/core/mesh.hpp>
#include <kdist/core/pending_sum.hpp>

namespace kdist {

// ---- argument types ------------------------------------------------------------------------------

//! `T` is `U` once references and cv-qualifiers are removed (a forwarding reference to a `U`).
template <class T, class U>
concept SameUnqualified = std::same_as<std::remove_cvref_t<T>, U>;

//! `T` is not `U`, references and cv-qualifiers aside (the ranges library's `different-from`): a
//! constructor template `template <DifferentFrom<X> T> X(T&&)` leaves copies and moves of X to
//! X's own constructors.
template <class T, class U>
concept DifferentFrom = !std::same_as<std::remove_cvref_t<T>, std::remove_cvref_t<U>>;

//! A shape given as a range of integers (`std::vector<int>`, `std::array<long, 2>`...), other
//! than one that converts to `std::span<const std::size_t>` (which the span overload takes).
template <class S>
concept ShapeRange = std::ranges::input_range<S> && std::integral<std::ranges::range_value_t<S>> &&
    !std::convertible_to<const S&, std::span<const std::size_t>>;

// ---- functions ---------------------------------------------------------------------------------

namespace detail {
template <class F, class T, std::size_t... I>
constexpr bool invocable_with_indices(std::index_sequence<I...>) {
  return std::is_invocable_r_v<T, F, decltype(I)...>;
}
}  // namespace detail

//! `f(i, j, ...)`, with one `std::size_t` global index per dimension of the Kokkos data type
//! `DataType` (`float**`, `float[784][200]`), returns something convertible to its value type:
//! a function that `kdist::distribute_tensor` evaluates for each element of a block.
template <class F, class DataType>
concept IndexFunction = detail::invocable_with_indices<
    F, std::remove_cv_t<typename detail::data_type_extents<DataType>::value_type>>(
    std::make_index_sequence<detail::data_type_extents<DataType>::rank>{});

//! `body(argc, argv)` (called as an lvalue) returns something convertible to int: the body of a
//! `main`, as `kdist::run(argc, argv, body)` takes it.
template <class Body>
concept MainFunction = std::is_invocable_r_v<int, Body&, int, char**>;

// ---- data types --------------------------------------------------------------------------------

//! A Kokkos data type with no static extent (`float**`): the data type of a run-time tensor.
template <class DataType>
concept DynamicDataType = detail::is_dynamic_data_type_v<DataType>;

//! A Kokkos data type whose every extent is static (`float[784][200]`): a tensor of it needs no
//! shape argument.
template <class DataType>
concept StaticDataType = detail::is_static_data_type_v<DataType>;

//! Two Kokkos data types of one value type and rank, which may differ in which extents are
//! static (`float[784][200]` and `float**`): the same run-time form.
template <class A, class B>
concept SameDynamicDataType =
    std::same_as<detail::dynamic_data_type_t<A>, detail::dynamic_data_type_t<B>>;

// ---- meshes and layouts ------------------------------------------------------------------------

//! A static mesh: a `kdist::DeviceMesh<kdist::axis<...>...>`, whose axis names and static
//! extents are part of its type.
template <class Mesh>
concept StaticMesh = is_device_mesh_v<Mesh>;

//! A static layout: a `kdist::TensorLayout<Mesh, ...>`, `EvenTensorLayout<Mesh, ...>` or
//! `BasicTensorLayout<Mesh, Division, ...>`, whose mesh and sharding are part of its type.
template <class Layout>
concept StaticLayout = is_tensor_layout_v<Layout>;

//! What the layout of a typed tensor, `DistributedTensor<DataType, Layout>`, can be: a
//! StaticLayout, or a `kdist::PendingSum` of one (each process holds a summand).
template <class Layout>
concept TypedTensorLayout = is_static_tensor_layout_v<Layout>;

}  // namespace kdist
