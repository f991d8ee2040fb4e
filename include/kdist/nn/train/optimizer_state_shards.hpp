#pragma once
//! \file nn/train/optimizer_state_shards.hpp
//! Optimizer state sharded over the data-parallel processes (ZeRO stage 1; PyTorch's
//! ZeroRedundancyOptimizer, DeepSpeed's `zero_optimization.stage = 1`): a variable replicated over
//! the batch axis keeps its full value on every process, but each of the P processes along that
//! axis holds the optimizer state (Adam's m and v) of one part of its block only, 1/P of it. A
//! step then
//! 1. reduce-scatters the gradient (each process receives the sum of its part only, the same bytes
//!    on the wire as half an all-reduce),
//! 2. updates its part of the variable with its part of the state (1/P of the optimizer's work),
//! 3. all-gathers the updated parts, so that every replica holds the whole variable again.
//!
//! `detail::StateShard` is one process's part of one block: the parts are contiguous runs of the
//! block's elements in memory order, in rank order along the communicator, as equal as possible
//! in whole 64-byte lines (16 floats): each part starts on a cache line, so the optimizer's
//! vectorised loop splits a part into the same vector body and scalar ends as it splits the whole
//! block (the same bits: GCC contracts the scalar ends into FMAs, the vector body not), and no two
//! processes' parts share a line.
//!
//! Small variables, whose gradients share buckets (GradientSyncOptions::bucket_bytes), are not
//! split: each is *owned* whole by one process (PyTorch's ZeroRedundancyOptimizer partitions
//! parameters so), the owners chosen to balance the bytes (`assign_owners`). Their bucket is
//! all-reduced as without sharding, the owner alone updates the variable and keeps its state, and
//! one all-gather per step brings every owner's updated variables to every process
//! (GradientSync::gather_owned): a few collectives a step for any number of small variables,
//! where splitting each would cost two of its own (38 small gradients in the GPT of
//! docs/benchmarks.md).
//!
//! The training step decides which variables are sharded and keeps their state
//! (kdist/nn/train/optimizer_state.hpp); the gradient sync starts the collectives
//! (kdist/nn/train/gradient_sync.hpp).

#include <mpi.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <kdist/core/bfloat16.hpp>
#include <kdist/core/error.hpp>
#include <kdist/parallel/collective_request.hpp>
#include <kdist/parallel/mpi/communicator.hpp>
#include <kdist/parallel/mpi/datatype.hpp>
#include <limits>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace kdist::detail {

//! One process's part of a variable's block whose optimizer state is sharded over `comm`.
struct StateShard {
  MPI_Comm comm = MPI_COMM_NULL;
  //! The mesh axes `comm` spans: the parts of a block are counted once per replica of the block
  //! along the other axes (the global norm of clipping).
  std::vector<std::size_t> mesh_axes;
  std::vector<int> counts;   //!< elements of each process's part, in rank order
  std::vector<int> offsets;  //!< where each part starts in the block
  int part = 0;              //!< this process's rank in `comm`: its part
  //! What each process sends this one in a bfloat16 reduce-scatter (its part's size from each),
  //! and where it lands: rank p's at p * size() (start_reduce_scatter_part_in_bfloat16).
  std::vector<int> received_counts, received_offsets;
  //! The block is not split: one process owns all of it (counts is the block's size at the
  //! owner, 0 elsewhere; every offset 0), its gradient all-reduced whole (it shares a bucket).
  bool owned_whole = false;

  std::size_t begin() const { return static_cast<std::size_t>(offsets[part]); }
  std::size_t size() const { return static_cast<std::size_t>(counts[part]); }
  //! The rank in `comm` of the process that updates the block (owned_whole).
  int owner() const {
    return static_cast<int>(
        std::find_if(counts.begin(), counts.end(), [](int c) { return c > 0; }) - counts.begin());
  }
};

