#pragma once
// The one data-movement engine behind distribute_tensor (from a root), full_tensor and
// redistribute: every device t needs the box target(t) of the global tensor; device s holds
// source(s); s sends t the intersection when sender(s, t). One MPI_Alltoallv moves exactly those
// intersections (the least data), or nothing at all when every device only needs its own data.
// With `accumulate`, contributions are summed (resolving a pending sum over mesh axes).

#include <climits>
#include <cstddef>
#include <string>
#include <vector>

#include <mpi.h>

#include <kdist/detail/box.hpp>
#include <kdist/error.hpp>
#include <kdist/mpi/datatype.hpp>

namespace kdist::detail {

template <std::size_t R, class T, class SourceBox, class TargetBox, class Sender>
void exchange(const T* src, T* dst, std::size_t devices, std::size_t me, SourceBox&& source,
              TargetBox&& target, Sender&& sender, bool accumulate, MPI_Comm comm,
              const char* who) {
  const Box<R> my_src = source(me);
  const Box<R> my_dst = target(me);

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

  auto place = [&](const T* from, const Box<R>& from_box, const Box<R>& box) {
    if (!accumulate) {
      copy_box(from, from_box, dst, my_dst, box);
      return;
    }
    std::vector<T> tmp(box.volume());
    copy_box(from, from_box, tmp.data(), box, box);
    std::size_t k = 0;
    // add tmp (dense over box) into dst at box
    std::array<std::size_t, R> stride{};
    if constexpr (R > 0) {
      stride[R - 1] = 1;
      for (std::size_t d = R - 1; d-- > 0;) stride[d] = stride[d + 1] * my_dst.ext[d + 1];
    }
    std::array<std::size_t, R> i{};
    for (k = 0; k < tmp.size(); ++k) {
      std::size_t off = 0;
      for (std::size_t d = 0; d < R; ++d) off += (box.lo[d] + i[d] - my_dst.lo[d]) * stride[d];
      dst[off] += tmp[k];
      for (std::size_t d = R; d-- > 0;) {
        if (++i[d] < box.ext[d]) break;
        i[d] = 0;
      }
    }
  };

  if (!any_remote) {
    if (sender(me, me)) {
      const Box<R> box = intersect(my_src, my_dst);
      place(src, my_src, box);
    }
    return;
  }

  std::vector<int> send_counts(devices, 0), send_displs(devices, 0);
  std::vector<int> recv_counts(devices, 0), recv_displs(devices, 0);
  std::vector<Box<R>> send_boxes(devices), recv_boxes(devices);
  std::size_t send_total = 0, recv_total = 0;
  auto to_int = [&](std::size_t n) {
    if (n > static_cast<std::size_t>(INT_MAX)) {
      throw ValueError(std::string(who) + ": a message of " + std::to_string(n) +
                       " elements exceeds MPI's int count limit; use more devices");
    }
    return static_cast<int>(n);
  };
  for (std::size_t t = 0; t < devices; ++t) {
    if (sender(me, t)) send_boxes[t] = intersect(my_src, target(t));
    send_counts[t] = to_int(send_boxes[t].volume());
    send_displs[t] = to_int(send_total);
    send_total += send_boxes[t].volume();
  }
  for (std::size_t s = 0; s < devices; ++s) {
    if (sender(s, me)) recv_boxes[s] = intersect(source(s), my_dst);
    recv_counts[s] = to_int(recv_boxes[s].volume());
    recv_displs[s] = to_int(recv_total);
    recv_total += recv_boxes[s].volume();
  }
  std::vector<T> send_buf(send_total), recv_buf(recv_total);
  for (std::size_t t = 0; t < devices; ++t) {
    if (send_counts[t]) {
      copy_box(src, my_src, send_buf.data() + send_displs[t], send_boxes[t], send_boxes[t]);
    }
  }
  const MPI_Datatype type = kdist::mpi::datatype<T>();
  MPI_Alltoallv(send_buf.data(), send_counts.data(), send_displs.data(), type, recv_buf.data(),
                recv_counts.data(), recv_displs.data(), type, comm);
  for (std::size_t s = 0; s < devices; ++s) {
    if (recv_counts[s]) place(recv_buf.data() + recv_displs[s], recv_boxes[s], recv_boxes[s]);
  }
}

}  // namespace kdist::detail
