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
//! `kdist::start_all_reduce_in_bfloat16` does the same without blocking (host memory): the
//! gradient sync's form, overlapped with the backward pass.
//!
//! Rounding: each contribution x_p is rounded once (relative error <= 2^-8), the float32 sum adds
//! at most (P - 1) 2^-24 |sum|-sized errors, and the result is rounded once more, so
//!   |result - sum_p x_p| <= 2^-8 (sum_p |x_p|) + 2^-8 |sum_p x_p| (1 + 2^-8) + P 2^-24 sum_p |x_p|,
//! about 2^-7 of the magnitudes summed: a bfloat16 sum, not a float32 one. Values whose sum is
//! exact in bfloat16 (small integers, powers of two) come back exact.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include <Kokkos_Core.hpp>

#include <kdist/core/bfloat16.hpp>
#include <kdist/core/error.hpp>
#include <kdist/parallel/collective_request.hpp>
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

//! The three local passes of a bfloat16 all-reduce over `processes` blocks of `block` elements
//! (see the file's comment): shared by the blocking and the non-blocking forms.
struct Bfloat16Sum {
  std::int64_t n = 0, block = 0, processes = 1;
  float scale = 1.0F;  // 1 / processes for a mean

  //! 1. `flat` rounded into `send`, the padding zeros.
  template <class Space, class Flat, class Bits>
  void round(const Space& space, const Flat& flat, const Bits& send) const {
    const std::int64_t count = n;
    Kokkos::parallel_for(
        "kdist::all_reduce_in_bfloat16::round",
        Kokkos::RangePolicy<Space, Kokkos::IndexType<std::int64_t>>(space, 0, block * processes),
        KOKKOS_LAMBDA(const std::int64_t i) {
          send(i) = i < count ? to_bfloat16_bits(flat(i)) : 0;
        });
  }
  //! 3. This process's block of every process, added in float32 in rank order, into `mine`.
  template <class Space, class Bits>
  void add(const Space& space, const Bits& blocks, const Bits& mine) const {
    const std::int64_t b = block, p_count = processes;
    const float s = scale;
    Kokkos::parallel_for(
        "kdist::all_reduce_in_bfloat16::add",
        Kokkos::RangePolicy<Space, Kokkos::IndexType<std::int64_t>>(space, 0, block),
        KOKKOS_LAMBDA(const std::int64_t k) {
          float sum = 0.0F;
          for (std::int64_t p = 0; p < p_count; ++p) sum += from_bfloat16_bits(blocks(p * b + k));
          mine(k) = to_bfloat16_bits(sum * s);
        });
  }
  //! 4. Every process's sums, gathered into `blocks`, back into `flat`.
  template <class Space, class Flat, class Bits>
  void unpack(const Space& space, const Bits& blocks, const Flat& flat) const {
    Kokkos::parallel_for(
        "kdist::all_reduce_in_bfloat16::unpack",
        Kokkos::RangePolicy<Space, Kokkos::IndexType<std::int64_t>>(space, 0, n),
        KOKKOS_LAMBDA(const std::int64_t i) { flat(i) = from_bfloat16_bits(blocks(i)); });
  }
};

//! The checks both forms make. Errors: see all_reduce_in_bfloat16.
template <class View>
void check_bfloat16_all_reduce(const View& data, ReduceOp op, const char* who) {
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
  detail::check_bfloat16_all_reduce(data, op, who);
  using Memory = typename View::memory_space;
  const std::int64_t n = static_cast<std::int64_t>(data.size());
  const std::int64_t processes = detail::collectives::size_of(comm);
  const std::int64_t block = (n + processes - 1) / processes;
  const detail::Bfloat16Sum sum{n, block, processes,
                                op == ReduceOp::mean ? 1.0F / static_cast<float>(processes) : 1.0F};
  const Kokkos::View<float*, Kokkos::LayoutRight, Memory, Kokkos::MemoryTraits<Kokkos::Unmanaged>>
      flat(data.data(), static_cast<std::size_t>(n));

  std::vector<Kokkos::View<std::uint16_t*, Kokkos::LayoutRight, Memory>> owned;
  using detail::HostScratch;
  const auto send =
      detail::bfloat16_buffer<HostScratch::bfloat16_send>(space, owned, block * processes);
  const auto blocks =
      detail::bfloat16_buffer<HostScratch::bfloat16_blocks>(space, owned, block * processes);
  const auto mine = detail::bfloat16_buffer<HostScratch::bfloat16_sums>(space, owned, block);
  sum.round(space, flat, send);
  all_to_all(space, send, blocks, comm);  // block p of `blocks`: process p's values of my block
  sum.add(space, blocks, mine);
  all_gather(space, mine, blocks, comm);  // every process's sums, in rank order
  sum.unpack(space, blocks, flat);
  space.fence();
}

