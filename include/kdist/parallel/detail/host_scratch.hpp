#pragma once
//! \file parallel/detail/host_scratch.hpp
//! Host memory that a blocking call borrows while it runs: one buffer per thread, value type and
//! use, that grows to the largest request and is kept (as Megatron-LM's global memory buffer). A
//! step that stages device memory through the host for MPI, or packs messages on the host,
//! allocates nothing once its largest call has run. Each use has its own buffer, so the buffers
//! one call holds at once (a redistribution's host copies of its source and target, its packed
//! messages, the collective's staging) never overlap. Never for non-blocking collectives: their
//! buffers outlive the call.

#include <Kokkos_Core.hpp>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

namespace kdist::detail {

//! What host scratch is borrowed for (one buffer per use, thread and value type).
enum class HostScratch {
  source,           //!< a redistribution's host copy of its input block
  target,           //!< a redistribution's host copy of its output block
  pack,             //!< messages packed for a reduce-scatter or an exchange
  unpack,           //!< messages received before they are placed
  mpi_send,         //!< a collective's host copy of a device View it sends
  mpi_recv,         //!< a collective's host copy of a device View it receives into
  bfloat16_send,    //!< all_reduce_in_bfloat16's rounded values (bfloat16_all_reduce.hpp)
  bfloat16_blocks,  //!< all_reduce_in_bfloat16's received blocks, then its gathered sums
  bfloat16_sums,    //!< all_reduce_in_bfloat16's sums of this process's block
};

//! How many times any host scratch buffer grew (process-wide): tests check that repeated steps
//! of one shape make it grow no more.
inline std::atomic<long>& host_scratch_growths() {
  static std::atomic<long> growths{0};
  return growths;
}

//! Bytes copied between device memory and host copies of it so that MPI could read or write
//! them, process-wide (kdist::host_staged_bytes(): what staging costs a step).
inline std::atomic<std::uint64_t>& staged_bytes_counter() {
  static std::atomic<std::uint64_t> bytes{0};
  return bytes;
}
//! Counts `bytes` copied between a block in `Memory` and its host copy (nothing when the host
//! reads `Memory`: no copy was made).
template <class Memory>
void count_staged(std::size_t bytes) {
  if constexpr (!Kokkos::SpaceAccessibility<Kokkos::HostSpace, Memory>::accessible) {
    staged_bytes_counter().fetch_add(bytes, std::memory_order_relaxed);
  }
}

//! At least `n` elements of host memory for `Use`, valid until the next host_scratch<T, Use> call
//! of this thread that asks for more; what it held before is not kept.
template <class T, HostScratch Use>
T* host_scratch(std::size_t n) {
  static thread_local std::unique_ptr<T[]> buffer;  // new T[]: std::vector<bool> has no data()
  static thread_local std::size_t capacity = 0;
  if (capacity < n) {
    buffer.reset();  // the old buffer goes first: the peak is the new size, not both
    buffer.reset(new T[n]);
    capacity = n;
    host_scratch_growths().fetch_add(1, std::memory_order_relaxed);
  }
  return buffer.get();
}

//! A host View of v's extents and layout for the length of one call: v itself where the host can
//! read v's memory (as Kokkos::create_mirror_view), else an unmanaged View over host_scratch.
//! Nothing is copied.
template <HostScratch Use, class V>
auto host_view_in_scratch(const V& v) {
  if constexpr (Kokkos::SpaceAccessibility<Kokkos::HostSpace,
                                           typename V::memory_space>::accessible) {
    return v;
  } else {
    using T = typename V::non_const_value_type;
    return Kokkos::View<typename V::non_const_data_type, typename V::array_layout,
                        Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>(
        host_scratch<T, Use>(v.span()), v.layout());
  }
}

}  // namespace kdist::detail
