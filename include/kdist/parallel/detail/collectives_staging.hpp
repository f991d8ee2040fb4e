#pragma once
//! \file parallel/detail/collectives_staging.hpp
//! How the collectives of collectives.hpp run: the MPI calls on the memory of the Views, or on a
//! host copy of it (staging) where MPI cannot read the View's memory; the staging decision is a
//! template argument of each call, so that host Views compile only the direct path and tests can
//! force the host copy. The entry points in collectives.hpp check the arguments
//! (detail/collectives_checks.hpp), pick the staging (with_staging) and call these.
//!
//! `Op` is kdist::ReduceOp (collectives.hpp, which includes this header), a template parameter so
//! that the enum is declared where users read it and this header still compiles on its own.

#include <mpi.h>

#include <Kokkos_Core.hpp>
#include <cstddef>
#include <cstdint>
#include <kdist/parallel/detail/collective_split.hpp>
#include <kdist/parallel/detail/collectives_checks.hpp>
#include <kdist/parallel/detail/host_scratch.hpp>
#include <kdist/parallel/detail/watchdog.hpp>
#include <kdist/parallel/mpi/communicator.hpp>
#include <kdist/parallel/mpi/datatype.hpp>
#include <kdist/parallel/mpi/gpu_aware.hpp>
#include <kdist/parallel/profiling_region.hpp>
#include <string>
#include <type_traits>

namespace kdist::detail::collectives {

namespace watchdog = kdist::detail::watchdog;

inline MPI_Comm raw(MPI_Comm comm) noexcept {
  return comm;
}
inline MPI_Comm raw(const mpi::Communicator& comm) noexcept {
  return comm.get();
}
inline int size_of(MPI_Comm comm) {
  int size = 0;
  mpi::detail::check_mpi(MPI_Comm_size(comm, &size), "kdist: MPI_Comm_size");
  return size;
}
inline int size_of(const mpi::Communicator& comm) noexcept {
  return comm.size();
}

//! True when MPI may be handed a pointer into View V's memory whatever the MPI library: host
//! memory, or any memory when KDIST_MPI_GPU_AWARE is defined at compile time.
template <class V>
inline constexpr bool mpi_can_access_v =
#if defined(KDIST_MPI_GPU_AWARE)
    true;
#else
    Kokkos::SpaceAccessibility<Kokkos::DefaultHostExecutionSpace,
                               typename V::memory_space>::accessible;
#endif

//! Whether View V goes through a host copy: never for memory MPI can always read; for device
//! memory, unless the MPI library takes device pointers (mpi::gpu_aware(), asked at run time).
template <class V>
bool must_stage() {
  if constexpr (mpi_can_access_v<V>) {
    return false;
  } else {
    return !mpi::gpu_aware();
  }
}

//! Whether MPI works on host memory for View V: a host copy (Stage), or a View in host-accessible
//! memory. The stuck-collective watchdog (detail/watchdog.hpp) watches only collectives on host
//! memory: CUDA-aware Open MPI takes device pointers in its blocking collectives only, so device
//! memory handed to a GPU-aware MPI goes through the blocking calls, unwatched.
template <bool Stage, class V>
inline constexpr bool on_host_v =
    Stage || Kokkos::SpaceAccessibility<Kokkos::HostSpace, typename V::memory_space>::accessible;

//! Calls `f(stage_send, stage_recv)` with the staging decision of each View as a
//! std::bool_constant, so the collective is compiled for it; for host memory only the direct
//! path is compiled.
template <class S, class R, class F>
void with_staging(F&& f) {
  if constexpr (mpi_can_access_v<S> && mpi_can_access_v<R>) {
    f(std::false_type{}, std::false_type{});
  } else {
    const bool s = must_stage<S>();
    const bool r = must_stage<R>();
    if (s && r) f(std::true_type{}, std::true_type{});
    if (s && !r) f(std::true_type{}, std::false_type{});
    if (!s && r) f(std::false_type{}, std::true_type{});
    if (!s && !r) f(std::false_type{}, std::false_type{});
  }
}

//! Region names as strings built once (pushRegion takes a std::string).
#define KDIST_DETAIL_REGION_NAME(fn)               \
  inline const std::string& fn##_name() {          \
    static const std::string name = "kdist::" #fn; \
    return name;                                   \
  }
KDIST_DETAIL_REGION_NAME(all_reduce)
KDIST_DETAIL_REGION_NAME(all_gather)
KDIST_DETAIL_REGION_NAME(reduce_scatter)
KDIST_DETAIL_REGION_NAME(broadcast)
KDIST_DETAIL_REGION_NAME(all_to_all)
#undef KDIST_DETAIL_REGION_NAME

