#pragma once
//! \file parallel/collective_request.hpp
//! Non-blocking collectives: `kdist::start_all_reduce(space, send, recv, op, comm)` starts an
//! MPI_Iallreduce and returns a `kdist::CollectiveRequest`; work done before `request.wait()`
//! overlaps the reduction (the data-parallel gradient sync of kdist/nn/train/gradient_sync.hpp starts
//! each gradient's all-reduce this way and waits for it just before the optimizer needs it).
//!
//! - MPI moves data only inside MPI calls unless the MPI library runs a progress thread (MPICH:
//!   `MPICH_ASYNC_PROGRESS=1`): `request.test()` between pieces of work lets it progress.
//! - The Views are kept alive by the request (Kokkos Views count their references); their
//!   memory must not be written (send) nor read (recv) before wait() returns.
//! - Memory MPI reads directly only: host-accessible memory, or device memory when MPI's
//!   non-blocking collectives take device pointers (kdist::mpi::gpu_aware_non_blocking(), or
//!   `KDIST_MPI_GPU_AWARE` defined at compile time). A host copy of device memory would have to
//!   be written back after the wait: a device View with an MPI that cannot read it is a
//!   kdist::ValueError on every process; use the blocking kdist::all_reduce, which stages it.
//! - `ReduceOp::sum`, `max`, `min` (`mean` would need a division after the wait: a ValueError).
//! - wait() is watched like every kdist collective: past the collective timeout
//!   (kdist::set_collective_timeout, KDIST_COLLECTIVE_TIMEOUT) the job ends with a message naming
//!   the collective, the step, the mesh axis and the processes that did not arrive.
//! - A request still running when it is destroyed is waited for (an MPI collective cannot be
//!   cancelled, and its buffers must outlive it).
//! - Start the collectives of a communicator in the same order on every process, as MPI requires.
//!
//! \code
//! auto request = kdist::start_all_reduce(space, grad, kdist::ReduceOp::sum, mesh.comm("data"));
//! other_work();        // overlaps the reduction
//! request.wait();      // grad holds the sum
//! \endcode

#include <mpi.h>

#include <Kokkos_Core.hpp>
#include <cstdint>
#include <exception>
#include <kdist/parallel/collectives.hpp>
#include <kdist/parallel/concepts.hpp>
#include <kdist/parallel/detail/collective_split.hpp>
#include <kdist/parallel/detail/watchdog.hpp>
#include <kdist/parallel/mpi/communicator.hpp>
#include <kdist/parallel/mpi/datatype.hpp>
#include <kdist/parallel/mpi/gpu_aware.hpp>
#include <memory>
#include <string>
#include <utility>

namespace kdist {

//! A started non-blocking collective (kdist::start_all_reduce). Move-only.
class CollectiveRequest {
 public:
  CollectiveRequest() = default;
  CollectiveRequest(const CollectiveRequest&) = delete;
  CollectiveRequest& operator=(const CollectiveRequest&) = delete;
  CollectiveRequest(CollectiveRequest&& other) noexcept { *this = std::move(other); }
  CollectiveRequest& operator=(CollectiveRequest&& other) noexcept {
    if (this != &other) {
      finish_quietly();
      request_ = std::exchange(other.request_, MPI_REQUEST_NULL);
      comm_ = other.comm_;
      name_ = other.name_;
      sequence_ = other.sequence_;
      timeout_ns_ = other.timeout_ns_;
      buffers_ = std::move(other.buffers_);
    }
    return *this;
  }
  ~CollectiveRequest() { finish_quietly(); }

  //! Whether the collective was started and has not been seen complete yet.
  [[nodiscard]] bool active() const noexcept { return request_ != MPI_REQUEST_NULL; }

  //! Lets MPI progress; true once the collective is complete (then the results are in place).
  bool test() {
    if (!active()) return true;
    int done = 0;
    mpi::detail::check_mpi(MPI_Test(&request_, &done, MPI_STATUS_IGNORE), name_);
    if (done) buffers_.reset();
    return done != 0;
  }

  //! Completes the collective: on return its results are in place. Past the collective timeout
  //! the job ends (detail/watchdog.hpp). Errors: kdist::RuntimeError when MPI fails.
  void wait() {
    if (!active()) return;
    if (timeout_ns_ == 0) {
      mpi::detail::check_mpi(MPI_Wait(&request_, MPI_STATUS_IGNORE), name_);
    } else {
      detail::watchdog::wait(request_, comm_, name_, sequence_, timeout_ns_);
    }
    buffers_.reset();
  }

