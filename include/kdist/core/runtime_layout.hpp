#pragma once
//! \file core/runtime_layout.hpp
//! `kdist::RuntimeTensorLayout`: a tensor layout as a value (Keras `TensorLayout(axes,
//! device_mesh)`), validated against its mesh at run time. Every static `kdist::TensorLayout`
//! converts to it; the LayoutMap stores them.

#include <cstddef>
#include <initializer_list>
#include <optional>
#include <ostream>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <kdist/core/detail/layout_rules.hpp>
#include <kdist/core/detail/python_repr.hpp>
#include <kdist/core/detail/shard_math.hpp>
#include <kdist/core/dim_spec.hpp>
#include <kdist/core/error.hpp>
#include <kdist/core/layout.hpp>
#include <kdist/core/runtime_mesh.hpp>

namespace kdist {

//! The mesh axes one tensor dimension is sharded over; empty means replicated.
//! Converts from `kdist::replicated`, `std::nullopt` (Keras' None), an axis name, a list of
//! names, and `kdist::axes<...>`, so `{kdist::replicated, "model"}` reads like Keras'
//! `(None, "model")`.
class DimAxes {
 public:
  DimAxes() = default;
  DimAxes(std::nullopt_t) {}                                     // NOLINT: Keras' None
  DimAxes(const char* name) : names_{std::string(name)} {}       // NOLINT
  DimAxes(std::string name) : names_{std::move(name)} {}         // NOLINT
  DimAxes(std::string_view name) : names_{std::string(name)} {}  // NOLINT
  DimAxes(std::initializer_list<std::string> names) : names_(names) {}
  explicit DimAxes(std::vector<std::string> names) : names_(std::move(names)) {}
  DimAxes(const DimSpec& spec) {  // NOLINT: every static dim is one
    for (std::size_t i = 0; i < spec.size(); ++i) names_.emplace_back(spec.axis(i));
  }

  const std::vector<std::string>& names() const { return names_; }
  bool is_replicated() const { return names_.empty(); }
  std::size_t size() const { return names_.size(); }

  //! None / 'model' / ('data', 'model'), as Python prints a layout entry.
  std::string repr() const { return detail::dim_repr(names_); }
  friend bool operator==(const DimAxes&, const DimAxes&) = default;

 private:
  std::vector<std::string> names_;
};

//! How a tensor is laid out on a device mesh: one `DimAxes` per tensor dimension.
//!
//! A layout may be built without a mesh and receive one later (as Keras' LayoutMap gives its
//! mesh to layouts that have none); the mesh is validated when set. Shard arithmetic needs the
//! mesh.
//!
//! Errors (`kdist::ValueError`): an axis the mesh does not have ("Invalid axis names for Layout.
//! Valid axis names: [...], Got [...]"), a mesh axis used twice, a shape whose rank differs from
//! the layout's, a shape the shards cannot divide when the layout demands even division, shard
//! arithmetic on a layout without mesh.
class RuntimeTensorLayout {
 public:
  RuntimeTensorLayout(std::vector<DimAxes> axes, std::optional<RuntimeDeviceMesh> mesh = {},
                      Division division = Division::chunk)
      : axes_(std::move(axes)), division_(division) {
    if (mesh) set_device_mesh(std::move(*mesh));
  }
  RuntimeTensorLayout(std::initializer_list<DimAxes> axes,
                      std::optional<RuntimeDeviceMesh> mesh = {},
                      Division division = Division::chunk)
      : RuntimeTensorLayout(std::vector<DimAxes>(axes), std::move(mesh), division) {}

  //! Every static layout is one: the conversion toward the value form lives here, in the target
  //! (mdspan's pattern), so core/layout.hpp does not depend on this header.
  template <class Mesh, Division Div, DimSpec... Dims>
  RuntimeTensorLayout(const BasicTensorLayout<Mesh, Div, Dims...>& layout)  // NOLINT: implicit
      : RuntimeTensorLayout(std::vector<DimAxes>{DimAxes(Dims)...},
                            RuntimeDeviceMesh(layout.device_mesh()), Div) {}

  std::size_t rank() const { return axes_.size(); }
  const std::vector<DimAxes>& axes() const { return axes_; }
  Division division() const { return division_; }
  const std::optional<RuntimeDeviceMesh>& device_mesh() const { return mesh_; }