//! MPICH 4.0.2 (Debian 12) compares MPI_UNSIGNED_LONG and MPI_UNSIGNED_LONG_LONG as signed in
//! MPI_MIN and MPI_MAX: min(0, 2^64 - 1) comes out 2^64 - 1, silently. Unsigned 64-bit min/max on
//! host memory go through this user op instead (created once, commutative).
template <class T, bool Max>
void unsigned_extremum(void* in, void* inout, int* len, MPI_Datatype*) {
  const T* a = static_cast<const T*>(in);
  T* b = static_cast<T*>(inout);
  for (int i = 0; i < *len; ++i) {
    if (Max ? a[i] > b[i] : a[i] < b[i]) b[i] = a[i];
  }
}
template <class T, bool Max>
MPI_Op unsigned_extremum_op() {
  static const MPI_Op op = [] {
    MPI_Op created = MPI_OP_NULL;
    MPI_Op_create(&unsigned_extremum<T, Max>, 1, &created);
    return created;
  }();
  return op;
}

//! The MPI_Op of `op` for elements of type T; `OnHost`: MPI works on host memory (the user op
//! above cannot run on device buffers handed to a GPU-aware MPI).
template <class T, bool OnHost = true, class Op>
inline MPI_Op to_mpi_op(Op op, const char* who) {
  if constexpr (OnHost && std::is_integral_v<T> && std::is_unsigned_v<T> && sizeof(T) >= 8) {
    if (op == Op::max) return unsigned_extremum_op<T, true>();
    if (op == Op::min) return unsigned_extremum_op<T, false>();
  }
  switch (op) {
    case Op::sum:
    case Op::mean:
      return MPI_SUM;
    case Op::max:
    case Op::min:
      if constexpr (is_complex<T>::value) {
        throw_value_error(who, std::string("ReduceOp::") + (op == Op::max ? "max" : "min") +
                                   " is not defined for complex values; use sum or mean");
      } else {
        return op == Op::max ? MPI_MAX : MPI_MIN;
      }
  }
  throw_value_error(who, "unknown ReduceOp " + std::to_string(static_cast<int>(op)));
}

//! A View's elements as a 1-D unmanaged View (the View must be contiguous).
template <class V>
auto flat(const V& v) {
  return Kokkos::View<typename V::value_type*, typename V::memory_space,
                      Kokkos::MemoryTraits<Kokkos::Unmanaged>>(v.data(), v.size());
}

//! The memory MPI works on for View V: the View's own (Stage = false: nothing allocated, nothing
//! copied) or a host copy in host scratch (Stage = true; detail/host_scratch.hpp, `Use` says which
//! buffer: nothing allocated once the largest call has run), copied in from the View when asked
//! and back by write_back().
template <bool Stage, class V, HostScratch Use>
class MpiBuffer {
 public:
  template <class Space>
  MpiBuffer(const Space&, const V& v, bool /*copy_in*/) noexcept : data_(v.data()) {}
  [[nodiscard]] auto* data() const noexcept { return data_; }
  static constexpr bool host_copy = false;
  template <class Space>
  void write_back(const Space&) const noexcept {}

 private:
  typename V::pointer_type data_;
};
template <class V, HostScratch Use>
class MpiBuffer<true, V, Use> {
  using T = typename V::non_const_value_type;

 public:
  template <class Space>
  MpiBuffer(const Space& space, const V& v, bool copy_in)
      : view_(v), host_(host_scratch<T, Use>(v.size()), v.size()) {
    if (copy_in) {
      Kokkos::deep_copy(space, host_, flat(v));
      staged_bytes_counter().fetch_add(v.size() * sizeof(T), std::memory_order_relaxed);
    }
  }
  [[nodiscard]] auto* data() const noexcept { return host_.data(); }
  static constexpr bool host_copy = true;
  template <class Space>
  void write_back(const Space& space) const {
    Kokkos::deep_copy(space, flat(view_), host_);
    space.fence();
    staged_bytes_counter().fetch_add(host_.size() * sizeof(T), std::memory_order_relaxed);
  }

 private:
  V view_;
  Kokkos::View<T*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>> host_;
};

