#pragma once
//! \file tensor/redistribute.hpp
//! `kdist::redistribute(tensor, layout)`: the same global tensor in another layout, moving the
//! least data. The collective follows from the two layouts, as in PyTorch DTensor:
//!   shard -> replicated        all-gather (each device receives the blocks it lacks)
//!   replicated -> shard        local slice, no communication at all
//!   shard(i) -> shard(j)       all-to-all (each device sends each other exactly the overlap)
//!   partial -> replicated      all-reduce (sum of every pending contribution)
//!   partial -> shard           reduce-scatter (each device receives only its block's sums)
//! A partial tensor resolved into its own layout is one MPI_Allreduce, and into a layout that
//! shards one replicated dimension over exactly the partial axes one MPI_Reduce_scatter, both over
//! the partial axes' communicator; every other case is one MPI_Alltoallv of exactly the
//! overlapping boxes (summing partial contributions), or no MPI call when no device needs
//! another's data; an unchanged layout shares the block.

#include <algorithm>
#include <cstddef>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <mpi.h>
#include <Kokkos_Core.hpp>

#include <kdist/parallel/profiling_region.hpp>
#include <kdist/parallel/collectives.hpp>
#include <kdist/tensor/detail/exchange.hpp>
#include <kdist/tensor/distribute_tensor.hpp>
#include <kdist/core/error.hpp>
#include <kdist/parallel/mesh_binding.hpp>
#include <kdist/core/runtime_layout.hpp>
#include <kdist/tensor/tensor.hpp>

