#pragma once
// The one data-movement engine behind distribute_tensor (from a root), full_tensor and
// redistribute: every device t needs the box target(t) of the global tensor; device s holds
// source(s); s sends t the intersection when sender(s, t). One MPI_Alltoallv moves exactly those
// intersections (the least data), or nothing at all when every device only needs its own data.
// With `accumulate`, contributions are summed (resolving a pending sum over mesh axes).
//
// Copies are avoided where the geometry allows: a device's own part is copied locally, never sent
// to itself; when every box a device sends is one contiguous run of its source block (row slabs,
// as in shard(0) -> replicated), MPI reads straight from the block; when every box it receives is
// a contiguous run of its target block, MPI writes straight into the target. Packed messages go
// in scratch kept from call to call, never zero-filled.
//
// Where it runs is the Mover's: HostMover copies with loops and memcpy and packs in host scratch
// (parallel/detail/host_scratch.hpp), for host memory and for device blocks staged through the
// host; DeviceMover copies with Kokkos kernels on an execution space and packs in device scratch
// (parallel/detail/device_scratch.hpp), for device blocks handed to an MPI that takes device
// pointers (kdist::mpi::gpu_aware()): nothing goes through the host.

#include <climits>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <mpi.h>
#include <Kokkos_Core.hpp>

#include <kdist/core/bfloat16.hpp>
#include <kdist/core/error.hpp>
#include <kdist/parallel/detail/collectives_staging.hpp>
#include <kdist/parallel/detail/device_scratch.hpp>
#include <kdist/parallel/detail/host_scratch.hpp>
#include <kdist/parallel/mpi/communicator.hpp>
#include <kdist/parallel/mpi/datatype.hpp>
#include <kdist/tensor/detail/box.hpp>