//! Divides the n elements at p (in the memory of View V, or in a host copy) by `divisor`.
template <bool HostCopy, class V, class Space, class T>
void divide(const Space& space, T* p, std::size_t n, int divisor) {
  if (divisor == 1 || n == 0) {
    return;
  }
  T d{};
  if constexpr (is_complex<T>::value) {
    d = T(static_cast<typename T::value_type>(divisor));
  } else {
    d = static_cast<T>(divisor);
  }
  if constexpr (HostCopy) {
    for (std::size_t i = 0; i < n; ++i) {
      p[i] /= d;
    }
  } else if constexpr (is_complex<T>::value) {
    // std::complex's operators are host functions: divide the 2 n real parts instead.
    using R = typename T::value_type;
    divide<false, V>(space, reinterpret_cast<R*>(p), 2 * n, divisor);
  } else {
    using Exec =
        std::conditional_t<Kokkos::SpaceAccessibility<Space, typename V::memory_space>::accessible,
                           Space, typename V::execution_space>;
    Exec exec = [&] {
      if constexpr (std::is_same_v<Exec, Space>) {
        return space;
      } else {
        return Exec();
      }
    }();
    Kokkos::parallel_for(
        "kdist::mean", Kokkos::RangePolicy<Exec>(exec, 0, static_cast<std::int64_t>(n)),
        KOKKOS_LAMBDA(const std::int64_t i) { p[i] /= d; });
    exec.fence();
  }
}

// ---- the collectives, with the staging decision as template arguments (tests force Stage)
// ---------

template <bool StageS, bool StageR, class Space, class S, class R, class Op>
void all_reduce(const Space& space, const S& send, const R& recv, Op op, MPI_Comm comm,
                int comm_size) {
  constexpr const char* who = "kdist::all_reduce";
  using T = typename R::non_const_value_type;
  const MPI_Op mpi_op = to_mpi_op < T, on_host_v<StageS, S> && on_host_v < StageR, R >> (op, who);
  const int count = to_count(recv.size(), who);
  MpiBuffer<StageS, S, HostScratch::mpi_send> in(space, send, true);
  MpiBuffer<StageR, R, HostScratch::mpi_recv> out(space, recv, false);
  space.fence();
  const void* send_ptr = in.data();
  if (!StageS && !StageR &&
      static_cast<const void*>(in.data()) == static_cast<const void*>(out.data())) {
    send_ptr = MPI_IN_PLACE;  // the same memory: MPI forbids aliased buffers
  }
  watchdog::run<on_host_v<StageS, S> && on_host_v<StageR, R>>(
      comm, who, "kdist::all_reduce: MPI_Allreduce",
      [&](MPI_Request* r) {
        return MPI_Iallreduce(send_ptr, out.data(), count, mpi::datatype<T>(), mpi_op, comm, r);
      },
      [&] { return MPI_Allreduce(send_ptr, out.data(), count, mpi::datatype<T>(), mpi_op, comm); });
  if (op == Op::mean) {
    divide<StageR, R>(space, out.data(), recv.size(), comm_size);
  }
  out.write_back(space);
}

template <bool Stage, class Space, class V, class Op>
void all_reduce_in_place(const Space& space, const V& view, Op op, MPI_Comm comm, int comm_size) {
  constexpr const char* who = "kdist::all_reduce";
  using T = typename V::non_const_value_type;
  const MPI_Op mpi_op = to_mpi_op<T, on_host_v<Stage, V>>(op, who);
  const int count = to_count(view.size(), who);
  MpiBuffer<Stage, V, HostScratch::mpi_recv> buf(space, view, true);
  space.fence();
  watchdog::run<on_host_v<Stage, V>>(
      comm, who, "kdist::all_reduce: MPI_Allreduce",
      [&](MPI_Request* r) {
        return MPI_Iallreduce(MPI_IN_PLACE, buf.data(), count, mpi::datatype<T>(), mpi_op, comm, r);
      },
      [&] {
        return MPI_Allreduce(MPI_IN_PLACE, buf.data(), count, mpi::datatype<T>(), mpi_op, comm);
      });
  if (op == Op::mean) {
    divide<Stage, V>(space, buf.data(), view.size(), comm_size);
  }
  buf.write_back(space);
}

template <bool StageS, bool StageR, class Space, class S, class R>
void all_gather(const Space& space, const S& send, const R& recv, MPI_Comm comm) {
  using T = typename R::non_const_value_type;
  const int count = to_count(send.size(), "kdist::all_gather");
  MpiBuffer<StageS, S, HostScratch::mpi_send> in(space, send, true);
  MpiBuffer<StageR, R, HostScratch::mpi_recv> out(space, recv, false);
  space.fence();
  const MPI_Datatype type = mpi::datatype<T>();
  watchdog::run<on_host_v<StageS, S> && on_host_v<StageR, R>>(
      comm, "kdist::all_gather", "kdist::all_gather: MPI_Allgather",
      [&](MPI_Request* r) {
        return MPI_Iallgather(in.data(), count, type, out.data(), count, type, comm, r);
      },
      [&] { return MPI_Allgather(in.data(), count, type, out.data(), count, type, comm); });
  out.write_back(space);
}

