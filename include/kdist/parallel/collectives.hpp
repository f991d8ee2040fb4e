#pragma once
//! \file parallel/collectives.hpp
//! MPI collectives on Kokkos Views: `kdist::all_reduce`, `all_gather`, `reduce_scatter`,
//! `broadcast`, `all_to_all`, with `kdist::ReduceOp { sum, max, min, mean }`.
//!
//! Arguments in the Kokkos-comm order: execution space, views, then the communicator, which is a
//! `kdist::mpi::Communicator` (for example `MeshCommunicators::comm("model")`) or a raw MPI_Comm.
//!
//! - Views: contiguous (`span_is_contiguous()`), of any rank, of a type with an MPI datatype
//!   (kdist/parallel/mpi/datatype.hpp). The collectives see a View as its elements in memory order, so
//!   "block r" of an all_gather result is elements [r*n, (r+1)*n) of its memory: row r of a
//!   LayoutRight (P, n) View. Two Views of rank >= 2 passed together must share their layout.
//! - Every call fences `space` before MPI touches a buffer, so work enqueued on `space` that
//!   writes the send View is complete. On return the results are in place.
//! - A View in memory MPI can read directly is passed to MPI as it is: no allocation, no copy.
//!   That is host-accessible memory, device memory when the MPI library says it takes device
//!   pointers (kdist::mpi::gpu_aware(), asked once at run time; `KDIST_MPI_GPU_AWARE=0|1|blocking`
//!   in the environment overrides it), and any memory when the macro `KDIST_MPI_GPU_AWARE` is
//!   defined. Other Views (device memory, MPI not GPU-aware) go through a host copy, and
//!   kdist::host_staged_bytes() counts what those copies move.
//! - Each entry point is a Kokkos profiling region named "kdist::all_reduce" etc.
//! - While the training step is recorded as a device graph, each is offered to the recording
//!   first (detail/collective_split.hpp): one on device memory then runs between two pieces of
//!   the graph, with the same Views, at every replay.
//! - Checks made on one rank only (contiguity, sizes, root) throw kdist::ValueError on that rank
//!   before any communication; pass the same sizes on every rank, as MPI requires.
//!
//! \code
//! Kokkos::View<double*> grad("grad", n);
//! kdist::all_reduce(Kokkos::DefaultExecutionSpace(), grad, kdist::ReduceOp::mean,
//! mesh.comm("data")); \endcode

#include <mpi.h>

#include <Kokkos_Core.hpp>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <kdist/parallel/concepts.hpp>
#include <kdist/parallel/detail/collective_split.hpp>
#include <kdist/parallel/detail/collectives_checks.hpp>
#include <kdist/parallel/detail/collectives_staging.hpp>
#include <kdist/parallel/mpi/communicator.hpp>
#include <string>
#include <type_traits>