namespace kdist {

namespace detail {
template <class Tensor>
void check_same_mesh(const Tensor& t, const RuntimeTensorLayout& target) {
  if (!(*target.device_mesh() == t.device_mesh())) {
    std::vector<std::size_t> s(t.shape().begin(), t.shape().end());
    throw ValueError("kdist::redistribute: tensor of shape " + shape_repr(s) + " on " +
                     t.device_mesh().to_string() + " cannot move to layout " + target.to_string() +
                     ", which is on another mesh; redistribute within one mesh");
  }
}
//! The dimension a partial tensor `t` can be reduce-scattered along into `out`'s layout: `out`
//! equals `t`'s layout except that one dimension, replicated in `t`, is sharded over exactly the
//! mesh axes of the pending sum. Returns rank (no such dimension) otherwise.
template <class Tensor>
std::size_t reduce_scatter_dim(const Tensor& t, const RuntimeTensorLayout& out) {
  constexpr std::size_t R = Tensor::rank;
  if (!t.is_partial() || out.division() != t.layout().division()) return R;
  std::size_t found = R;
  for (std::size_t d = 0; d < R; ++d) {
    const auto& src = t.layout().axes()[d];
    const auto& dst = out.axes()[d];
    if (src == dst) continue;
    if (found != R || !src.is_replicated()) return R;
    auto names = dst.names();
    std::sort(names.begin(), names.end());
    if (names != t.partial_axes()) return R;
    found = d;
  }
  return found;
}
}  // namespace detail

//! Writes `t`, laid out as `out` is, into `out`'s existing local block (no allocation on the
//! all-reduce path, so a training step can reuse its gradient buffers), resolving pending sums.
//!
//! Errors (ValueError, on every process alike): `out` on another mesh or of another global shape.
template <class DataType, class MemorySpace>
void redistribute_into(const DistributedTensor<DataType, RuntimeTensorLayout, MemorySpace>& t,
                       DistributedTensor<DataType, RuntimeTensorLayout, MemorySpace>& out) {
  detail::ProfilingRegion region("kdist::redistribute");
  using Tensor = DistributedTensor<DataType, RuntimeTensorLayout, MemorySpace>;
  constexpr std::size_t R = Tensor::rank;
  detail::check_same_mesh(t, out.layout());
  if (out.shape() != t.shape() || out.is_partial()) {
    throw ValueError("kdist::redistribute_into: " + t.to_string() + " cannot be written into " +
                     out.to_string() + ": the global shapes differ or the target is partial");
  }
  const bool same_dims =
      out.layout().axes() == t.layout().axes() && out.layout().division() == t.layout().division();
  using space = typename MemorySpace::execution_space;
  const std::size_t scatter_dim = detail::reduce_scatter_dim(t, out.layout());
  if (scatter_dim < R && Kokkos::SpaceAccessibility<Kokkos::HostSpace, MemorySpace>::accessible) {
    // partial -> sharded over the partial axes: one MPI_Reduce_scatter over those axes, in the
    // order the target lists them (the group communicator ranks row-major over that list).
    const auto& names = out.layout().axes()[scatter_dim].names();
    const auto& comm = communicators(t.device_mesh()).comm(std::span<const std::string>(names));
    const std::size_t g = static_cast<std::size_t>(comm.size());
    std::vector<detail::Box<R>> parts(g, t.block());
    std::vector<int> counts(g);
    std::size_t total = 0;
    for (std::size_t j = 0; j < g; ++j) {
      const Block b = detail::chunk_block(t.shape()[scatter_dim], g, j);
      parts[j].lo[scatter_dim] = b.offset;
      parts[j].ext[scatter_dim] = b.extent;
      counts[j] = static_cast<int>(parts[j].volume());
      total += parts[j].volume();
    }
    Kokkos::fence();
    const auto* src = t.local_summand().data();
    std::vector<typename Tensor::value_type> packed;
    if (scatter_dim != 0) {  // blocks along dimension 0 are contiguous already
      packed.resize(total);
      std::size_t at = 0;
      for (std::size_t j = 0; j < g; ++j) {
        detail::copy_box(src, t.block(), packed.data() + at, parts[j], parts[j]);
        at += parts[j].volume();
      }
      src = packed.data();
    }
    MPI_Reduce_scatter(src, out.local().data(), counts.data(),
                       mpi::datatype<typename Tensor::value_type>(), MPI_SUM, comm.get());
  } else if (same_dims && t.is_partial()) {  // one all-reduce over the partial axes, into out
    const auto& comm =
        communicators(t.device_mesh()).comm(std::span<const std::string>(t.partial_axes()));
    if (out.local().data() == t.local_summand().data()) {
      all_reduce(space(), out.local(), ReduceOp::sum, comm);
    } else {
      all_reduce(space(), t.local_summand(), out.local(), ReduceOp::sum, comm);
    }
  } else if (same_dims) {  // nothing to move
    if (out.local().data() != t.local().data()) Kokkos::deep_copy(out.local(), t.local());
  } else {
    const std::size_t n = t.device_mesh().size();
    std::vector<detail::Box<R>> from, to;
    for (std::size_t d = 0; d < n; ++d) {
      from.push_back(t.block_of(d));
      to.push_back(out.block_of(d));
    }
    auto src = detail::host_local(t);
    auto dst = Kokkos::create_mirror_view(out.local());
    if (t.is_partial()) Kokkos::deep_copy(dst, typename Tensor::value_type(0));  // sums start at 0
    detail::SameReplica sender(t.device_mesh(),
                               detail::replicated_non_partial_axes(t.layout(), t.partial_axes()));
    detail::exchange<R>(
        src.data(), dst.data(), n, t.device(), [&](std::size_t s) { return from[s]; },
        [&](std::size_t d) { return to[d]; }, sender, t.is_partial(), MPI_COMM_WORLD,
        "kdist::redistribute");
    Kokkos::deep_copy(out.local(), dst);
  }
}

//! `t` laid out by `target` (on the same mesh), with pending sums resolved. An unchanged layout
//! shares `t`'s block; every other case writes a new block (see redistribute_into).
//!
//! Errors (ValueError, on every process alike): a target without a mesh or on another mesh, a
//! target of another rank, a shape the target's even-division rule forbids.
template <class DataType, class MemorySpace>
DistributedTensor<DataType, RuntimeTensorLayout, MemorySpace> redistribute(
    const DistributedTensor<DataType, RuntimeTensorLayout, MemorySpace>& t,
    RuntimeTensorLayout target) {
  using Tensor = DistributedTensor<DataType, RuntimeTensorLayout, MemorySpace>;
  if (!target.device_mesh()) target.set_device_mesh(t.device_mesh());
  detail::check_same_mesh(t, target);
  if (!t.is_partial() && target.axes() == t.layout().axes() &&
      target.division() == t.layout().division()) {
    return Tensor::from_local(t.local(), t.shape(), std::move(target));  // share the block
  }
  auto out = Tensor::uninitialized(t.shape(), std::move(target));
  redistribute_into(t, out);
  return out;
}

namespace error {
//! A typed tensor on mesh type `TensorMesh` redistributed to a layout on mesh type `LayoutMesh`
//! (each as `shape=(...), axis_names=[...]`).
template <class TensorMesh, class LayoutMesh>
struct redistribute_to_a_layout_of_another_mesh;
}  // namespace error

//! A typed tensor laid out by the static layout `target`, as a typed tensor (pending sums
//! resolved). A target on another mesh type, or of another rank, is a compile error naming both;
//! the run-time checks above still run (the same mesh type with other extents or devices).
//! Example: `auto y = kdist::redistribute(partial_y, y_layout);` (an all-reduce over 'model').
template <class DataType, class Layout, class MemorySpace, class Target>
requires(is_static_tensor_layout_v<Layout>&& is_tensor_layout_v<Target>)
    DistributedTensor<DataType, Target, MemorySpace> redistribute(
        const DistributedTensor<DataType, Layout, MemorySpace>& t, const Target& target) {
  using TensorMesh = typename DistributedTensor<DataType, Layout, MemorySpace>::mesh_type;
  static_assert(
      detail::diagnose<std::is_same_v<TensorMesh, typename Target::mesh_type>,
                       error::redistribute_to_a_layout_of_another_mesh<
                           detail::diagnostic_name<detail::mesh_repr_of<TensorMesh>::value>,
                           detail::diagnostic_name<
                               detail::mesh_repr_of<typename Target::mesh_type>::value>>>::value,
      "kdist::redistribute: the target layout is on another mesh type than the tensor");
  return DistributedTensor<DataType, Target, MemorySpace>(
      redistribute(t.runtime(), target.to_runtime()), target);
}

//! A typed tensor laid out by a run-time layout: a run-time tensor (the overload above on its
//! run-time tensor; spelled out for nvcc, whose front end cannot deduce the run-time base of a
//! typed tensor with static extents).
template <class DataType, class Layout, class MemorySpace>
requires(is_static_tensor_layout_v<Layout>) auto redistribute(
    const DistributedTensor<DataType, Layout, MemorySpace>& t, RuntimeTensorLayout target) {
  return redistribute(t.runtime(), std::move(target));
}

}  // namespace kdist
