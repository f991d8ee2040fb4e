#pragma once
//! \file core/runtime_mesh.hpp
//! `kdist::RuntimeDeviceMesh`: a device mesh as a value (axis names as strings), the way Keras'
//! `DeviceMesh(shape, axis_names, devices)` is built. Every static `kdist::DeviceMesh<...>`
//! converts to it; run-time layouts and the LayoutMap refer to it.

#include <algorithm>
#include <cstddef>
#include <memory>
#include <optional>
#include <ostream>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <kdist/core/detail/mesh_rules.hpp>
#include <kdist/core/detail/python_repr.hpp>
#include <kdist/core/detail/row_major.hpp>
#include <kdist/core/error.hpp>
#include <kdist/core/mesh.hpp>

namespace kdist {

//! A cluster of devices arranged as a named, row-major grid (Keras `DeviceMesh`).
//!
//! Errors (`kdist::ValueError`): empty shape, shape and axis names of different lengths, an empty
//! or duplicated axis name (Keras does not check this one), an extent of 0, and a device count
//! that does not equal the product of the shape.
//!
//! Example: `kdist::RuntimeDeviceMesh mesh({2, 4}, {"data", "model"}, kdist::list_devices());`
class RuntimeDeviceMesh {
 public:
  RuntimeDeviceMesh(std::vector<std::size_t> shape, std::vector<std::string> axis_names,
                    std::vector<std::string> devices) {
    validate(shape, axis_names, devices.size());
    impl_ = std::make_shared<const Impl>(
        Impl{std::move(shape), std::move(axis_names), std::move(devices)});
  }
  //! Devices named "device:0" ... "device:N-1" (named after the shape is validated, so a bad
  //! shape for 2^40 devices is an error, not an allocation).
  RuntimeDeviceMesh(std::vector<std::size_t> shape, std::vector<std::string> axis_names,
                    std::size_t device_count) {
    validate(shape, axis_names, device_count);
    impl_ = std::make_shared<const Impl>(
        Impl{std::move(shape), std::move(axis_names), detail::numbered_devices(device_count)});
  }

  //! Every static mesh is one: the conversion toward the value form lives here, in the target
  //! (mdspan's pattern), so core/mesh.hpp does not depend on this header.
  template <class... Axes>
  RuntimeDeviceMesh(const DeviceMesh<Axes...>& mesh)  // NOLINT: implicit, every mesh is one
      : RuntimeDeviceMesh(extents_of(mesh), names_of(mesh), mesh.devices()) {}

  std::size_t rank() const { return impl_->shape.size(); }
  //! Extent of axis r; a ValueError when r >= rank().
  std::size_t extent(std::size_t r) const {
    if (r >= rank()) {
      throw ValueError("kdist::DeviceMesh: axis " + std::to_string(r) + " does not exist in " +
                       to_string() + " (rank " + std::to_string(rank()) + ")");
    }
    return impl_->shape[r];
  }
  std::size_t size() const { return impl_->devices.size(); }
  const std::vector<std::size_t>& shape() const { return impl_->shape; }
  const std::vector<std::string>& axis_names() const { return impl_->axis_names; }
  const std::vector<std::string>& devices() const { return impl_->devices; }

  //! Position of `name` among the axes, or nullopt.
  std::optional<std::size_t> find_axis(std::string_view name) const {
    return detail::find_name(impl_->axis_names, name);
  }
  //! Position of `name` among the axes; a ValueError listing the valid names otherwise.
  std::size_t axis_index(std::string_view name) const {
    if (auto i = find_axis(name)) return *i;
    throw ValueError("kdist::DeviceMesh: \"" + std::string(name) +
                     "\" is not an axis of the mesh; valid axis names: " +
                     detail::join_quoted(impl_->axis_names));
  }

  //! Mesh coordinates of device `index` (row-major, as np.reshape(devices, shape)).
  std::vector<std::size_t> coords_of(std::size_t index) const {
    check_device_index(index);
    std::vector<std::size_t> coords(rank());
    detail::unflatten(impl_->shape, index, coords);
    return coords;
  }
  //! Device index at `coords`.
  std::size_t device_index(std::span<const std::size_t> coords) const {
    if (coords.size() != rank()) {
      throw ValueError("kdist::DeviceMesh: " + std::to_string(coords.size()) +
                       " coordinates given for a mesh of rank " + std::to_string(rank()));
    }
    for (std::size_t r = 0; r < rank(); ++r) {
      if (coords[r] >= impl_->shape[r]) {
        throw ValueError("kdist::DeviceMesh: coordinate " + std::to_string(coords[r]) +
                         " is out of range for axis '" + impl_->axis_names[r] + "' of extent " +
                         std::to_string(impl_->shape[r]));
      }
    }
    return detail::flatten(impl_->shape, coords);
  }
  //! Position of the device named `device` in devices(); a ValueError if absent.
  std::size_t index_of_device(std::string_view device) const {
    const auto& d = impl_->devices;
    auto it = std::find(d.begin(), d.end(), device);
    if (it == d.end()) {
      throw ValueError("kdist::DeviceMesh: device '" + std::string(device) +
                       "' is not in the mesh " + to_string());
    }
    return static_cast<std::size_t>(it - d.begin());
  }

  //! `<DeviceMesh shape=(2, 4), axis_names=['data', 'model']>`, as Keras prints it.
  std::string to_string() const { return detail::mesh_repr(impl_->shape, impl_->axis_names); }
  friend std::ostream& operator<<(std::ostream& os, const RuntimeDeviceMesh& m) {
    return os << m.to_string();
  }
  //! Equal when shape, axis names and devices are equal.
  friend bool operator==(const RuntimeDeviceMesh& a, const RuntimeDeviceMesh& b) {
    return a.impl_ == b.impl_ ||
           (a.impl_->shape == b.impl_->shape && a.impl_->axis_names == b.impl_->axis_names &&
            a.impl_->devices == b.impl_->devices);
  }

 private:
  template <class Mesh>
  static std::vector<std::size_t> extents_of(const Mesh& mesh) {
    std::vector<std::size_t> e;
    for (std::size_t r = 0; r < Mesh::rank(); ++r) e.push_back(mesh.extent(r));
    return e;
  }
  template <class Mesh>
  static std::vector<std::string> names_of(const Mesh&) {
    std::vector<std::string> n;
    for (auto name : Mesh::axis_names()) n.emplace_back(name);
    return n;
  }

  struct Impl {
    std::vector<std::size_t> shape;
    std::vector<std::string> axis_names;
    std::vector<std::string> devices;
  };

  void check_device_index(std::size_t index) const {
    if (index >= size()) detail::throw_device_index_out_of_range(index, size());
  }

  static void validate(const std::vector<std::size_t>& s, const std::vector<std::string>& n,
                       std::size_t device_count) {
    if (auto problem = detail::shape_problem(s, n, device_count)) {
      throw ValueError("kdist::DeviceMesh: " + *problem);
    }
  }

  std::shared_ptr<const Impl> impl_;  // immutable, so copies (one per layout) are cheap
};

}  // namespace kdist
