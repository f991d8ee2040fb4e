#pragma once
//! \file tensor/redistribute.hpp
//! `kdist::redistribute(tensor, layout)`: the same global tensor in another layout, moving the
//! least data. Planning apart from execution, as in PyTorch DTensor: kdist::plan_redistribute
//! (core/redistribute_plan.hpp, pure, testable without MPI) chooses the step from the two layouts,
//! and this file runs it:
//!   nothing         an unchanged layout shares the block (or copies it into `out`'s)
//!   all_reduce      partial -> its own layout: one all-reduce over the partial axes'
//!                   communicator (kdist::all_reduce)
//!   reduce_scatter  partial -> one replicated dimension sharded over exactly the partial axes:
//!                   one reduce-scatter over their communicator (kdist::reduce_scatter)
//!   local_copy, all_gather, all_to_all
//!                   one MPI_Alltoallv of exactly the overlapping boxes (summing pending
//!                   contributions), or no MPI call when no device needs another's data
//! `kdist::plan_redistribute(t, target)` returns the plan for a tensor, to print.
//! `kdist::redistribute(t, target, views)` writes into Views a call site keeps from step to step
//! (kdist::ReusableViews), so a sharded training step allocates nothing once its shapes are seen.

#include <algorithm>
#include <array>
#include <cstddef>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <mpi.h>
#include <Kokkos_Core.hpp>

#include <kdist/core/bfloat16.hpp>
#include <kdist/core/concepts.hpp>
#include <kdist/core/error.hpp>
#include <kdist/core/redistribute_plan.hpp>
#include <kdist/core/runtime_layout.hpp>
#include <kdist/parallel/collectives.hpp>
#include <kdist/parallel/detail/host_scratch.hpp>
#include <kdist/parallel/mesh_binding.hpp>
#include <kdist/parallel/profiling_region.hpp>
#include <kdist/tensor/detail/exchange.hpp>
#include <kdist/tensor/distribute_tensor.hpp>
#include <kdist/tensor/reusable_views.hpp>
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

//! The plan that moves `t` to `target` (which has a mesh, the tensor's).
template <class Tensor>
RedistributePlan plan_for(const Tensor& t, const RuntimeTensorLayout& target) {
  return kdist::plan_redistribute(t.layout(), t.partial_axes(), target,
                                  std::span<const std::size_t>(t.shape().data(), t.shape().size()));
}

//! The reduce_scatter step: `out`'s block of the sum over `step.axes` of `t`'s summands, which
//! hold the whole of dimension `step.dim`. One kdist::reduce_scatter over those axes'
//! communicator (ranked row-major over them in the order listed, as the target's shards are).
//! Blocks of dimension 0 that the shards divide evenly go straight from the summand to `out`;
//! otherwise each device's part is packed into a slot of ceil-division size on the host (the
//! padding of trailing smaller blocks is zero and dropped on receipt). The host memory it packs in
//! (and copies device blocks through) is host scratch, kept from call to call.
//! The parts of `t`'s block that a reduce_scatter step sums into each of the `g` processes of its
//! communicator (rank j's: the j-th chunk of dimension `step.dim`); the first is the largest.
template <class Tensor>
std::vector<Box<Tensor::rank>> reduce_scatter_parts(const RedistributeStep& step, const Tensor& t,
                                                    std::size_t g) {
  std::vector<Box<Tensor::rank>> parts(g, t.block());
  for (std::size_t j = 0; j < g; ++j) {
    const Block b = chunk_block(t.shape()[step.dim], g, j);
    parts[j].lo[step.dim] = b.offset;
    parts[j].ext[step.dim] = b.extent;
  }
  return parts;
}

