#pragma once
//! \file redistribute.hpp
//! `kdist::redistribute(tensor, layout)`: the same global tensor in another layout, moving the
//! least data. The collective follows from the two layouts, as in PyTorch DTensor:
//!   shard -> replicated        all-gather (each device receives the blocks it lacks)
//!   replicated -> shard        local slice, no communication at all
//!   shard(i) -> shard(j)       all-to-all (each device sends each other exactly the overlap)
//!   partial -> replicated      all-reduce (sum of every pending contribution)
//!   partial -> shard           reduce-scatter (each device receives only its block's sums)
//! A partial tensor resolved into its own layout is one MPI_Allreduce over the partial axes'
//! communicator; every other case is one MPI_Alltoallv of exactly the overlapping boxes (summing
//! partial contributions), or no MPI call when no device needs another's data; an unchanged
//! layout shares the block.

#include <cstddef>
#include <vector>

#include <Kokkos_Core.hpp>
#include <mpi.h>

#include <kdist/collectives.hpp>
#include <kdist/detail/exchange.hpp>
#include <kdist/distribute_tensor.hpp>
#include <kdist/error.hpp>
#include <kdist/mesh_binding.hpp>
#include <kdist/runtime_layout.hpp>
#include <kdist/tensor.hpp>

namespace kdist {

//! `t` laid out by `target` (on the same mesh), with pending sums resolved.
//!
//! Errors (ValueError, on every process alike): a target without a mesh or on another mesh, a
//! target of another rank, a shape the target's even-division rule forbids.
template <class DataType, class MemorySpace>
DistributedTensor<DataType, MemorySpace> redistribute(const DistributedTensor<DataType, MemorySpace>& t,
                                                      RuntimeTensorLayout target) {
  Kokkos::Profiling::pushRegion("kdist::redistribute");
  using Tensor = DistributedTensor<DataType, MemorySpace>;
  constexpr std::size_t R = Tensor::rank;
  if (!target.device_mesh()) target.set_device_mesh(t.device_mesh());
  if (!(*target.device_mesh() == t.device_mesh())) {
    std::vector<std::size_t> s(t.shape().begin(), t.shape().end());
    throw ValueError("kdist::redistribute: tensor of shape " + detail::shape_repr(s) + " on " +
                     t.device_mesh().to_string() + " cannot move to layout " + target.to_string() +
                     ", which is on another mesh; redistribute within one mesh");
  }
  const bool same_dims = target.axes() == t.layout().axes() && target.division() == t.layout().division();
  if (same_dims && !t.is_partial()) {  // nothing to move: share the block
    Kokkos::Profiling::popRegion();
    return Tensor::from_local(t.local(), t.shape(), std::move(target));
  }
  if (same_dims) {  // partial -> the same layout: one all-reduce over the partial axes
    using view_type = typename Tensor::view_type;
    view_type sum(Kokkos::view_alloc(Kokkos::WithoutInitializing, "kdist::redistribute"),
                  t.local().layout());
    Kokkos::deep_copy(sum, t.local());
    const auto& comm = communicators(t.device_mesh()).comm(std::span<const std::string>(t.partial_axes()));
    all_reduce(typename MemorySpace::execution_space(), sum, ReduceOp::sum, comm);
    Kokkos::Profiling::popRegion();
    return Tensor::from_local(sum, t.shape(), std::move(target));
  }
  auto out = t.is_partial() ? Tensor::zeros(t.shape(), target) : Tensor::uninitialized(t.shape(), target);
  const std::size_t n = t.device_mesh().size();
  std::vector<detail::Box<R>> from, to;
  for (std::size_t d = 0; d < n; ++d) {
    from.push_back(t.block_of(d));
    to.push_back(out.block_of(d));
  }
  auto src = detail::host_local(t);
  auto dst = Kokkos::create_mirror_view(out.local());
  detail::SameReplica sender(t.device_mesh(),
                             detail::replicated_non_partial_axes(t.layout(), t.partial_axes()));
  detail::exchange<R>(
      src.data(), dst.data(), n, t.device(), [&](std::size_t s) { return from[s]; },
      [&](std::size_t d) { return to[d]; }, sender, t.is_partial(), MPI_COMM_WORLD,
      "kdist::redistribute");
  Kokkos::deep_copy(out.local(), dst);
  Kokkos::Profiling::popRegion();
  return out;
}

}  // namespace kdist