//! The parts of a block of `n` elements of `element_bytes` each over the processes of `comm`
//! (spanning `mesh_axes`). Errors: kdist::ValueError for a block too large for MPI's int counts.
inline StateShard make_state_shard(std::size_t n, std::size_t element_bytes, MPI_Comm comm,
                                   std::vector<std::size_t> mesh_axes) {
  if (n > static_cast<std::size_t>(std::numeric_limits<int>::max())) {
    throw ValueError("kdist: a variable block of " + std::to_string(n) +
                     " elements is too large to shard its optimizer state (MPI counts are int); "
                     "turn GradientSyncOptions::shard_optimizer_state off");
  }
  StateShard s;
  s.comm = comm;
  s.mesh_axes = std::move(mesh_axes);
  const auto processes = mpi::Communicator::borrow(comm);
  const int size = processes.size();
  s.part = processes.rank();
  const auto p = static_cast<std::size_t>(size);
  const std::size_t line = std::max<std::size_t>(1, 64 / element_bytes);  // elements per line
  const std::size_t lines = (n + line - 1) / line;
  std::size_t offset = 0;
  for (std::size_t i = 0; i < p; ++i) {
    const std::size_t count = std::min(n - offset, (lines / p + (i < lines % p ? 1 : 0)) * line);
    s.counts.push_back(static_cast<int>(count));
    s.offsets.push_back(static_cast<int>(offset));
    offset += count;
  }
  s.received_counts.assign(p, s.counts[static_cast<std::size_t>(s.part)]);
  for (std::size_t i = 0; i < p; ++i) {
    s.received_offsets.push_back(static_cast<int>(i) * s.counts[static_cast<std::size_t>(s.part)]);
  }
  return s;
}

//! The block of `n` elements owned whole by the process of rank `owner` in `comm` (spanning
//! `mesh_axes`): a small variable's (see the file's comment).
inline StateShard make_owned_state_shard(std::size_t n, int owner, MPI_Comm comm,
                                         std::vector<std::size_t> mesh_axes) {
  StateShard s;
  s.comm = comm;
  s.mesh_axes = std::move(mesh_axes);
  s.owned_whole = true;
  const auto processes = mpi::Communicator::borrow(comm);
  const int size = processes.size();
  s.part = processes.rank();
  s.counts.assign(static_cast<std::size_t>(size), 0);
  s.offsets.assign(static_cast<std::size_t>(size), 0);
  s.counts.at(static_cast<std::size_t>(owner)) = static_cast<int>(n);
  return s;
}

//! ZeRO-1 on a variable (`path`) in device memory (`device_memory`) runs on an MPI whose
//! non-blocking collectives take device pointers (`non_blocking`), without bfloat16_sums (its
//! rounding runs on the host). Errors: kdist::ValueError saying which is missing.
inline void check_state_sharding_memory(bool device_memory, bool non_blocking, bool bfloat16_sums,
                                        const std::string& path) {
  if (!device_memory || (non_blocking && !bfloat16_sums)) return;
  throw ValueError(
      "kdist::GradientSyncOptions::shard_optimizer_state (KDIST_SHARD_OPTIMIZER_STATE) on "
      "variables in device memory (" +
      path + ") needs " +
      (bfloat16_sums ? std::string("bfloat16_sums off (its rounding runs on the host)")
                     : std::string("an MPI whose non-blocking collectives take device pointers "
                                   "(kdist::mpi::gpu_aware_non_blocking(): KDIST_MPI_GPU_AWARE=1 "
                                   "or a GPU-aware MPICH)")) +
      "; else turn it off");
}