template <class Tensor>
void run_reduce_scatter(const RedistributeStep& step, const Tensor& t, Tensor& out) {
  using T = typename Tensor::value_type;
  using space = typename Tensor::memory_space::execution_space;
  const auto& comm = communicators(t.device_mesh()).comm(std::span<const std::string>(step.axes));
  const std::size_t g = static_cast<std::size_t>(comm.size());
  const std::size_t d = step.dim;
  const auto parts = reduce_scatter_parts(step, t, g);
  bool equal = true;
  for (const auto& part : parts) equal = equal && part.volume() == parts[0].volume();
  if (equal && d == 0) {  // the parts are contiguous runs of the summand, of one size
    kdist::reduce_scatter(space(), t.local_summand(), out.local(), ReduceOp::sum, comm);
    return;
  }
  const std::size_t slot = parts[0].volume();  // ceil division: the first part is the largest
  // send: the g parts, each in a slot; recv: this process's part when they differ in size.
  using HostView = Kokkos::View<T*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
  T* scratch = host_scratch<T, HostScratch::pack>(slot * (g + 1));
  const HostView send(scratch, slot * g);
  Kokkos::fence();
  auto src = host_local_in_scratch(t);
  for (std::size_t j = 0; j < g; ++j) {
    if (parts[j].volume() < slot) {
      std::fill(send.data() + j * slot + parts[j].volume(), send.data() + (j + 1) * slot, T(0));
    }
    copy_box(src.data(), t.block(), send.data() + j * slot, parts[j], parts[j]);
  }
  auto dst = host_view_in_scratch<HostScratch::target>(out.local());
  if (equal) {
    kdist::reduce_scatter(Kokkos::DefaultHostExecutionSpace(), send,
                          HostView(dst.data(), dst.size()), ReduceOp::sum, comm);
  } else {
    const HostView recv(scratch + slot * g, slot);
    kdist::reduce_scatter(Kokkos::DefaultHostExecutionSpace(), send, recv, ReduceOp::sum, comm);
    std::copy_n(recv.data(), dst.size(), dst.data());
  }
  Kokkos::deep_copy(out.local(), dst);
  count_staged<typename Tensor::memory_space>(dst.span() * sizeof(T));
}

//! run_exchange with `mover`: a DeviceMover works on the blocks in their memory, a HostMover on
//! host copies of them (the blocks themselves when the host can read them).
template <class Mover, class Tensor>
void run_exchange_with(const Mover& mover, const Tensor& t, Tensor& out) {
  constexpr std::size_t R = Tensor::rank;
  using T = typename Tensor::value_type;
  const std::size_t n = t.device_mesh().size();
  std::vector<Box<R>> from, to;
  for (std::size_t d = 0; d < n; ++d) {
    from.push_back(t.block_of(d));
    to.push_back(out.block_of(d));
  }
  SameReplica sender(t.device_mesh(), replicated_non_partial_axes(t.layout(), t.partial_axes()));
  const auto run = [&](const T* src, T* dst) {
    exchange<R>(
        mover, src, dst, n, t.device(), [&](std::size_t s) { return from[s]; },
        [&](std::size_t d) { return to[d]; }, sender, t.is_partial(), kdist::communicator(),
        "kdist::redistribute");
  };
  if constexpr (std::is_same_v<Mover, HostMover>) {
    auto src = host_local_in_scratch(t);
    auto dst = host_view_in_scratch<HostScratch::target>(out.local());
    if (t.is_partial()) Kokkos::deep_copy(dst, T(0));  // sums start at 0
    run(src.data(), dst.data());
    Kokkos::deep_copy(out.local(), dst);
    count_staged<typename Tensor::memory_space>(dst.span() * sizeof(T));
  } else {
    if (t.is_partial()) Kokkos::deep_copy(mover.exec, out.local(), T(0));  // sums start at 0
    run(t.local_summand().data(), out.local().data());
  }
}

//! The local_copy, all_gather and all_to_all steps: one exchange of exactly the overlapping
//! boxes (summing the contributions of a pending sum), no MPI call when nothing is remote. Host
//! blocks are exchanged where they are; device blocks in device memory with Kokkos kernels when
//! MPI takes device pointers (`Direct`: kdist::mpi::gpu_aware(), or forced by tests on host
//! memory), else through host copies.
template <class Tensor>
void run_exchange(const Tensor& t, Tensor& out) {
  using Memory = typename Tensor::memory_space;
  if constexpr (!Kokkos::SpaceAccessibility<Kokkos::HostSpace, Memory>::accessible) {
    if (mpi::gpu_aware()) {
      run_exchange_with(DeviceMover<typename Memory::execution_space>{}, t, out);
      return;
    }
  }
  run_exchange_with(HostMover{}, t, out);
}

