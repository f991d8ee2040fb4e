#pragma once
//! \file parallel/bfloat16_all_reduce.hpp
//! `kdist::all_reduce_in_bfloat16`: the sum (or mean) of a float32 View over the processes of a
//! communicator with half the bytes of `kdist::all_reduce`, for gradients on slow links (issue 37:
//! "16-bit collectives"). Each process sends its values rounded to bfloat16 and each sum is
//! accumulated in float32 at its owner, as a reduce-scatter then an all-gather:
//!   1. every value rounded to bfloat16 (core/bfloat16.hpp), the View cut into one block per
//!      process (the last padded with zeros);
//!   2. `all_to_all`: process r receives block r of every process;
//!   3. process r adds them in float32, in rank order, and rounds the sum (or mean) to bfloat16;
//!   4. `all_gather` of those blocks; every process converts them back into `data`.
//! Each process sends and receives 2 (P - 1) / P bytes per element in each of steps 2 and 4, where a
//! ring or tree all-reduce of float32 moves about twice that. Every process ends with the same bits.
//!
//! Rounding: each contribution x_p is rounded once (relative error <= 2^-8), the float32 sum adds
//! at most (P - 1) 2^-24 |sum|-sized errors, and the result is rounded once more, so
//!   |result - sum_p x_p| <= 2^-8 (sum_p |x_p|) + 2^-8 |sum_p x_p| (1 + 2^-8) + P 2^-24 sum_p |x_p|,
//! about 2^-7 of the magnitudes summed: a bfloat16 sum, not a float32 one. Values whose sum is
//! exact in bfloat16 (small integers, powers of two) come back exact.

#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include <Kokkos_Core.hpp>

#include <kdist/core/bfloat16.hpp>
#include <kdist/core/error.hpp>
#include <kdist/parallel/collectives.hpp>
#include <kdist/parallel/concepts.hpp>
#include <kdist/parallel/detail/host_scratch.hpp>
#include <kdist/parallel/mpi/communicator.hpp>

namespace kdist {

namespace detail {

//! `count` bfloat16 bits in memory `Memory` for one call of all_reduce_in_bfloat16: the thread's
//! host scratch for `Use` where the host reaches `Memory` (nothing allocated once the largest call
//! has run), else a View allocated for the call and kept alive in `owned`.
template <class Memory>
using Bfloat16Bits = Kokkos::View<std::uint16_t*, Kokkos::LayoutRight, Memory,
                                  Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
template <HostScratch Use, class Space, class Memory>
Bfloat16Bits<Memory> bfloat16_buffer(
    const Space& space,
    std::vector<Kokkos::View<std::uint16_t*, Kokkos::LayoutRight, Memory>>& owned,
    std::int64_t count) {
  const auto n = static_cast<std::size_t>(count);
  if constexpr (Kokkos::SpaceAccessibility<Kokkos::HostSpace, Memory>::accessible) {
    return Bfloat16Bits<Memory>(host_scratch<std::uint16_t, Use>(n), n);
  } else {
    owned.emplace_back(Kokkos::view_alloc(space, Kokkos::WithoutInitializing, "kdist::bf16"), n);
    return Bfloat16Bits<Memory>(owned.back().data(), n);
  }
}

}  // namespace detail

//! Sums (ReduceOp::sum) or averages (ReduceOp::mean) the float32 View `data` over the processes
//! of `comm`, in place, moving bfloat16 (see the file comment for the order and the rounding).
//! `data` is a contiguous View of float of any rank, in any memory space `space` can reach; the
//! same size on every process. Collective. Errors: kdist::ValueError for another ReduceOp (max
//! and min need no 16-bit form: use kdist::all_reduce) or a View that is not contiguous, before
//! any communication; kdist::RuntimeError when MPI fails.
template <KokkosExecutionSpace Space, KokkosView View, MpiCommunicator Comm>
void all_reduce_in_bfloat16(const Space& space, const View& data, ReduceOp op, const Comm& comm) {
  static_assert(std::is_same_v<typename View::non_const_value_type, float> &&
                    !std::is_const_v<typename View::value_type>,
                "kdist::all_reduce_in_bfloat16: the View must hold (non-const) float: it sums "
                "float32 values moved as bfloat16");
  constexpr const char* who = "kdist::all_reduce_in_bfloat16";
  if (op != ReduceOp::sum && op != ReduceOp::mean) {
    throw ValueError(std::string(who) +
                     ": only ReduceOp::sum and ReduceOp::mean are summed in bfloat16; for max "
                     "or min use kdist::all_reduce (no rounding)");
  }
  if (!data.span_is_contiguous()) {
    throw ValueError(std::string(who) +
                     ": the View is not contiguous; pass a contiguous View "
                     "(a LayoutRight or LayoutLeft View, not a strided subview)");
  }
  using Memory = typename View::memory_space;
  using Policy = Kokkos::RangePolicy<Space, Kokkos::IndexType<std::int64_t>>;
  const std::int64_t n = static_cast<std::int64_t>(data.size());
  const std::int64_t processes = detail::collectives::size_of(comm);
  const std::int64_t block = (n + processes - 1) / processes;
  const Kokkos::View<float*, Kokkos::LayoutRight, Memory, Kokkos::MemoryTraits<Kokkos::Unmanaged>>
      flat(data.data(), static_cast<std::size_t>(n));

  std::vector<Kokkos::View<std::uint16_t*, Kokkos::LayoutRight, Memory>> owned;
  using detail::HostScratch;
  const auto send =
      detail::bfloat16_buffer<HostScratch::bfloat16_send>(space, owned, block * processes);
  const auto blocks =
      detail::bfloat16_buffer<HostScratch::bfloat16_blocks>(space, owned, block * processes);
  const auto mine = detail::bfloat16_buffer<HostScratch::bfloat16_sums>(space, owned, block);
  Kokkos::parallel_for(
      "kdist::all_reduce_in_bfloat16::round", Policy(space, 0, block * processes),
      KOKKOS_LAMBDA(const std::int64_t i) { send(i) = i < n ? to_bfloat16_bits(flat(i)) : 0; });
  all_to_all(space, send, blocks, comm);  // block p of `blocks`: process p's values of my block
  const float scale = op == ReduceOp::mean ? 1.0F / static_cast<float>(processes) : 1.0F;
  Kokkos::parallel_for(
      "kdist::all_reduce_in_bfloat16::add", Policy(space, 0, block),
      KOKKOS_LAMBDA(const std::int64_t k) {
        float sum = 0.0F;
        for (std::int64_t p = 0; p < processes; ++p)
          sum += from_bfloat16_bits(blocks(p * block + k));
        mine(k) = to_bfloat16_bits(sum * scale);
      });
  all_gather(space, mine, blocks, comm);  // every process's sums, in rank order
  Kokkos::parallel_for(
      "kdist::all_reduce_in_bfloat16::unpack", Policy(space, 0, n),
      KOKKOS_LAMBDA(const std::int64_t i) { flat(i) = from_bfloat16_bits(blocks(i)); });
  space.fence();
}

}  // namespace kdist
