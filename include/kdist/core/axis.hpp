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

namespace detail {
//! An axis' extent as `axis`'s template argument: its decimal digits, or "dynamic_extent". Text,
//! not a number, because compilers print a template's arguments in their instantiation notes,
//! where a std::size_t dynamic extent reads 18446744073709551615; GCC and nvcc print this as
//! `kdist::detail::axis_extent{"dynamic_extent"}` and `{"4"}`. One spelling per value: `axis<"x",
//! 4>` is one type however the 4 is written.
struct axis_extent {
  char text[21] = {};  // the 20 digits of the largest std::size_t, and the terminating zero

  constexpr axis_extent(std::size_t extent) {  // NOLINT: implicit, `axis<"model", 4>`
    if (extent == dynamic_extent) {
      const char* word = "dynamic_extent";
      for (std::size_t i = 0; word[i] != '\0'; ++i) text[i] = word[i];
      return;
    }
    char digits[20] = {};  // (not write_extent: GCC 12 rejects its null test of `text` here)
    std::size_t n = 0;
    do {
      digits[n++] = static_cast<char>('0' + extent % 10);
      extent /= 10;
    } while (extent != 0);
    for (std::size_t i = 0; i < n; ++i) text[i] = digits[n - 1 - i];
  }
  //! From the text (nvcc's front end hands the argument to the host compiler as `{{'4', ...}}`).
  constexpr axis_extent(const char (&t)[21]) {  // NOLINT: implicit
    for (std::size_t i = 0; i < 21; ++i) text[i] = t[i];
  }
  [[nodiscard]] constexpr std::size_t value() const {
    if (text[0] == 'd') return dynamic_extent;
    std::size_t v = 0;
    for (std::size_t i = 0; text[i] != '\0'; ++i)
      v = v * 10 + static_cast<std::size_t>(text[i] - '0');
    return v;
  }
};
}  // namespace detail

//! One named mesh axis. `axis<"model", 4>` has a static extent; `axis<"batch">` (or
//! `axis<"batch", kdist::dynamic_extent>`) takes its extent from the devices at run time.
//!
//! Example: `using Mesh = kdist::DeviceMesh<kdist::axis<"data">, kdist::axis<"model", 4>>;`
template <detail::fixed_string Name, detail::axis_extent Extent = dynamic_extent>
struct axis {
  static_assert(
      detail::diagnose<Name.size() != 0, error::axis_name_is_empty<Extent.value()>>::value,
      "kdist::axis: an axis name must not be empty");
  static_assert(detail::diagnose<Extent.value() != 0,
                                 error::axis_extent_is_zero<detail::diagnostic_name<Name>>>::value,
                "kdist::axis: an axis extent must be at least 1");

  using kdist_axis_type = axis;  // what detail::axis_type recognises

  static constexpr detail::fixed_string name = Name;
  static constexpr std::size_t static_extent = Extent.value();
  static constexpr bool is_dynamic = static_extent == dynamic_extent;
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