//! How many bfloat16 elements of scratch start_all_reduce_in_bfloat16 needs for `n` values over
//! `processes` processes.
inline std::size_t bfloat16_all_reduce_scratch(std::size_t n, std::size_t processes) {
  const std::size_t block = (n + processes - 1) / processes;
  return 2 * block * processes + block;
}

//! A started kdist::start_all_reduce_in_bfloat16: the all-to-all runs; start_gather() adds this
//! process's block and starts the all-gather; test() and wait() complete it and write the result.
//! Its two collectives are started at points of the program the caller chooses, so that every
//! process starts them in the same order as its other collectives on the communicator (as MPI
//! requires): an MPI library's completion order, which differs between processes, decides
//! nothing. Move-only; destroying one waits for the collective in flight (an all-gather not
//! started stays so).
class Bfloat16AllReduceRequest {
 public:
  Bfloat16AllReduceRequest() = default;
  Bfloat16AllReduceRequest(Bfloat16AllReduceRequest&&) noexcept = default;
  Bfloat16AllReduceRequest& operator=(Bfloat16AllReduceRequest&&) noexcept = default;
  ~Bfloat16AllReduceRequest() = default;  // each CollectiveRequest waits for itself

  //! Whether the all-gather has been started (or there was nothing to start).
  bool gathering() const noexcept { return stage_ != Stage::exchanging; }

  //! Waits for the all-to-all if it is still running, adds this process's block in float32 and
  //! starts the all-gather. Call at the same point of the program on every process. Nothing to
  //! do once started.
  void start_gather() {
    if (stage_ != Stage::exchanging) return;
    exchange_.wait();
    const Kokkos::DefaultHostExecutionSpace host;
    sum_.add(host, blocks_, mine_);
    host.fence();
    MPI_Request request = MPI_REQUEST_NULL;
    mpi::detail::check_mpi(MPI_Iallgather(mine_.data(), count_, MPI_UINT16_T, blocks_.data(),
                                          count_, MPI_UINT16_T, comm_, &request),
                           "kdist::start_all_reduce_in_bfloat16: MPI_Iallgather");
    gather_ = CollectiveRequest(request, comm_, "kdist::all_reduce_in_bfloat16", keep_);
    stage_ = Stage::gathering;
  }

  //! Lets MPI progress; true once the sum is in the View. False before start_gather().
  bool test() {
    if (stage_ == Stage::done) return true;
    if (stage_ == Stage::exchanging) {
      (void)exchange_.test();  // progress only: the gather starts where the caller says
      return false;
    }
    if (!gather_.test()) return false;
    unpack();
    return true;
  }

  //! Completes the sum (starting the all-gather first if it was not: call it at the same point
  //! of the program on every process then).
  void wait() {
    start_gather();
    if (stage_ == Stage::done) return;
    gather_.wait();
    unpack();
  }

 private:
  template <KokkosView View, MpiCommunicator Comm>
  friend Bfloat16AllReduceRequest start_all_reduce_in_bfloat16(const View&, ReduceOp, const Comm&,
                                                               std::span<std::uint16_t>);
  using Bits = detail::Bfloat16Bits<Kokkos::HostSpace>;
  using Flat = Kokkos::View<float*, Kokkos::LayoutRight, Kokkos::HostSpace,
                            Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
  enum class Stage { exchanging, gathering, done };

  void unpack() {
    const Kokkos::DefaultHostExecutionSpace host;
    sum_.unpack(host, blocks_, flat_);
    host.fence();
    stage_ = Stage::done;
    keep_.reset();
  }