//! Owners for blocks of `sizes` bytes among `processes` processes, balancing the bytes each one
//! updates: the largest block first, each to the process with the fewest bytes so far (the
//! lowest rank on a tie). The same sizes give the same owners on every process.
inline std::vector<int> assign_owners(const std::vector<std::size_t>& sizes, int processes) {
  std::vector<std::size_t> order(sizes.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return sizes[a] > sizes[b]; });
  std::vector<std::size_t> load(static_cast<std::size_t>(std::max(processes, 1)), 0);
  std::vector<int> owners(sizes.size(), 0);
  for (const std::size_t i : order) {
    const auto least = std::min_element(load.begin(), load.end()) - load.begin();
    owners[i] = static_cast<int>(least);
    load[static_cast<std::size_t>(least)] += sizes[i];
  }
  return owners;
}

//! Starts summing `summand` (a whole block) over the shard's processes into `part` (this
//! process's part: s.size() elements, not inside `summand`; MPI_Ireduce_scatter). Host or device
//! memory (the latter for an MPI whose non-blocking collectives take device pointers). The shard
//! outlives the request (MPI reads its counts until then).
template <class T>
CollectiveRequest start_reduce_scatter_part(const T* summand, T* part, const StateShard& s) {
  return start_reduce_scatter_v(summand, part, s.counts.data(), s.comm,
                                "kdist: MPI_Ireduce_scatter (optimizer state sharding)");
}

//! How many bfloat16 elements of scratch start_reduce_scatter_part_in_bfloat16 needs for the
//! shard `s`: the whole block rounded, then every process's contribution to this part.
inline std::size_t bfloat16_part_scratch(const StateShard& s) {
  return static_cast<std::size_t>(s.offsets.back() + s.counts.back()) + s.counts.size() * s.size();
}

//! start_reduce_scatter_part moving bfloat16 (GradientSyncOptions::bfloat16_sums): rounds the
//! whole block `summand` (float32) into `scratch` (bfloat16_part_scratch(s) elements) and starts
//! sending part p to process p (MPI_Ialltoallv), half the bytes of a float32 reduce-scatter. Once
//! the request completes, add_bfloat16_part sums the contributions in float32 into this
//! process's part; the sum stays float32 (no second rounding: the owner's optimizer reads it), so
//!   |part - sum_p x_p| <= 2^-8 sum_p |x_p| + (P - 1) 2^-24 sum_p |x_p|
//! for P processes (each contribution rounded once, to nearest). `summand` may be the block
//! itself: it is read before this returns. `scratch` and the shard outlive the request.
inline CollectiveRequest start_reduce_scatter_part_in_bfloat16(const float* summand,
                                                               const StateShard& s,
                                                               std::span<std::uint16_t> scratch) {
  const auto n = static_cast<std::size_t>(s.offsets.back() + s.counts.back());
  for (std::size_t i = 0; i < n; ++i) scratch[i] = to_bfloat16_bits(summand[i]);
  return start_all_to_all_v(scratch.data(), s.counts.data(), s.offsets.data(), scratch.data() + n,
                            s.received_counts.data(), s.received_offsets.data(), MPI_UINT16_T,
                            s.comm, "kdist: MPI_Ialltoallv (optimizer state sharding, bfloat16)");
}

//! After start_reduce_scatter_part_in_bfloat16's request: this process's part of `block` is the
//! float32 sum, in rank order, of the bfloat16 contributions in `scratch`.
inline void add_bfloat16_part(float* block, const StateShard& s,
                              std::span<const std::uint16_t> scratch) {
  const auto n = static_cast<std::size_t>(s.offsets.back() + s.counts.back());
  sum_bfloat16_runs(scratch.data() + n, s.counts.size(), s.size(), block + s.begin());
}

//! Starts gathering every process's part of `block` into every process's `block`, in place
//! (MPI_Iallgatherv). The shard outlives the request.
template <class T>
CollectiveRequest start_all_gather_parts(T* block, const StateShard& s) {
  return start_all_gather_v_in_place(block, s.counts.data(), s.offsets.data(), mpi::datatype<T>(),
                                     s.comm, "kdist: MPI_Iallgatherv (optimizer state sharding)");
}

}  // namespace kdist::detail
