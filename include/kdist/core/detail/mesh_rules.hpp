#pragma once
// The rules a device mesh obeys, written once: constexpr functions over axis names and extents,
// used by the static DeviceMesh<...> (in static_asserts, and at run time for dynamic extents), by
// RuntimeDeviceMesh and by MeshCommunicators (as exceptions). `shape_problem` says the first rule
// a run-time shape breaks, in the words every mesh type throws.

#include <algorithm>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <kdist/core/error.hpp>

#include <kdist/core/detail/python_repr.hpp>
#include <kdist/core/detail/row_major.hpp>

namespace kdist::detail {

//! Index of the first name that repeats an earlier one, or names.size().
template <class Names>
constexpr std::size_t first_repeated_name(const Names& names) {
  for (std::size_t j = 0; j < names.size(); ++j) {
    for (std::size_t i = 0; i < j; ++i) {
      if (std::string_view(names[i]) == std::string_view(names[j])) return j;
    }
  }
  return names.size();
}

//! Index of the first empty name, or names.size().
template <class Names>
constexpr std::size_t first_empty_name(const Names& names) {
  for (std::size_t i = 0; i < names.size(); ++i) {
    if (std::string_view(names[i]).empty()) return i;
  }
  return names.size();
}

//! Index of the first extent below 1, or extents.size().
template <class Extents>
constexpr std::size_t first_zero_extent(const Extents& extents) {
  for (std::size_t i = 0; i < extents.size(); ++i) {
    if (extents[i] < 1) return i;
  }
  return extents.size();
}

//! The first rule that a mesh of `shape` named `names` breaks, as the message's text after
//! "kdist::DeviceMesh: " (or the caller's own prefix); nothing for a valid mesh. In order: empty,
//! lengths, then axis by axis an empty name, a repeated name, an extent below 1; then a product
//! beyond 64 bits. Extents may be signed (MeshCommunicators takes MPI's ints).
template <class Shape, class Names>
std::optional<std::string> shape_problem(const Shape& shape, const Names& names) {
  if (shape.size() == 0 || names.size() == 0) return "shape and axis_names cannot be empty";
  std::vector<std::string> n(names.begin(), names.end());
  std::vector<std::string> extents;
  for (auto e : shape) extents.push_back(std::to_string(e));
  if (shape.size() != n.size()) {
    return "shape and axis_names should have the same size, got shape=" + py_tuple(extents) +
           " and axis_names=" + join_quoted(n);
  }
  const std::size_t first =
      std::min({first_empty_name(n), first_repeated_name(n), first_zero_extent(shape)});
  if (first < n.size()) {
    if (first == first_empty_name(n)) {
      return "axis " + std::to_string(first) + " has an empty name; give every axis a name";
    }
    if (first == first_repeated_name(n)) {
      return "axis name '" + n[first] + "' is used twice in " + join_quoted(n) +
             "; axis names must be unique";
    }
    return "axis '" + n[first] + "' has extent " + extents[first] +
           "; every axis holds at least one device";
  }
  if (!checked_product(shape)) {
    return "shape " + py_tuple(extents) +
           " holds more devices than a 64-bit count can hold (its extents multiply beyond 2^64); "
           "give a shape whose product is the number of devices";
  }
  return std::nullopt;
}

//! As shape_problem, and then the device count: the product of a valid shape must be it.
template <class Shape, class Names>
std::optional<std::string> shape_problem(const Shape& shape, const Names& names,
                                         std::size_t device_count) {
  if (auto problem = shape_problem(shape, names)) return problem;
  const std::size_t size = *checked_product(shape);
  if (size == device_count) return std::nullopt;
  std::vector<std::string> extents;
  for (auto e : shape) extents.push_back(std::to_string(e));
  return "shape does not match the number of devices: shape " + py_tuple(extents) + " holds " +
         std::to_string(size) + " devices, but " + std::to_string(device_count) + " were given";
}

//! Position of `name` among a mesh's axis `names`, or nullopt: the one axis lookup of the static
//! mesh, RuntimeDeviceMesh and MeshCommunicators.
template <class Names>
constexpr std::optional<std::size_t> find_name(const Names& names, std::string_view name) {
  std::size_t i = 0;
  for (const auto& n : names) {
    if (std::string_view(n) == name) return i;
    ++i;
  }
  return std::nullopt;
}

//! `<DeviceMesh shape=(2, 4), axis_names=['data', 'model']>`, as Keras prints a mesh: the one
//! printer of DeviceMesh and RuntimeDeviceMesh.
template <class Shape, class Names>
std::string mesh_repr(const Shape& shape, const Names& names) {
  std::vector<std::string> extents;
  for (auto e : shape) extents.push_back(std::to_string(e));
  const std::vector<std::string> n(names.begin(), names.end());
  return "<DeviceMesh shape=" + py_tuple(extents) + ", axis_names=" + join_quoted(n) + ">";
}

//! "device:0", "device:1", ...: the names a mesh built from a bare device count uses.
inline std::vector<std::string> numbered_devices(std::size_t count) {
  std::vector<std::string> out;
  out.reserve(count);
  for (std::size_t i = 0; i < count; ++i) out.push_back("device:" + std::to_string(i));
  return out;
}

//! The error of a device index out of range, kept out of line so that the checks inline cheaply.
[[noreturn, gnu::cold, gnu::noinline]] inline void throw_device_index_out_of_range(
    std::size_t index, std::size_t size) {
  throw ValueError("kdist::DeviceMesh: device index " + std::to_string(index) +
                   " is out of range for a mesh of " + std::to_string(size) + " devices");
}

}  // namespace kdist::detail