  detail::Bfloat16Sum sum_;
  Bits send_, blocks_, mine_;
  Flat flat_;
  MPI_Comm comm_ = MPI_COMM_NULL;
  int count_ = 0;
  std::shared_ptr<const void> keep_;  // the caller's View, alive until the sum is written
  CollectiveRequest exchange_, gather_;
  Stage stage_ = Stage::done;
};

//! all_reduce_in_bfloat16 without blocking, for host-accessible memory: rounds `data` into
//! `scratch` and starts the all-to-all; the returned request's start_gather() starts the
//! all-gather, and test() / wait() write the result into `data` (see Bfloat16AllReduceRequest),
//! so work between the calls overlaps both. `scratch` (bfloat16_all_reduce_scratch(data.size(),
//! processes) elements) and `data` must stay untouched until the request completes; the request
//! keeps `data`'s View alive. The same bits as all_reduce_in_bfloat16. Collective. Errors: those
//! of all_reduce_in_bfloat16, and kdist::ValueError for a smaller scratch.
template <KokkosView View, MpiCommunicator Comm>
[[nodiscard]] Bfloat16AllReduceRequest start_all_reduce_in_bfloat16(
    const View& data, ReduceOp op, const Comm& comm, std::span<std::uint16_t> scratch) {
  static_assert(
      std::is_same_v<typename View::non_const_value_type, float> &&
          !std::is_const_v<typename View::value_type> &&
          Kokkos::SpaceAccessibility<Kokkos::HostSpace, typename View::memory_space>::accessible,
      "kdist::start_all_reduce_in_bfloat16: the View must hold (non-const) float in "
      "memory the host reaches; for device memory use kdist::all_reduce_in_bfloat16");
  constexpr const char* who = "kdist::start_all_reduce_in_bfloat16";
  detail::check_bfloat16_all_reduce(data, op, who);
  const std::int64_t n = static_cast<std::int64_t>(data.size());
  const std::int64_t processes = detail::collectives::size_of(comm);
  const std::int64_t block = (n + processes - 1) / processes;
  const std::size_t needed =
      bfloat16_all_reduce_scratch(static_cast<std::size_t>(n), static_cast<std::size_t>(processes));
  if (scratch.size() < needed) {
    throw ValueError(std::string(who) + ": the scratch holds " + std::to_string(scratch.size()) +
                     " elements; " + std::to_string(needed) +
                     " are needed (kdist::bfloat16_all_reduce_scratch)");
  }
  detail::tell_split_cannot_take(who);  // its steps run in the caller's calls: not a graph's
  Bfloat16AllReduceRequest r;
  r.sum_ = {n, block, processes,
            op == ReduceOp::mean ? 1.0F / static_cast<float>(processes) : 1.0F};
  const auto at = [&](std::int64_t offset, std::int64_t count) {
    return Bfloat16AllReduceRequest::Bits(scratch.data() + offset, static_cast<std::size_t>(count));
  };
  r.send_ = at(0, block * processes);
  r.blocks_ = at(block * processes, block * processes);
  r.mine_ = at(2 * block * processes, block);
  r.flat_ = Bfloat16AllReduceRequest::Flat(data.data(), static_cast<std::size_t>(n));
  r.comm_ = detail::collectives::raw(comm);
  r.count_ = detail::collectives::to_count(static_cast<std::size_t>(block), who);
  r.keep_ = std::make_shared<const View>(data);
  const Kokkos::DefaultHostExecutionSpace host;
  r.sum_.round(host, r.flat_, r.send_);
  host.fence();
  MPI_Request request = MPI_REQUEST_NULL;
  mpi::detail::check_mpi(MPI_Ialltoall(r.send_.data(), r.count_, MPI_UINT16_T, r.blocks_.data(),
                                       r.count_, MPI_UINT16_T, r.comm_, &request),
                         "kdist::start_all_reduce_in_bfloat16: MPI_Ialltoall");
  r.exchange_ = CollectiveRequest(request, r.comm_, "kdist::all_reduce_in_bfloat16", r.keep_);
  r.stage_ = Bfloat16AllReduceRequest::Stage::exchanging;
  return r;
}

}  // namespace kdist
