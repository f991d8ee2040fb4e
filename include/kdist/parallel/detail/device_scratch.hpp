#pragma once
//! \file parallel/detail/device_scratch.hpp
//! Device memory that a blocking call borrows while it runs, the device twin of host_scratch.hpp:
//! one buffer per thread, value type, use and memory space, grown to the largest request and
//! kept, so that a step that packs messages in device memory for a GPU-aware MPI (a
//! redistribution's exchange, kdist/tensor/detail/exchange.hpp) allocates nothing once its
//! largest call has run. The buffers are let go at Kokkos::finalize (a View must not outlive
//! Kokkos). Reuse is ordered on the device: the kernels of one call and the next run on one
//! execution space instance, in order.

#include <Kokkos_Core.hpp>
#include <cstddef>
#include <memory>

#include <kdist/parallel/detail/host_scratch.hpp>

namespace kdist::detail {

//! At least `n` elements of `Memory` for `Use`, valid until the next device_scratch<T, Use,
//! Memory> call of this thread that asks for more; what it held before is not kept.
template <class T, HostScratch Use, class Memory>
T* device_scratch(std::size_t n) {
  using Buffer = Kokkos::View<T*, Memory>;
  static thread_local const std::shared_ptr<Buffer> buffer = [] {
    auto b = std::make_shared<Buffer>();
    Kokkos::push_finalize_hook([weak = std::weak_ptr<Buffer>(b)] {
      if (auto live = weak.lock()) *live = Buffer();
    });
    return b;
  }();
  if (buffer->size() < n) {
    *buffer = Buffer();  // the old buffer goes first: the peak is the new size, not both
    *buffer = Buffer(Kokkos::view_alloc(Kokkos::WithoutInitializing, "kdist::device_scratch"), n);
    host_scratch_growths().fetch_add(1, std::memory_order_relaxed);
  }
  return buffer->data();
}

}  // namespace kdist::detail