namespace kdist::detail {

//! If `box` (inside `block`) is one contiguous run of the row-major `block`, its element offset.
template <std::size_t R>
bool contiguous_offset(const Box<R>& box, const Box<R>& block, std::size_t& offset) {
  offset = 0;
  if (box.volume() == 0) return true;
  // dims after the first partial one must be full; dims before it must be single
  bool inner_full = true;
  for (std::size_t d = R; d-- > 0;) {
    if (!inner_full && box.ext[d] != 1) return false;
    if (box.ext[d] != block.ext[d]) inner_full = false;
  }
  std::size_t stride = 1;
  for (std::size_t d = R; d-- > 0;) {
    offset += (box.lo[d] - block.lo[d]) * stride;
    stride *= block.ext[d];
  }
  return true;
}

//! dst[box] += src[box] (both row-major blocks of the global index space).
template <std::size_t R, class T>
void add_box(const T* src, const Box<R>& src_box, T* dst, const Box<R>& dst_box,
             const Box<R>& box) {
  if (box.volume() == 0) return;
  std::array<std::size_t, R> ss{}, ds{};
  if constexpr (R > 0) {
    ss[R - 1] = ds[R - 1] = 1;
    for (std::size_t d = R - 1; d-- > 0;) {
      ss[d] = ss[d + 1] * src_box.ext[d + 1];
      ds[d] = ds[d + 1] * dst_box.ext[d + 1];
    }
  }
  std::array<std::size_t, R> i{};
  const std::size_t run = R > 0 ? box.ext[R - 1] : 1;
  while (true) {
    std::size_t s = 0, t = 0;
    for (std::size_t d = 0; d < R; ++d) {
      const std::size_t g = box.lo[d] + (d + 1 < R ? i[d] : 0);
      s += (g - src_box.lo[d]) * ss[d];
      t += (g - dst_box.lo[d]) * ds[d];
    }
    if constexpr (sums_in_place_v<T>) {
      for (std::size_t k = 0; k < run; ++k) dst[t + k] += src[s + k];
    } else {  // no pending sum of such values reaches here (kdist::redistribute refuses one)
      throw ValueError("kdist::redistribute: a pending sum of 16-bit values (bfloat16, float16)");
    }
    if constexpr (R <= 1) break;
    std::size_t d = R - 1;
    while (d-- > 0) {
      if (++i[d] < box.ext[d]) break;
      i[d] = 0;
    }
    if (d == static_cast<std::size_t>(-1)) break;
  }
}

//! The kernel of copy_box_on: element i of the box, from src's block to dst's (a functor, not a
//! lambda: nvcc's extended lambdas may not first-capture inside `if constexpr`).
template <bool Add, std::size_t R, class T>
struct BoxCopy {
  const T* src;
  T* dst;
  Kokkos::Array<std::size_t, R> ext, src_stride, dst_stride;
  std::size_t src_at, dst_at;  // the box's first element in each block
  KOKKOS_INLINE_FUNCTION void operator()(const std::int64_t i) const {
    std::size_t rest = static_cast<std::size_t>(i), s = src_at, t = dst_at;
    for (std::size_t d = R; d-- > 0;) {
      const std::size_t c = rest % ext[d];
      rest /= ext[d];
      s += c * src_stride[d];
      t += c * dst_stride[d];
    }
    if constexpr (Add && sums_in_place_v<T>) {
      dst[t] += src[s];
    } else {
      dst[t] = src[s];
    }
  }
};

//! dst[box] = src[box] (Add: +=) for row-major blocks in the memory of `Exec`, one Kokkos kernel
//! over the box's elements (add_box's refusal of 16-bit sums holds: no caller sums them).
template <bool Add, std::size_t R, class T, class Exec>
void copy_box_on(const Exec& exec, const T* src, const Box<R>& src_box, T* dst,
                 const Box<R>& dst_box, const Box<R>& box) {
  const std::size_t n = box.volume();
  if (n == 0) return;
  BoxCopy<Add, R, T> f{src, dst, {}, {}, {}, 0, 0};
  std::size_t ss = 1, ds = 1;
  for (std::size_t d = R; d-- > 0;) {
    f.ext[d] = box.ext[d];
    f.src_stride[d] = ss;
    f.dst_stride[d] = ds;
    f.src_at += (box.lo[d] - src_box.lo[d]) * ss;
    f.dst_at += (box.lo[d] - dst_box.lo[d]) * ds;
    ss *= src_box.ext[d];
    ds *= dst_box.ext[d];
  }
  Kokkos::parallel_for("kdist::redistribute/box",
                       Kokkos::RangePolicy<Exec>(exec, 0, static_cast<std::int64_t>(n)), f);
}

//! exchange() on the host: loops and memcpy, messages packed in host scratch.
struct HostMover {
  static constexpr bool on_host = true;  // MPI reads host memory: the watchdog watches it
  template <std::size_t R, class T>
  void copy(const T* src, const Box<R>& src_box, T* dst, const Box<R>& dst_box,
            const Box<R>& box) const {
    copy_box(src, src_box, dst, dst_box, box);
  }
  template <std::size_t R, class T>
  void add(const T* src, const Box<R>& src_box, T* dst, const Box<R>& dst_box,
           const Box<R>& box) const {
    add_box(src, src_box, dst, dst_box, box);
  }
  template <class T, HostScratch Use>
  T* scratch(std::size_t n) const {
    return host_scratch<T, Use>(n);
  }
  void fence() const {}
};

//! exchange() in the memory of `Exec`: Kokkos kernels on `exec`, messages packed in device
//! scratch, fenced before MPI reads them (an MPI that takes device pointers; the kernels are the
//! same on a host execution space, which is how the CPU tests run them).
template <class Exec>
struct DeviceMover {
  Exec exec;
  static constexpr bool on_host =
      Kokkos::SpaceAccessibility<Kokkos::HostSpace, typename Exec::memory_space>::accessible;
  template <std::size_t R, class T>
  void copy(const T* src, const Box<R>& src_box, T* dst, const Box<R>& dst_box,
            const Box<R>& box) const {
    copy_box_on<false>(exec, src, src_box, dst, dst_box, box);
  }
  template <std::size_t R, class T>
  void add(const T* src, const Box<R>& src_box, T* dst, const Box<R>& dst_box,
           const Box<R>& box) const {
    if constexpr (!sums_in_place_v<T>) {
      add_box(src, src_box, dst, dst_box, box);  // its error: no such sum is run
    } else {
      copy_box_on<true>(exec, src, src_box, dst, dst_box, box);
    }
  }
  template <class T, HostScratch Use>
  T* scratch(std::size_t n) const {
    return device_scratch<T, Use, typename Exec::memory_space>(n);
  }
  void fence() const { exec.fence(); }
};

template <std::size_t R, class Mover, class T, class SourceBox, class TargetBox, class Sender>
void exchange(const Mover& mover, const T* src, T* dst, std::size_t devices, std::size_t me,
              SourceBox&& source, TargetBox&& target, Sender&& sender, bool accumulate,
              MPI_Comm comm, const char* who) {
  const Box<R> my_src = source(me);
  const Box<R> my_dst = target(me);

  auto place = [&](const T* from, const Box<R>& from_box, const Box<R>& box) {
    if (accumulate) {
      mover.add(from, from_box, dst, my_dst, box);
    } else {
      mover.copy(from, from_box, dst, my_dst, box);
    }
  };
  // My own part never travels through MPI.
  if (sender(me, me)) place(src, my_src, intersect(my_src, my_dst));

  // Does anyone need data from another device? (same answer on every rank: replicated inputs)
  bool any_remote = false;
  for (std::size_t t = 0; t < devices && !any_remote; ++t) {
    const Box<R> tb = target(t);
    if (tb.volume() == 0) continue;
    for (std::size_t s = 0; s < devices; ++s) {
      if (s != t && sender(s, t) && intersect(source(s), tb).volume() != 0) {
        any_remote = true;
        break;
      }
    }
  }
  if (!any_remote) return;

  std::vector<int> send_counts(devices, 0), send_displs(devices, 0);
  std::vector<int> recv_counts(devices, 0), recv_displs(devices, 0);
  std::vector<Box<R>> send_boxes(devices), recv_boxes(devices);
  std::vector<std::size_t> send_at(devices, 0), recv_at(devices, 0);
  bool send_direct = true, recv_direct = !accumulate;
  std::size_t send_total = 0, recv_total = 0;
  auto to_int = [&](std::size_t n) {
    if (n > static_cast<std::size_t>(INT_MAX)) {
      throw ValueError(std::string(who) + ": a message of " + std::to_string(n) +
                       " elements exceeds MPI's int count or offset limit; use more devices");
    }
    return static_cast<int>(n);
  };
  for (std::size_t t = 0; t < devices; ++t) {
    if (t != me && sender(me, t)) send_boxes[t] = intersect(my_src, target(t));
    send_direct = contiguous_offset(send_boxes[t], my_src, send_at[t]) && send_direct;
    send_counts[t] = to_int(send_boxes[t].volume());
    send_total += send_boxes[t].volume();
  }
  for (std::size_t s = 0; s < devices; ++s) {
    if (s != me && sender(s, me)) recv_boxes[s] = intersect(source(s), my_dst);
    recv_direct = contiguous_offset(recv_boxes[s], my_dst, recv_at[s]) && recv_direct;
    recv_counts[s] = to_int(recv_boxes[s].volume());
    recv_total += recv_boxes[s].volume();
  }
  // Packed layouts: boxes one after another, in scratch kept from call to call.
  const T* send_ptr = src;
  T* recv_ptr = dst;
  if (send_direct) {
    for (std::size_t t = 0; t < devices; ++t) send_displs[t] = to_int(send_at[t]);
  } else {
    T* send_buf = mover.template scratch<T, HostScratch::pack>(send_total);
    std::size_t at = 0;
    for (std::size_t t = 0; t < devices; ++t) {
      send_displs[t] = to_int(at);
      if (send_counts[t]) mover.copy(src, my_src, send_buf + at, send_boxes[t], send_boxes[t]);
      at += send_boxes[t].volume();
    }
    send_ptr = send_buf;
  }
  if (recv_direct) {
    for (std::size_t s = 0; s < devices; ++s) recv_displs[s] = to_int(recv_at[s]);
  } else {
    T* const recv_buf = mover.template scratch<T, HostScratch::unpack>(recv_total);
    std::size_t at = 0;
    for (std::size_t s = 0; s < devices; ++s) {
      recv_displs[s] = to_int(at);
      at += recv_boxes[s].volume();
    }
    recv_ptr = recv_buf;
  }
  // Watched by the stuck-collective watchdog (parallel/collective_timeout.hpp) on host memory.
  mover.fence();  // the packing (and the own part, which MPI may write beside) is done
  collectives::all_to_all_v<Mover::on_host>(send_ptr, send_counts.data(), send_displs.data(),
                                            recv_ptr, recv_counts.data(), recv_displs.data(),
                                            kdist::mpi::datatype<T>(), comm, who);
  if (!recv_direct) {
    for (std::size_t s = 0; s < devices; ++s) {
      if (recv_counts[s]) place(recv_ptr + recv_displs[s], recv_boxes[s], recv_boxes[s]);
    }
  }
}

//! exchange() on the host (HostMover).
template <std::size_t R, class T, class SourceBox, class TargetBox, class Sender>
void exchange(const T* src, T* dst, std::size_t devices, std::size_t me, SourceBox&& source,
              TargetBox&& target, Sender&& sender, bool accumulate, MPI_Comm comm,
              const char* who) {
  exchange<R>(HostMover{}, src, dst, devices, me, source, target, sender, accumulate, comm, who);
}

}  // namespace kdist::detail