//! Runs `plan` (made for `t` and `out`'s layout) from `t` into `out`'s block.
template <class Tensor>
void run_plan(const RedistributePlan& plan, const Tensor& t, Tensor& out) {
  using Kind = RedistributeStep::Kind;
  using space = typename Tensor::memory_space::execution_space;
  if constexpr (!sums_in_place_v<typename Tensor::value_type>) {
    if (t.is_partial()) {
      throw ValueError(
          "kdist::redistribute: the tensor is a pending sum of 16-bit values (bfloat16, float16); "
          "kdist sums in "
          "float32 (as Keras' mixed policies accumulate): compute the partial products in float "
          "and cast the resolved sum (kdist::cast<kdist::bfloat16>, kdist::cast<kdist::float16>)");
    }
  }
  if (plan.steps.size() != 1) {  // every plan plan_redistribute makes today has one step
    throw ValueError("kdist::redistribute: cannot run " + plan.to_string() +
                     ": a plan of one step was expected");
  }
  const RedistributeStep& step = plan.steps.front();
  switch (step.kind) {
    case Kind::nothing:
      // Ordered on the execution space's stream, not fenced: the step's next kernels follow it
      // there, and a step captured as a device graph may not wait for the device.
      if (out.local().data() != t.local().data()) {
        Kokkos::deep_copy(space(), out.local(), t.local());
      }
      return;
    case Kind::all_reduce: {
      if constexpr (sums_in_place_v<typename Tensor::value_type>) {
        const auto& comm =
            communicators(t.device_mesh()).comm(std::span<const std::string>(step.axes));
        if (out.local().data() == t.local_summand().data()) {
          kdist::all_reduce(space(), out.local(), ReduceOp::sum, comm);
        } else {
          kdist::all_reduce(space(), t.local_summand(), out.local(), ReduceOp::sum, comm);
        }
      }
      return;
    }
    case Kind::reduce_scatter:
      if constexpr (sums_in_place_v<typename Tensor::value_type>) run_reduce_scatter(step, t, out);
      return;
    case Kind::local_copy:
    case Kind::all_gather:
    case Kind::all_to_all:
      run_exchange(t, out);
      return;
  }
}

//! `t` laid out by `target`: shares `t`'s block when the layout is unchanged, else runs the plan
//! into a block of the target's local extents from `make_block(extents)`.
template <class Tensor, class MakeBlock>
Tensor redistribute_with(const Tensor& t, RuntimeTensorLayout target, MakeBlock&& make_block) {
  detail::ProfilingRegion region("kdist::redistribute");
  if (!target.device_mesh()) target.set_device_mesh(t.device_mesh());
  check_same_mesh(t, target);
  const RedistributePlan plan = plan_for(t, target);
  if (plan.steps.size() == 1 && plan.steps.front().kind == RedistributeStep::Kind::nothing) {
    return Tensor::from_local(t.local(), t.shape(), std::move(target));  // share the block
  }
  std::array<std::size_t, Tensor::rank> extents{};
  const auto local = target.local_extents(t.shape(), t.device());
  std::copy(local.begin(), local.end(), extents.begin());
  auto out = Tensor::from_local(make_block(extents, std::make_index_sequence<Tensor::rank>()),
                                t.shape(), std::move(target));
  run_plan(plan, t, out);
  return out;
}
}  // namespace detail

//! The plan kdist::redistribute follows to move `t` to `target` (a target without a mesh takes
//! the tensor's), to print: `std::cout << kdist::plan_redistribute(y, y.layout())` shows
//! `<RedistributePlan (None, None) partial=['model'] -> (None, None): all_reduce(sum) over
//! ['model']>`. No communication.
//!
//! Errors (ValueError): a target on another mesh, of another rank, or one whose even-division
//! rule the shape breaks.
template <class DataType, class MemorySpace>
RedistributePlan plan_redistribute(
    const DistributedTensor<DataType, RuntimeTensorLayout, MemorySpace>& t,
    RuntimeTensorLayout target) {
  detail::ProfilingRegion region("kdist::plan_redistribute");
  if (!target.device_mesh()) target.set_device_mesh(t.device_mesh());
  detail::check_same_mesh(t, target);
  return detail::plan_for(t, target);
}

