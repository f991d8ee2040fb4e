#pragma once
//! \file tensor.hpp
//! `kdist::DistributedTensor<DataType>`: a global tensor sharded over a device mesh. Each process
//! (one device per MPI rank) holds its block as a `Kokkos::View` in the default memory space; the
//! tensor knows its global shape, its layout, and whether it is a pending sum ("partial") over
//! some mesh axes, as PyTorch DTensor's Partial placement.

#include <algorithm>
#include <array>
#include <cstddef>
#include <string>
#include <vector>

#include <mpi.h>
#include <Kokkos_Core.hpp>

#include <kdist/detail/box.hpp>
#include <kdist/detail/python_repr.hpp>
#include <kdist/error.hpp>
#include <kdist/layout.hpp>
#include <kdist/runtime_layout.hpp>

namespace kdist {

namespace detail {
inline int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}
inline int world_size() {
  int s = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &s);
  return s;
}

//! The layout of a distributed tensor must have a mesh of exactly the running processes; checked
//! on replicated values only, so every rank throws the same error or none does.
inline void check_layout_for_tensor(const RuntimeTensorLayout& layout,
                                    std::span<const std::size_t> shape) {
  if (!layout.device_mesh()) {
    throw ValueError("kdist: tensor of shape " + shape_repr(shape) + " with layout " +
                     layout.axes_repr() + ": the layout has no device mesh; give it one");
  }
  layout.check_shape(shape);
  const auto& mesh = *layout.device_mesh();
  const int world = world_size();
  if (mesh.size() != static_cast<std::size_t>(world)) {
    throw ValueError("kdist: tensor of shape " + shape_repr(shape) + " with layout " +
                     layout.to_string() + ": the mesh has " + std::to_string(mesh.size()) +
                     " devices but " + std::to_string(world) +
                     " MPI processes are running (one device per process); run with mpiexec -n " +
                     std::to_string(mesh.size()) + " or build the mesh from kdist::list_devices()");
  }
}

template <class View, std::size_t... I>
View make_view(const std::string& label, const std::array<std::size_t, sizeof...(I)>& ext,
               std::index_sequence<I...>, bool zero = true) {
  if (!zero) return View(Kokkos::view_alloc(Kokkos::WithoutInitializing, label), ext[I]...);
  return View(Kokkos::view_alloc(label), ext[I]...);
}
}  // namespace detail

//! A tensor of global `shape()` laid out on a mesh by `layout()`; this process holds `local()`.
//!
//! DataType is a Kokkos data type (`float**`, `double***`...), rank 1 to 4 (and beyond). The local
//! View is LayoutRight in MemorySpace (the default execution space's by default).
//!
//! Build one with kdist::distribute_tensor (from a global array, from one root, or from a function
//! of the global index), or from a local block with `from_local`.
template <class DataType, class MemorySpace = Kokkos::DefaultExecutionSpace::memory_space>
class DistributedTensor {
 public:
  using view_type = Kokkos::View<DataType, Kokkos::LayoutRight, MemorySpace>;
  using value_type = typename view_type::non_const_value_type;
  using memory_space = MemorySpace;
  static constexpr std::size_t rank = static_cast<std::size_t>(view_type::rank);
  using shape_type = std::array<std::size_t, rank>;

  //! An empty tensor (no mesh); assign a real one to it.
  DistributedTensor() = default;

  //! A tensor whose local block on this process is `local` (its extents must be the layout's),
  //! pending a sum over mesh axes `partial_axes` (names) when not empty.
  static DistributedTensor from_local(view_type local, const shape_type& shape,
                                      RuntimeTensorLayout layout,
                                      std::vector<std::string> partial_axes = {}) {
    DistributedTensor t(shape, std::move(layout), std::move(partial_axes), false);
    for (std::size_t d = 0; d < rank; ++d) {
      if (local.extent(d) != t.block_.ext[d]) {
        throw ValueError("kdist::DistributedTensor::from_local: local block extent " +
                         std::to_string(local.extent(d)) + " in dimension " + std::to_string(d) +
                         " differs from " + std::to_string(t.block_.ext[d]) +
                         ", the extent layout " + t.layout_.axes_repr() + " gives device " +
                         std::to_string(t.device_) + " for shape " + detail::shape_repr(shape));
      }
    }
    t.local_ = std::move(local);
    return t;
  }
  //! A zero-filled tensor.
  static DistributedTensor zeros(const shape_type& shape, RuntimeTensorLayout layout,
                                 std::string label = "kdist::DistributedTensor") {
    return DistributedTensor(shape, std::move(layout), {}, true, label);
  }
  //! A tensor whose local block is allocated but not initialised (for callers that write every
  //! element).
  static DistributedTensor uninitialized(const shape_type& shape, RuntimeTensorLayout layout,
                                         std::string label = "kdist::DistributedTensor") {
    return DistributedTensor(shape, std::move(layout), {}, true, label, false);
  }