  //! (kdist internals) Adopts `request`, started on `comm` by the collective `name`, keeping
  //! `buffers` alive until it completes. Reads the collective timeout and, when it is on, counts
  //! the collective among the watched ones on `comm` (same order on every process).
  CollectiveRequest(MPI_Request request, MPI_Comm comm, const char* name,
                    std::shared_ptr<const void> buffers)
      : request_(request),
        comm_(comm),
        name_(name),
        timeout_ns_(detail::watchdog::timeout_ns()),
        buffers_(std::move(buffers)) {
    if (timeout_ns_ != 0) sequence_ = detail::watchdog::next_sequence(comm);
  }

 private:
  void finish_quietly() noexcept {
    if (!active()) return;
    try {
      wait();
    } catch (...) {
      std::terminate();  // MPI failed under a collective whose buffers are about to go
    }
  }

  MPI_Request request_ = MPI_REQUEST_NULL;
  MPI_Comm comm_ = MPI_COMM_NULL;
  const char* name_ = "";
  std::uint64_t sequence_ = 0;
  std::int64_t timeout_ns_ = 0;
  std::shared_ptr<const void> buffers_;
};

namespace detail::collectives {
//! Whether MPI may be handed View V's memory in a non-blocking collective: host memory always,
//! device memory when the MPI library's non-blocking collectives take device pointers.
template <class V>
bool non_blocking_can_access() {
  if constexpr (mpi_can_access_v<V>) {
    return true;
  } else {
    return mpi::gpu_aware_non_blocking();
  }
}
inline void check_non_blocking_memory(bool readable, const char* who) {
  if (!readable) {
    throw_value_error(who,
                      "a View in device memory, and this MPI's non-blocking collectives do not "
                      "take device pointers (kdist::mpi::gpu_aware_non_blocking() is false: "
                      "KDIST_MPI_GPU_AWARE is 0 or blocking, or the library says so); use the "
                      "blocking kdist::all_reduce, which stages it through the host, or a "
                      "GPU-aware MPI (docs/gpu.md)");
  }
}
inline void check_non_blocking_op(ReduceOp op, const char* who) {
  if (op == ReduceOp::mean) {
    throw_value_error(who,
                      "ReduceOp::mean is not available without blocking (the division would "
                      "have to follow the wait); reduce with ReduceOp::sum and divide by the "
                      "communicator's size after wait()");
  }
}
}  // namespace detail::collectives

//! Starts reducing `send` over the processes of `comm` into `recv` (MPI_Iallreduce); the
//! results are in `recv` once the returned request's wait() returns. `send` and `recv` may be
//! the same View (in place). Preconditions and errors of kdist::all_reduce, and a ValueError for
//! ReduceOp::mean. Collective: every process of `comm` starts it, in the same order.
template <KokkosExecutionSpace Space, KokkosView SendView, KokkosView RecvView,
          MpiCommunicator Comm>
[[nodiscard]] CollectiveRequest start_all_reduce(const Space& space, const SendView& send,
                                                 const RecvView& recv, ReduceOp op,
                                                 const Comm& comm) {
  namespace dc = detail::collectives;
  if constexpr (dc::check_pair_types<SendView, RecvView>() && dc::check_reducible<RecvView>()) {
    constexpr const char* who = "kdist::start_all_reduce";
    detail::tell_split_cannot_take(who);  // its wait is elsewhere: not a host call of a graph
    dc::check_arguments(dc::raw(comm), who,
                        {{"the reduction", static_cast<long long>(op)},
                         {"the element count", static_cast<long long>(recv.size())}},
                        [&] {
                          dc::check_non_blocking_memory(dc::non_blocking_can_access<SendView>() &&
                                                            dc::non_blocking_can_access<RecvView>(),
                                                        who);
                          dc::check_non_blocking_op(op, who);
                          dc::check_elementwise_pair(send, recv, who);
                        });
    using T = typename RecvView::non_const_value_type;
    const int count = dc::to_count(recv.size(), who);
    space.fence();  // work on `space` that writes `send` is done before MPI reads it
    const void* send_ptr = send.data();
    if (static_cast<const void*>(send.data()) == static_cast<const void*>(recv.data())) {
      send_ptr = MPI_IN_PLACE;  // the same memory: MPI forbids aliased buffers
    }
    MPI_Request request = MPI_REQUEST_NULL;
    // A device View's reduction runs inside MPI (not kdist's host user op for 64-bit unsigned).
    constexpr bool on_host = dc::on_host_v<false, SendView> && dc::on_host_v<false, RecvView>;
    mpi::detail::check_mpi(
        MPI_Iallreduce(send_ptr, recv.data(), count, mpi::datatype<T>(),
                       dc::to_mpi_op<T, on_host>(op, who), dc::raw(comm), &request),
        "kdist::start_all_reduce: MPI_Iallreduce");
    auto buffers = std::make_shared<const std::pair<SendView, RecvView>>(send, recv);
    return CollectiveRequest(request, dc::raw(comm), "kdist::all_reduce", std::move(buffers));
  } else {
    return CollectiveRequest();
  }
}

//! In-place start_all_reduce: `view` becomes the reduction over `comm` once wait() returns.
template <KokkosExecutionSpace Space, KokkosView View, MpiCommunicator Comm>
[[nodiscard]] CollectiveRequest start_all_reduce(const Space& space, const View& view, ReduceOp op,
                                                 const Comm& comm) {
  return start_all_reduce(space, view, view, op, comm);
}

namespace detail {

//! Starts an in-place MPI_Iallgatherv over `comm` of `buffer`, in elements of `type`: this
//! process's part is already at its displacement. `counts` and `displs` (one per process) outlive
//! the request. For buffers kdist packs itself (the optimizer state's parts, the variables owned
//! whole: nn/train/gradient_sync.hpp, nn/train/optimizer_state_shards.hpp); `what` names the call in errors.
inline CollectiveRequest start_all_gather_v_in_place(void* buffer, const int* counts,
                                                     const int* displs, MPI_Datatype type,
                                                     MPI_Comm comm, const char* what) {
  tell_split_cannot_take(what);
  MPI_Request request = MPI_REQUEST_NULL;
  mpi::detail::check_mpi(MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buffer, counts, displs,
                                         type, comm, &request),
                         what);
  return CollectiveRequest(request, comm, "kdist::all_gather", nullptr);
}

//! Starts an MPI_Ialltoallv over `comm` of elements of `type`: `send_counts[p]` elements from
//! `send_displs[p]` of `send` go to process p, process p's `recv_counts[p]` land at
//! `recv_displs[p]` of `recv`. The four arrays and both buffers outlive the request. For buffers
//! kdist packs itself (ZeRO-1's reduce-scatter moving bfloat16: nn/train/optimizer_state_shards.hpp).
inline CollectiveRequest start_all_to_all_v(const void* send, const int* send_counts,
                                            const int* send_displs, void* recv,
                                            const int* recv_counts, const int* recv_displs,
                                            MPI_Datatype type, MPI_Comm comm, const char* what) {
  tell_split_cannot_take(what);
  MPI_Request request = MPI_REQUEST_NULL;
  mpi::detail::check_mpi(MPI_Ialltoallv(send, send_counts, send_displs, type, recv, recv_counts,
                                        recv_displs, type, comm, &request),
                         what);
  return CollectiveRequest(request, comm, "kdist::all_to_all", nullptr);
}

//! Starts summing `send` (the counts' total of elements) over `comm` into this process's
//! `counts[rank]` elements at `recv` (MPI_Ireduce_scatter); `send` null: in place, `recv` holds
//! the whole block and MPI leaves the part at its start. `counts` outlives the request.
template <class T>
CollectiveRequest start_reduce_scatter_v(const T* send, T* recv, const int* counts, MPI_Comm comm,
                                         const char* what) {
  tell_split_cannot_take(what);
  MPI_Request request = MPI_REQUEST_NULL;
  mpi::detail::check_mpi(
      MPI_Ireduce_scatter(send == nullptr ? MPI_IN_PLACE : static_cast<const void*>(send), recv,
                          counts, mpi::datatype<T>(), MPI_SUM, comm, &request),
      what);
  return CollectiveRequest(request, comm, "kdist::reduce_scatter", nullptr);
}

}  // namespace detail

}  // namespace kdist