namespace kdist {

//! Bytes this process has copied between device memory and host copies of it so that MPI could
//! read or write them (the staging of the collectives, redistributions and halo exchanges, both
//! ways), since it started: 0 on CPU builds and with a GPU-aware MPI. Read it before and after a
//! step to see what staging costs the step.
inline std::uint64_t host_staged_bytes() noexcept {
  return detail::staged_bytes_counter().load(std::memory_order_relaxed);
}

//! The reduction of all_reduce and reduce_scatter. `mean` is the sum divided by the number of
//! processes of the communicator (integer division for integer types).
enum class ReduceOp { sum, max, min, mean };

//! Reduces `send` over the processes of `comm` into `recv` on every process (MPI_Allreduce):
//! recv[i] = op over ranks of send[i]. `mean` divides the sum by comm's size.
//! Preconditions: send.size() == recv.size() on every rank; both contiguous; recv not const.
//! `send` and `recv` may be the same View (then it runs in place).
//! Errors: kdist::ValueError for sizes that differ (naming both), a View that is not
//! contiguous, max/min of complex values; kdist::RuntimeError when MPI fails.
//! \code
//! kdist::all_reduce(space, local_loss, total_loss, kdist::ReduceOp::sum, kdist::communicator());
//! \endcode
template <KokkosExecutionSpace Space, KokkosView SendView, KokkosView RecvView,
          MpiCommunicator Comm>
void all_reduce(const Space& space, const SendView& send, const RecvView& recv, ReduceOp op,
                const Comm& comm) {
  namespace dc = detail::collectives;
  if constexpr (dc::check_pair_types<SendView, RecvView>() && dc::check_reducible<RecvView>()) {
    if (detail::offer_to_split<SendView, RecvView>("kdist::all_reduce", [=, c = dc::raw(comm)] {
          all_reduce(space, send, recv, op, c);
        })) {
      return;
    }
    detail::ProfilingRegion region(dc::all_reduce_name());
    constexpr const char* who = "kdist::all_reduce";
    dc::check_arguments(dc::raw(comm), who,
                        {{"the reduction", static_cast<long long>(op)},
                         {"the element count", static_cast<long long>(recv.size())}},
                        [&] { dc::check_elementwise_pair(send, recv, who); });
    const int size = op == ReduceOp::mean ? dc::size_of(comm) : 1;
    dc::with_staging<SendView, RecvView>([&](auto stage_s, auto stage_r) {
      dc::all_reduce<decltype(stage_s)::value, decltype(stage_r)::value>(space, send, recv, op,
                                                                         dc::raw(comm), size);
    });
  }
}

//! In-place all_reduce: `view` becomes the reduction of `view` over the processes of `comm`.
//! Errors as for the two-View all_reduce.
//! \code
//! kdist::all_reduce(space, grad, kdist::ReduceOp::mean, mesh.comm("data"));
//! \endcode
template <KokkosExecutionSpace Space, KokkosView View, MpiCommunicator Comm>
void all_reduce(const Space& space, const View& view, ReduceOp op, const Comm& comm) {
  namespace dc = detail::collectives;
  if constexpr (dc::check_view_type<View>() && dc::check_writable<View>() &&
                dc::check_reducible<View>()) {
    if (detail::offer_to_split<View>("kdist::all_reduce",
                                     [=, c = dc::raw(comm)] { all_reduce(space, view, op, c); })) {
      return;
    }
    detail::ProfilingRegion region(dc::all_reduce_name());
    dc::check_arguments(dc::raw(comm), "kdist::all_reduce",
                        {{"the reduction", static_cast<long long>(op)},
                         {"the element count", static_cast<long long>(view.size())}},
                        [&] { dc::check_contiguous(view, "kdist::all_reduce", "in-place"); });
    const int size = op == ReduceOp::mean ? dc::size_of(comm) : 1;
    dc::with_staging<View, View>([&](auto stage, auto) {
      dc::all_reduce_in_place<decltype(stage)::value>(space, view, op, dc::raw(comm), size);
    });
  }
}

//! Gathers `send` of every process of `comm` into `recv` on every process (MPI_Allgather),
//! rank-major: elements [r*n, (r+1)*n) of recv are rank r's send, n = send.size().
//! Preconditions: recv.size() == send.size() * comm size; both contiguous.
//! Errors: kdist::ValueError for a recv of the wrong size (naming the sizes) or a View that is
//! not contiguous; kdist::RuntimeError when MPI fails.
//! \code
//! Kokkos::View<float**, Kokkos::LayoutRight> rows("rows", comm.size(), n);  // row r from rank r
//! kdist::all_gather(space, mine, rows, comm);
//! \endcode
template <KokkosExecutionSpace Space, KokkosView SendView, KokkosView RecvView,
          MpiCommunicator Comm>
void all_gather(const Space& space, const SendView& send, const RecvView& recv, const Comm& comm) {
  namespace dc = detail::collectives;
  if constexpr (dc::check_pair_types<SendView, RecvView>()) {
    if (detail::offer_to_split<SendView, RecvView>(
            "kdist::all_gather", [=, c = dc::raw(comm)] { all_gather(space, send, recv, c); })) {
      return;
    }
    detail::ProfilingRegion region(dc::all_gather_name());
    constexpr const char* who = "kdist::all_gather";
    const int size = dc::size_of(comm);
    dc::check_arguments(
        dc::raw(comm), who,
        {{"the send element count", static_cast<long long>(send.size())},
         {"the recv element count", static_cast<long long>(recv.size())}},
        [&] {
          dc::check_contiguous(send, who, "send");
          dc::check_contiguous(recv, who, "recv");
          if (recv.size() != send.size() * static_cast<std::size_t>(size)) [[unlikely]] {
            dc::throw_value_error(
                who, "recv has " + std::to_string(recv.size()) +
                         " elements but must have send.size() * communicator size = " +
                         std::to_string(send.size()) + " * " + std::to_string(size) + " = " +
                         std::to_string(send.size() * static_cast<std::size_t>(size)));
          }
        });
    dc::with_staging<SendView, RecvView>([&](auto stage_s, auto stage_r) {
      dc::all_gather<decltype(stage_s)::value, decltype(stage_r)::value>(space, send, recv,
                                                                         dc::raw(comm));
    });
  }
}

//! Reduces `send` over the processes of `comm` and scatters equal blocks
//! (MPI_Reduce_scatter_block): recv on rank r is the reduction of elements [r*n, (r+1)*n) of
//! send, n = recv.size(). `mean` divides the sum by comm's size.
//! Preconditions: send.size() == recv.size() * comm size; both contiguous.
//! Errors: kdist::ValueError for a send of the wrong size (naming the sizes), a View that is
//! not contiguous, max/min of complex values; kdist::RuntimeError when MPI fails.
template <KokkosExecutionSpace Space, KokkosView SendView, KokkosView RecvView,
          MpiCommunicator Comm>
void reduce_scatter(const Space& space, const SendView& send, const RecvView& recv, ReduceOp op,
                    const Comm& comm) {
  namespace dc = detail::collectives;
  if constexpr (dc::check_pair_types<SendView, RecvView>() && dc::check_reducible<RecvView>()) {
    if (detail::offer_to_split<SendView, RecvView>("kdist::reduce_scatter", [=, c = dc::raw(comm)] {
          reduce_scatter(space, send, recv, op, c);
        })) {
      return;
    }
    detail::ProfilingRegion region(dc::reduce_scatter_name());
    constexpr const char* who = "kdist::reduce_scatter";
    const int size = dc::size_of(comm);
    dc::check_arguments(
        dc::raw(comm), who,
        {{"the reduction", static_cast<long long>(op)},
         {"the send element count", static_cast<long long>(send.size())},
         {"the recv element count", static_cast<long long>(recv.size())}},
        [&] {
          dc::check_contiguous(send, who, "send");
          dc::check_contiguous(recv, who, "recv");
          if (send.size() != recv.size() * static_cast<std::size_t>(size)) [[unlikely]] {
            dc::throw_value_error(
                who, "send has " + std::to_string(send.size()) +
                         " elements but must have recv.size() * communicator size = " +
                         std::to_string(recv.size()) + " * " + std::to_string(size) + " = " +
                         std::to_string(recv.size() * static_cast<std::size_t>(size)));
          }
        });
    dc::with_staging<SendView, RecvView>([&](auto stage_s, auto stage_r) {
      dc::reduce_scatter<decltype(stage_s)::value, decltype(stage_r)::value>(space, send, recv, op,
                                                                             dc::raw(comm), size);
    });
  }
}

//! Copies `view` of process `root` into `view` on every process of `comm` (MPI_Bcast).
//! Preconditions: the same view.size() on every rank; contiguous; 0 <= root < comm size.
//! Errors: kdist::ValueError for a root outside the communicator or a View that is not
//! contiguous; kdist::RuntimeError when MPI fails.
template <KokkosExecutionSpace Space, KokkosView View, MpiCommunicator Comm>
void broadcast(const Space& space, const View& view, int root, const Comm& comm) {
  namespace dc = detail::collectives;
  constexpr bool writable = !std::is_const_v<typename View::value_type>;
  static_assert(writable, "kdist::broadcast: the View must not be const");
  if constexpr (dc::check_view_type<View>() && writable) {
    if (detail::offer_to_split<View>("kdist::broadcast",
                                     [=, c = dc::raw(comm)] { broadcast(space, view, root, c); })) {
      return;
    }
    detail::ProfilingRegion region(dc::broadcast_name());
    constexpr const char* who = "kdist::broadcast";
    const int size = dc::size_of(comm);
    dc::check_arguments(dc::raw(comm), who,
                        {{"the root", static_cast<long long>(root)},
                         {"the element count", static_cast<long long>(view.size())}},
                        [&] {
                          dc::check_contiguous(view, who, "broadcast");
                          if (root < 0 || root >= size) [[unlikely]] {
                            dc::throw_value_error(
                                who, "root " + std::to_string(root) +
                                         " is not a rank of the communicator (ranks 0 to " +
                                         std::to_string(size - 1) + ")");
                          }
                        });
    int rank = 0;
    if constexpr (std::is_same_v<Comm, mpi::Communicator>) {
      rank = comm.rank();
    } else {
      mpi::detail::check_mpi(MPI_Comm_rank(comm, &rank), "kdist::broadcast: MPI_Comm_rank");
    }
    dc::with_staging<View, View>([&](auto stage, auto) {
      dc::broadcast<decltype(stage)::value>(space, view, root, dc::raw(comm), rank);
    });
  }
}

//! Copies `value` of process `root` into `value` on every process of `comm`: one scalar of a type
//! with an MPI datatype (the View broadcast on a host View of one element, with its checks).
//! \code
//! std::int64_t step = ...;  // process 0's counts
//! kdist::broadcast(step, 0, kdist::communicator());
//! \endcode
template <class Scalar, MpiCommunicator Comm>
void broadcast(Scalar& value, int root, const Comm& comm) {
  using Host = Kokkos::View<Scalar*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
  broadcast(Kokkos::DefaultHostExecutionSpace(), Host(&value, 1), root, comm);
}

//! Copies the string `s` of process `root` into `s` on every process of `comm` (its length, then
//! its characters). Errors as for the View broadcast.
template <MpiCommunicator Comm>
void broadcast(std::string& s, int root, const Comm& comm) {
  std::uint64_t n = s.size();
  broadcast(n, root, comm);
  s.resize(static_cast<std::size_t>(n));
  using Host = Kokkos::View<char*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
  if (n != 0) broadcast(Kokkos::DefaultHostExecutionSpace(), Host(s.data(), s.size()), root, comm);
}

//! Exchanges equal blocks between all processes of `comm` (MPI_Alltoall): block j of send on rank
//! i becomes block i of recv on rank j, a block being send.size() / comm size elements in memory
//! order.
//! Preconditions: send.size() == recv.size(), a multiple of comm size; both contiguous.
//! Errors: kdist::ValueError for sizes that differ or do not split into comm-size blocks (naming
//! the sizes), or a View that is not contiguous; kdist::RuntimeError when MPI fails.
template <KokkosExecutionSpace Space, KokkosView SendView, KokkosView RecvView,
          MpiCommunicator Comm>
void all_to_all(const Space& space, const SendView& send, const RecvView& recv, const Comm& comm) {
  namespace dc = detail::collectives;
  if constexpr (dc::check_pair_types<SendView, RecvView>()) {
    if (detail::offer_to_split<SendView, RecvView>(
            "kdist::all_to_all", [=, c = dc::raw(comm)] { all_to_all(space, send, recv, c); })) {
      return;
    }
    detail::ProfilingRegion region(dc::all_to_all_name());
    constexpr const char* who = "kdist::all_to_all";
    const int size = dc::size_of(comm);
    dc::check_arguments(
        dc::raw(comm), who, {{"the element count", static_cast<long long>(send.size())}}, [&] {
          dc::check_contiguous(send, who, "send");
          dc::check_contiguous(recv, who, "recv");
          if (send.size() != recv.size()) [[unlikely]] {
            dc::throw_value_error(who, "send has " + std::to_string(send.size()) +
                                           " elements but recv has " + std::to_string(recv.size()) +
                                           "; they must have the same number");
          }
          if (send.size() % static_cast<std::size_t>(size) != 0) [[unlikely]] {
            dc::throw_value_error(who, "send has " + std::to_string(send.size()) +
                                           " elements, which do not split into " +
                                           std::to_string(size) +
                                           " equal blocks (one per rank of the communicator)");
          }
        });
    dc::with_staging<SendView, RecvView>([&](auto stage_s, auto stage_r) {
      dc::all_to_all<decltype(stage_s)::value, decltype(stage_r)::value>(space, send, recv,
                                                                         dc::raw(comm), size);
    });
  }
}

}  // namespace kdist