template <bool StageS, bool StageR, class Space, class S, class R, class Op>
void reduce_scatter(const Space& space, const S& send, const R& recv, Op op, MPI_Comm comm,
                    int comm_size) {
  constexpr const char* who = "kdist::reduce_scatter";
  using T = typename R::non_const_value_type;
  const MPI_Op mpi_op = to_mpi_op < T, on_host_v<StageS, S> && on_host_v < StageR, R >> (op, who);
  const int count = to_count(recv.size(), who);
  MpiBuffer<StageS, S, HostScratch::mpi_send> in(space, send, true);
  MpiBuffer<StageR, R, HostScratch::mpi_recv> out(space, recv, false);
  space.fence();
  const MPI_Datatype type = mpi::datatype<T>();
  watchdog::run<on_host_v<StageS, S> && on_host_v<StageR, R>>(
      comm, who, "kdist::reduce_scatter: MPI_Reduce_scatter_block",
      [&](MPI_Request* r) {
        return MPI_Ireduce_scatter_block(in.data(), out.data(), count, type, mpi_op, comm, r);
      },
      [&] { return MPI_Reduce_scatter_block(in.data(), out.data(), count, type, mpi_op, comm); });
  if (op == Op::mean) {
    divide<StageR, R>(space, out.data(), recv.size(), comm_size);
  }
  out.write_back(space);
}

template <bool Stage, class Space, class V>
void broadcast(const Space& space, const V& view, int root, MPI_Comm comm, int rank) {
  using T = typename V::non_const_value_type;
  const int count = to_count(view.size(), "kdist::broadcast");
  MpiBuffer<Stage, V, HostScratch::mpi_recv> buf(space, view, rank == root);
  space.fence();
  watchdog::run<on_host_v<Stage, V>>(
      comm, "kdist::broadcast", "kdist::broadcast: MPI_Bcast",
      [&](MPI_Request* r) {
        return MPI_Ibcast(buf.data(), count, mpi::datatype<T>(), root, comm, r);
      },
      [&] { return MPI_Bcast(buf.data(), count, mpi::datatype<T>(), root, comm); });
  if (rank != root) {
    buf.write_back(space);
  }
}

template <bool StageS, bool StageR, class Space, class S, class R>
void all_to_all(const Space& space, const S& send, const R& recv, MPI_Comm comm, int comm_size) {
  using T = typename R::non_const_value_type;
  const int block =
      to_count(send.size() / static_cast<std::size_t>(comm_size), "kdist::all_to_all");
  MpiBuffer<StageS, S, HostScratch::mpi_send> in(space, send, true);
  MpiBuffer<StageR, R, HostScratch::mpi_recv> out(space, recv, false);
  space.fence();
  const MPI_Datatype type = mpi::datatype<T>();
  watchdog::run<on_host_v<StageS, S> && on_host_v<StageR, R>>(
      comm, "kdist::all_to_all", "kdist::all_to_all: MPI_Alltoall",
      [&](MPI_Request* r) {
        return MPI_Ialltoall(in.data(), block, type, out.data(), block, type, comm, r);
      },
      [&] { return MPI_Alltoall(in.data(), block, type, out.data(), block, type, comm); });
  out.write_back(space);
}

//! MPI_Alltoallv of `type` elements (counts and displacements per process, in elements), watched
//! like every kdist collective when the buffers are in host memory (`OnHost`; device buffers go
//! to the blocking call of a GPU-aware MPI, unwatched); `who` names it in errors and messages.
//! For the exchanges of redistribute (tensor/detail/exchange.hpp), which pack their own buffers.
template <bool OnHost = true>
void all_to_all_v(const void* send, const int* send_counts, const int* send_displs, void* recv,
                  const int* recv_counts, const int* recv_displs, MPI_Datatype type, MPI_Comm comm,
                  const char* who) {
  // Its buffers were packed in the step and MPI is called from the host: not a host call of a
  // device graph.
  tell_split_cannot_take(std::string(who) + "'s exchange (MPI_Alltoallv)");
  const std::string what = std::string(who) + ": MPI_Alltoallv";
  watchdog::run<OnHost>(
      comm, who, what.c_str(),
      [&](MPI_Request* r) {
        return MPI_Ialltoallv(send, send_counts, send_displs, type, recv, recv_counts, recv_displs,
                              type, comm, r);
      },
      [&] {
        return MPI_Alltoallv(send, send_counts, send_displs, type, recv, recv_counts, recv_displs,
                             type, comm);
      });
}

}  // namespace kdist::detail::collectives