  const shape_type& shape() const { return shape_; }
  const RuntimeTensorLayout& layout() const { return layout_; }
  const RuntimeDeviceMesh& device_mesh() const { return *layout_.device_mesh(); }
  //! This process's block of the tensor's values. Errors (ValueError): the tensor is a pending
  //! sum (`is_partial()`): its block is one summand, not the values, and using it as the values
  //! (an optimizer step, a non-linear op) lets the replicas drift apart. Resolve the sum first
  //! (`kdist::redistribute(t, layout)`), or take `local_summand()` on purpose.
  const view_type& local() const {
    check_complete("local");
    return local_;
  }
  view_type& local() {
    check_complete("local");
    return local_;
  }
  //! This process's block as stored, whatever the state: the values of a complete tensor, one
  //! summand of them when the tensor is a pending sum (for code that sums or forwards summands:
  //! collectives, redistribute, a linear op that keeps the sum pending).
  const view_type& local_summand() const { return local_; }
  view_type& local_summand() { return local_; }
  //! Global offsets and extents of this process's block.
  const shape_type& offsets() const { return block_.lo; }
  const shape_type& local_extents() const { return block_.ext; }
  std::size_t global_size() const { return detail::product(shape_); }
  //! The device (= MPI rank in the world) this process drives.
  std::size_t device() const { return device_; }
  //! Mesh axes over which the tensor is a pending sum (empty: not partial).
  const std::vector<std::string>& partial_axes() const { return partial_; }
  bool is_partial() const { return !partial_.empty(); }

  //! Global box of device `dev`'s block.
  detail::Box<rank> block_of(std::size_t dev) const {
    detail::Box<rank> b;
    auto lo = layout_.offsets(shape_, dev);
    auto ext = layout_.local_extents(shape_, dev);
    std::copy(lo.begin(), lo.end(), b.lo.begin());
    std::copy(ext.begin(), ext.end(), b.ext.begin());
    return b;
  }
  const detail::Box<rank>& block() const { return block_; }

  //! Throws the error of `local()` when the tensor is a pending sum; `what` names the use.
  void check_complete(const char* what) const {
    if (!is_partial()) return;
    throw ValueError("kdist::DistributedTensor::" + std::string(what) + ": " + to_string() +
                     " is a pending sum over " + detail::join_quoted(partial_) +
                     ": this process holds one summand, not the values. Resolve the sum first "
                     "(kdist::redistribute(t, t.layout()) sums it over those axes), or use "
                     "local_summand() if a summand is what you mean");
  }

  //! Keras-like summary: `<DistributedTensor shape=(784, 200), layout=(None, 'model'), ...>`.
  std::string to_string() const {
    std::vector<std::size_t> s(shape_.begin(), shape_.end());
    std::string out = "<DistributedTensor shape=" + detail::shape_repr(s) +
                      ", layout=" + layout_.axes_repr() +
                      ", device_mesh=" + device_mesh().to_string();
    if (is_partial()) out += ", partial=" + detail::join_quoted(partial_);
    return out + ">";
  }

 private:
  DistributedTensor(const shape_type& shape, RuntimeTensorLayout layout,
                    std::vector<std::string> partial, bool allocate,
                    const std::string& label = "kdist::DistributedTensor", bool zero = true)
      : shape_(shape), layout_(std::move(layout)), partial_(std::move(partial)) {
    detail::check_layout_for_tensor(layout_, shape_);
    for (const auto& a : partial_) {
      const std::size_t i = device_mesh().axis_index(a);  // validates the name
      for (std::size_t d = 0; d < rank; ++d) {
        const auto& used = layout_.mesh_axes_of(d);
        if (std::find(used.begin(), used.end(), i) != used.end()) {
          throw ValueError("kdist::DistributedTensor: mesh axis '" + a +
                           "' cannot both shard the tensor (layout " + layout_.axes_repr() +
                           ") and hold a pending sum over it");
        }
      }
    }
    // A pending sum over axes of extent 1 is already complete.
    std::erase_if(partial_, [&](const std::string& a) {
      return device_mesh().extent(device_mesh().axis_index(a)) == 1;
    });
    std::sort(partial_.begin(), partial_.end());
    device_ = static_cast<std::size_t>(detail::world_rank());
    block_ = block_of(device_);
    if (allocate) {
      local_ =
          detail::make_view<view_type>(label, block_.ext, std::make_index_sequence<rank>{}, zero);
    }
  }

  shape_type shape_{};
  RuntimeTensorLayout layout_{std::vector<DimAxes>{}};
  std::vector<std::string> partial_;
  std::size_t device_ = 0;
  detail::Box<rank> block_{};
  view_type local_;
};

}  // namespace kdist
