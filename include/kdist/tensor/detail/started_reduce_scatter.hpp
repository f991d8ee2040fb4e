#pragma once
//! \file tensor/detail/started_reduce_scatter.hpp
//! A reduce_scatter step of kdist::redistribute (a pending sum resolved into a sharded layout: an
//! FSDP variable's gradient) started without blocking, for the training step's gradient sync
//! (kdist/nn/train/gradient_sync.hpp), which overlaps it with the rest of the backward pass as it
//! does its all-reduces. Part j of the summand is the block process j keeps (the j-th chunk of the
//! step's dimension); parts of dimension 0 are contiguous runs of the summand and go as they are,
//! others are packed first.
//! - In the summand's type: one MPI_Ireduce_scatter straight into the gradient's block, the sum
//!   kdist::redistribute's blocking reduce-scatter takes (bit for bit on 2 processes; on more, MPI
//!   may add in another order).
//! - Moving bfloat16 (GradientSyncOptions::bfloat16_sums, float32 only): each part rounded once
//!   to bfloat16, one MPI_Ialltoallv sends part j to process j, and each process sums the P
//!   contributions to its part in float32, in rank order, and keeps that float32 sum: half the
//!   bytes, and per element
//!     |sum - sum_p x_p| <= 2^-8 sum_p |x_p| + (P - 1) 2^-24 sum_p |x_p|
//!   (one rounding to nearest per contribution, then float32 additions).

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include <mpi.h>
#include <Kokkos_Core.hpp>

#include <kdist/core/bfloat16.hpp>
#include <kdist/core/redistribute_plan.hpp>
#include <kdist/parallel/collective_request.hpp>
#include <kdist/parallel/mesh_binding.hpp>
#include <kdist/tensor/detail/box.hpp>
#include <kdist/tensor/redistribute.hpp>

namespace kdist::detail {

//! What one started reduce-scatter keeps while it runs (MPI reads the counts and buffers until it
//! completes); kept from step to step by its owner, so that a step allocates nothing once seen.
template <class T>
struct StartedReduceScatter {
  std::vector<int> counts, displs;  //!< elements of each process's part; where each starts packed
  std::size_t mine = 0;             //!< elements of this process's part
  std::vector<T> packed;            //!< the summand's parts, one after the other, when packed
  //! bfloat16: the rounded parts; every process's contribution to this part, in rank order.
  std::vector<std::uint16_t> send, received;
  std::vector<int> received_counts, received_displs;
};

namespace started_reduce_scatter {
//! The summand of `t` with its parts one after the other: `t`'s own block (dimension 0, unless it
//! is `out`) or x.packed. Sets x's counts, displacements and `mine`.
template <class Tensor, class T = typename Tensor::value_type>
const T* parts_in_order(const RedistributeStep& step, const Tensor& t, std::size_t g,
                        std::size_t rank, const T* out, StartedReduceScatter<T>& x) {
  static_assert(
      Kokkos::SpaceAccessibility<Kokkos::HostSpace, typename Tensor::memory_space>::accessible,
      "kdist: a started reduce-scatter packs host memory");
  const auto parts = reduce_scatter_parts(step, t, g);
  x.counts.resize(g);
  x.displs.resize(g);
  std::size_t total = 0;
  for (std::size_t j = 0; j < g; ++j) {
    x.counts[j] = static_cast<int>(parts[j].volume());
    x.displs[j] = static_cast<int>(total);
    total += parts[j].volume();
  }
  x.mine = parts[rank].volume();
  const auto summand = t.local_summand();
  if (step.dim == 0 && summand.span_is_contiguous() && summand.data() != out) {
    return summand.data();
  }
  x.packed.resize(total);
  for (std::size_t j = 0; j < g; ++j) {
    copy_box(summand.data(), t.block(), x.packed.data() + x.displs[j], parts[j], parts[j]);
  }
  return x.packed.data();
}
}  // namespace started_reduce_scatter

//! Starts `step` (a reduce_scatter of plan_redistribute, made for the pending sum `t` in host
//! memory) summing into `out`, this process's block of the step's target layout (contiguous);
//! the sum is there when the request completes. `t`'s block is read until then.
template <class Tensor, class T = typename Tensor::value_type>
CollectiveRequest start_reduce_scatter(const RedistributeStep& step, const Tensor& t, T* out,
                                       StartedReduceScatter<T>& x) {
  const auto& comm = communicators(t.device_mesh()).comm(std::span<const std::string>(step.axes));
  const T* send =
      started_reduce_scatter::parts_in_order(step, t, static_cast<std::size_t>(comm.size()),
                                             static_cast<std::size_t>(comm.rank()), out, x);
  return start_reduce_scatter_v(send, out, x.counts.data(), comm.get(),
                                "kdist: MPI_Ireduce_scatter (a sharded gradient)");
}

//! As start_reduce_scatter, the float32 parts moving bfloat16 (see the file's comment); once the
//! request completes, finish_reduce_scatter_in_bfloat16 writes the sum. `t`'s block is read
//! before this returns.
template <class Tensor>
CollectiveRequest start_reduce_scatter_in_bfloat16(const RedistributeStep& step, const Tensor& t,
                                                   StartedReduceScatter<float>& x) {
  static_assert(std::is_same_v<typename Tensor::value_type, float>,
                "kdist: a bfloat16 reduce-scatter sums float32 gradients");
  const auto& comm = communicators(t.device_mesh()).comm(std::span<const std::string>(step.axes));
  const auto g = static_cast<std::size_t>(comm.size());
  const float* parts = started_reduce_scatter::parts_in_order(
      step, t, g, static_cast<std::size_t>(comm.rank()), static_cast<const float*>(nullptr), x);
  const auto total = static_cast<std::size_t>(x.displs.back() + x.counts.back());
  x.send.resize(total);
  for (std::size_t i = 0; i < total; ++i) x.send[i] = to_bfloat16_bits(parts[i]);
  x.received.resize(g * x.mine);
  x.received_counts.assign(g, static_cast<int>(x.mine));
  x.received_displs.resize(g);
  for (std::size_t p = 0; p < g; ++p) x.received_displs[p] = static_cast<int>(p * x.mine);
  return start_all_to_all_v(x.send.data(), x.counts.data(), x.displs.data(), x.received.data(),
                            x.received_counts.data(), x.received_displs.data(), MPI_UINT16_T,
                            comm.get(), "kdist: MPI_Ialltoallv (a sharded gradient in bfloat16)");
}

//! After start_reduce_scatter_in_bfloat16's request: `out` (x.mine elements, this process's block
//! of the target layout) is the float32 sum, in rank order, of the contributions to it.
inline void finish_reduce_scatter_in_bfloat16(const StartedReduceScatter<float>& x, float* out) {
  sum_bfloat16_runs(x.received.data(), x.received_counts.size(), x.mine, out);
}

}  // namespace kdist::detail