//! Writes `t`, laid out as `out` is, into `out`'s existing local block (no allocation on the
//! all-reduce path, so a training step can reuse its gradient buffers), resolving pending sums:
//! the plan of kdist::plan_redistribute, run.
//!
//! Errors (ValueError, on every process alike): `out` on another mesh or of another global shape.
template <class DataType, class MemorySpace>
void redistribute_into(const DistributedTensor<DataType, RuntimeTensorLayout, MemorySpace>& t,
                       DistributedTensor<DataType, RuntimeTensorLayout, MemorySpace>& out) {
  detail::ProfilingRegion region("kdist::redistribute");
  detail::check_same_mesh(t, out.layout());
  if (out.shape() != t.shape() || out.is_partial()) {
    throw ValueError("kdist::redistribute_into: " + t.to_string() + " cannot be written into " +
                     out.to_string() + ": the global shapes differ or the target is partial");
  }
  detail::run_plan(detail::plan_for(t, out.layout()), t, out);
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
  return detail::redistribute_with<Tensor>(
      t, std::move(target),
      []<std::size_t... D>(const std::array<std::size_t, Tensor::rank>& ext,
                           std::index_sequence<D...>) {
        return typename Tensor::view_type(
            Kokkos::view_alloc(Kokkos::WithoutInitializing, "kdist::redistribute"), ext[D]...);
      });
}

//! As redistribute(t, target), writing a block it does not share into one of `views` (a
//! kdist::ReusableViews: a kept View that nothing else references, else a new one): the same
//! values, and no allocation once a call site's shapes are seen. Example, in a layer's forward:
//! `x_ = redistribute(x, compute_layout, x_views_);` with a member
//! `kdist::ReusableViews<typename Tensor3::view_type> x_views_;`.
template <class DataType, class MemorySpace, std::size_t Slots>
DistributedTensor<DataType, RuntimeTensorLayout, MemorySpace> redistribute(
    const DistributedTensor<DataType, RuntimeTensorLayout, MemorySpace>& t,
    RuntimeTensorLayout target,
    ReusableViews<typename DistributedTensor<DataType, RuntimeTensorLayout, MemorySpace>::view_type,
                  Slots>& views) {
  using Tensor = DistributedTensor<DataType, RuntimeTensorLayout, MemorySpace>;
  return detail::redistribute_with<Tensor>(
      t, std::move(target),
      [&]<std::size_t... D>(const std::array<std::size_t, Tensor::rank>& ext,
                            std::index_sequence<D...>) {
        return views.get("kdist::redistribute", ext[D]...);
      });
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
template <class DataType, TypedTensorLayout Layout, class MemorySpace, StaticLayout Target>
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
template <class DataType, TypedTensorLayout Layout, class MemorySpace>
auto redistribute(const DistributedTensor<DataType, Layout, MemorySpace>& t,
                  RuntimeTensorLayout target) {
  return redistribute(t.runtime(), std::move(target));
}

//! The plan for a typed tensor (its run-time form's) to a run-time layout.
template <class DataType, TypedTensorLayout Layout, class MemorySpace>
RedistributePlan plan_redistribute(const DistributedTensor<DataType, Layout, MemorySpace>& t,
                                   RuntimeTensorLayout target) {
  return plan_redistribute(t.runtime(), std::move(target));
}

//! The plan for any tensor to a static layout: `kdist::plan_redistribute(y, y_layout)`.
template <class DataType, class Layout, class MemorySpace, StaticLayout Target>
RedistributePlan plan_redistribute(const DistributedTensor<DataType, Layout, MemorySpace>& t,
                                   const Target& target) {
  return plan_redistribute(t, target.to_runtime());
}

}  // namespace kdist