  //! Give the layout its mesh, validating the axis names (nothing changes when invalid).
  void set_device_mesh(RuntimeDeviceMesh mesh) {
    auto idx = resolve(mesh);
    mesh_ = std::move(mesh);
    axis_index_ = std::move(idx);
  }
  //! A copy of this layout on `mesh` (validated).
  RuntimeTensorLayout with_device_mesh(RuntimeDeviceMesh mesh) const {
    RuntimeTensorLayout copy = *this;
    copy.set_device_mesh(std::move(mesh));
    return copy;
  }
  //! Throws the ValueError set_device_mesh would throw for `mesh`.
  void validate(const RuntimeDeviceMesh& mesh) const { (void)resolve(mesh); }

  //! True when no dimension is sharded.
  bool is_fully_replicated() const {
    for (const auto& a : axes_) {
      if (!a.is_replicated()) return false;
    }
    return true;
  }
  //! Mesh axis indices dimension d is sharded over (requires a mesh).
  const std::vector<std::size_t>& mesh_axes_of(std::size_t d) const {
    require_mesh();
    if (d >= rank()) {
      throw ValueError("kdist::TensorLayout: dimension " + std::to_string(d) +
                       " does not exist in layout " + axes_repr() + " (rank " +
                       std::to_string(rank()) + ")");
    }
    return axis_index_[d];
  }
  //! Mesh axes no dimension uses: the tensor is replicated along them.
  std::vector<std::size_t> replicated_mesh_axes() const {
    require_mesh();
    std::vector<bool> used(mesh_->rank(), false);
    for (const auto& dim : axis_index_) {
      for (auto a : dim) used[a] = true;
    }
    std::vector<std::size_t> out;
    for (std::size_t a = 0; a < used.size(); ++a) {
      if (!used[a]) out.push_back(a);
    }
    return out;
  }

  //! Number of shards of dimension d.
  std::size_t shards(std::size_t d) const {
    const auto& ax = mesh_axes_of(d);
    return detail::group_size(ax, ax.size(), mesh_->shape());
  }
  //! Which shard of dimension d the device at mesh `coords` holds.
  std::size_t shard_index(std::size_t d, std::span<const std::size_t> coords) const {
    const auto& ax = mesh_axes_of(d);
    check_coords(coords);
    return detail::group_index(ax, ax.size(), mesh_->shape(), coords);
  }

  //! Checks a global shape against the layout: its rank, and even division when demanded.
  void check_shape(std::span<const std::size_t> shape) const {
    if (shape.size() != rank()) {
      throw ValueError("kdist::TensorLayout: a layout of rank " + std::to_string(rank()) + " " +
                       axes_repr() + " cannot be applied to a tensor of shape " +
                       detail::shape_repr(shape) + " (rank " + std::to_string(shape.size()) +
                       "); give one entry per tensor dimension");
    }
    if (division_ != Division::even || !mesh_) return;
    for (std::size_t d = 0; d < rank(); ++d) {
      const std::size_t n = shards(d);
      if (shape[d] % n != 0) {
        detail::throw_not_evenly_divisible(d, shape, n, axes_[d].repr(), axes_repr());
      }
    }
  }

  //! Global offset and local extent, along dimension d of global extent `global`, of the block
  //! the device at `coords` holds.
  Block block(std::size_t d, std::size_t global, std::span<const std::size_t> coords) const {
    const auto& ax = mesh_axes_of(d);
    check_coords(coords);
    const auto& shape = mesh_->shape();
    return detail::chunk_block(global, detail::group_size(ax, ax.size(), shape),
                               detail::group_index(ax, ax.size(), shape, coords));
  }
  //! Local extents of the block device `device` holds of a tensor of global `shape`.
  std::vector<std::size_t> local_extents(std::span<const std::size_t> shape,
                                         std::size_t device) const {
    std::vector<std::size_t> out(rank());
    for_each_block(shape, device, [&](std::size_t d, Block b) { out[d] = b.extent; });
    return out;
  }
  //! Global offsets of that block.
  std::vector<std::size_t> offsets(std::span<const std::size_t> shape, std::size_t device) const {
    std::vector<std::size_t> out(rank());
    for_each_block(shape, device, [&](std::size_t d, Block b) { out[d] = b.offset; });
    return out;
  }
  //! The devices holding the element at `index` of a tensor of global `shape` (all replicas),
  //! in increasing order.
  std::vector<std::size_t> owners(std::span<const std::size_t> shape,
                                  std::span<const std::size_t> index) const {
    require_mesh();
    check_shape(shape);
    check_index(shape, index);
    const auto& m = *mesh_;
    std::vector<std::size_t> out;
    std::vector<std::size_t> coords(m.rank());
    for (std::size_t dev = 0; dev < m.size(); ++dev) {
      detail::unflatten(m.shape(), dev, coords);
      bool holds = true;
      for (std::size_t d = 0; d < rank() && holds; ++d) {
        holds = detail::chunk_owner(shape[d], shards(d), index[d]) == shard_index(d, coords);
      }
      if (holds) out.push_back(dev);
    }
    return out;
  }

