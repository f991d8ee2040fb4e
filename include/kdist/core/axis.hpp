#pragma once
//! \file core/axis.hpp
//! `kdist::axis<"name", extent>`: one named axis of a device mesh, its extent static or dynamic.

#include <cstddef>
#include <span>
#include <type_traits>

#include <kdist/core/detail/fixed_string.hpp>
#include <kdist/core/error.hpp>

namespace kdist {

//! An extent known only at run time (like `std::dynamic_extent` for mdspan).
inline constexpr std::size_t dynamic_extent = std::dynamic_extent;

namespace error {
//! A mesh axis has extent 0: a mesh axis holds at least one device. Give the axis an extent >= 1,
//! or leave it dynamic (`kdist::axis<"name">`) so the device count decides.
template <class AxisName>
struct axis_extent_is_zero;
//! An axis name is empty: give every mesh axis a name, e.g. `kdist::axis<"data", 2>`.
template <std::size_t Extent>
struct axis_name_is_empty;
}  // namespace error

//! One named mesh axis. `axis<"model", 4>` has a static extent; `axis<"batch">` (or
//! `axis<"batch", kdist::dynamic_extent>`) takes its extent from the devices at run time.
//!
//! Example: `using Mesh = kdist::DeviceMesh<kdist::axis<"data">, kdist::axis<"model", 4>>;`
template <detail::fixed_string Name, std::size_t Extent = dynamic_extent>
struct axis {
  static_assert(detail::diagnose<Name.size() != 0, error::axis_name_is_empty<Extent>>::value,
                "kdist::axis: an axis name must not be empty");
  static_assert(detail::diagnose<Extent != 0,
                                 error::axis_extent_is_zero<detail::diagnostic_name<Name>>>::value,
                "kdist::axis: an axis extent must be at least 1");

  using kdist_axis_type = axis;  // what detail::axis_type recognises

  static constexpr detail::fixed_string name = Name;
  static constexpr std::size_t static_extent = Extent;
  static constexpr bool is_dynamic = Extent == dynamic_extent;
};

namespace detail {
//! Whether T is an `axis<...>` (and not a class derived from one). Not a partial specialization
//! on `axis<Name, Extent>`: nvcc's front end cannot deduce a class-type template argument such as
//! `fixed_string Name` from a partial specialization's pattern, so such a trait is false there.
template <class T>
concept axis_type = std::is_same_v<typename T::kdist_axis_type, T>;
}  // namespace detail

template <class T>
inline constexpr bool is_axis_v = detail::axis_type<T>;

}  // namespace kdist