  //! ('model', 'data') / (None, 'model') / (('data', 'model'), None)
  std::string axes_repr() const {
    std::vector<std::string> items;
    for (const auto& a : axes_) items.push_back(a.repr());
    return detail::py_tuple(items);
  }
  //! `<TensorLayout axes=('model', 'data'), device_mesh=<DeviceMesh ...>>`, as Keras prints it.
  std::string to_string() const {
    return "<TensorLayout axes=" + axes_repr() +
           ", device_mesh=" + (mesh_ ? mesh_->to_string() : std::string("None")) + ">";
  }
  friend std::ostream& operator<<(std::ostream& os, const RuntimeTensorLayout& l) {
    return os << l.to_string();
  }
  //! Equal when they mean the same thing: same axes per dimension, same mesh (or both none),
  //! same division rule.
  friend bool operator==(const RuntimeTensorLayout& a, const RuntimeTensorLayout& b) {
    return a.axes_ == b.axes_ && a.mesh_ == b.mesh_ && a.division_ == b.division_;
  }

 private:
  //! The mesh axis indices of each dimension, after the rules of detail/layout_rules.hpp (the
  //! static TensorLayout's too): Keras' message for unknown names (all of them), kdist's for a
  //! mesh axis used twice.
  std::vector<std::vector<std::size_t>> resolve(const RuntimeDeviceMesh& mesh) const {
    auto count = [&](std::size_t d) { return axes_[d].names().size(); };
    auto name = [&](std::size_t d, std::size_t k) -> const std::string& {
      return axes_[d].names()[k];
    };
    auto find = [&](std::string_view n) { return mesh.find_axis(n); };
    if (detail::first_unknown_axis(rank(), count, name, find).found) {
      std::vector<std::string> invalid;
      for (const auto& dim : axes_) {
        for (const auto& n : dim.names()) {
          if (!mesh.find_axis(n)) invalid.push_back(detail::py_str(n));
        }
      }
      throw ValueError("kdist::TensorLayout: Invalid axis names for Layout. Valid axis names: " +
                       detail::join_quoted(mesh.axis_names()) + ", Got " +
                       detail::py_list(invalid) + " in layout " + axes_repr());
    }
    if (const auto r = detail::first_reused_axis(rank(), count, name, find); r.found) {
      throw ValueError("kdist::TensorLayout: mesh axis '" + name(r.dim, r.k) +
                       "' is used twice in " + axes_repr() + " (dimensions " +
                       std::to_string(r.earlier_dim) + " and " + std::to_string(r.dim) +
                       "); a mesh axis can shard one dimension only");
    }
    std::vector<std::vector<std::size_t>> idx(rank());
    for (std::size_t d = 0; d < rank(); ++d) {
      for (const auto& n : axes_[d].names()) idx[d].push_back(*mesh.find_axis(n));
    }
    return idx;
  }

  void require_mesh() const {
    if (!mesh_) {
      throw ValueError("kdist::TensorLayout: layout " + axes_repr() +
                       " has no device mesh; give it one (set_device_mesh, or insert it in a "
                       "LayoutMap that has a mesh)");
    }
  }
  void check_coords(std::span<const std::size_t> coords) const {
    if (coords.size() != mesh_->rank()) {
      throw ValueError("kdist::TensorLayout: " + std::to_string(coords.size()) +
                       " mesh coordinates given for a mesh of rank " +
                       std::to_string(mesh_->rank()));
    }
  }
  void check_index(std::span<const std::size_t> shape, std::span<const std::size_t> index) const {
    detail::check_index_in_shape(shape, index);
  }
  template <class F>
  void for_each_block(std::span<const std::size_t> shape, std::size_t device, F&& f) const {
    require_mesh();
    check_shape(shape);
    const auto coords = mesh_->coords_of(device);
    for (std::size_t d = 0; d < rank(); ++d) f(d, block(d, shape[d], coords));
  }

  std::vector<DimAxes> axes_;
  Division division_ = Division::chunk;
  std::optional<RuntimeDeviceMesh> mesh_;
  std::vector<std::vector<std::size_t>> axis_index_;  // mesh axes of each dimension
};

//! A static layout and a value layout are equal when they mean the same thing.
template <class Mesh, Division Div, DimSpec... Dims>
bool operator==(const BasicTensorLayout<Mesh, Div, Dims...>& a, const RuntimeTensorLayout& b) {
  return RuntimeTensorLayout(a) == b;
}

}  // namespace kdist
