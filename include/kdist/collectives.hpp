#pragma once
//! \file collectives.hpp
//! MPI collectives on Kokkos Views: `kdist::all_reduce`, `all_gather`, `reduce_scatter`,
//! `broadcast`, `all_to_all`, with `kdist::ReduceOp { sum, max, min, mean }`.
//!
//! Arguments in the Kokkos-comm order: execution space, views, then the communicator, which is a
//! `kdist::mpi::Communicator` (for example `MeshCommunicators::comm("model")`) or a raw MPI_Comm.
//!
//! - Views: contiguous (`span_is_contiguous()`), of any rank, of a type with an MPI datatype
//!   (kdist/mpi/datatype.hpp). The collectives see a View as its elements in memory order, so
//!   "block r" of an all_gather result is elements [r*n, (r+1)*n) of its memory: row r of a
//!   LayoutRight (P, n) View. Two Views of rank >= 2 passed together must share their layout.
//! - Every call fences `space` before MPI touches a buffer, so work enqueued on `space` that
//!   writes the send View is complete. On return the results are in place.
//! - A View in memory MPI can read directly is passed to MPI as it is: no allocation, no copy.
//!   That is host-accessible memory, device memory when the MPI library says it takes device
//!   pointers (kdist::mpi::gpu_aware(), asked once at run time; `KDIST_MPI_GPU_AWARE=0|1` in the
//!   environment overrides it), and any memory when the macro `KDIST_MPI_GPU_AWARE` is defined.
//!   Other Views (device memory, MPI not GPU-aware) go through a host copy.
//! - Each entry point is a Kokkos profiling region named "kdist::all_reduce" etc.
//! - Checks made on one rank only (contiguity, sizes, root) throw kdist::ValueError on that rank
//!   before any communication; pass the same sizes on every rank, as MPI requires.
//!
//! \code
//! Kokkos::View<double*> grad("grad", n);
//! kdist::all_reduce(Kokkos::DefaultExecutionSpace(), grad, kdist::ReduceOp::mean,
//! mesh.comm("data")); \endcode

#include <mpi.h>

#include <Kokkos_Core.hpp>
#include <climits>
#include <cstdlib>
#include <complex>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <kdist/error.hpp>
#include <kdist/mpi/agree.hpp>
#include <kdist/mpi/communicator.hpp>
#include <kdist/mpi/datatype.hpp>
#include <kdist/mpi/gpu_aware.hpp>
#include <initializer_list>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace kdist {

//! The reduction of all_reduce and reduce_scatter. `mean` is the sum divided by the number of
//! processes of the communicator (integer division for integer types).
enum class ReduceOp { sum, max, min, mean };

namespace detail::collectives {

template <class T>
concept exec_space = Kokkos::is_execution_space<T>::value;

template <class T>
concept view = Kokkos::is_view<T>::value;

//! A kdist::mpi::Communicator or a raw MPI_Comm.
template <class T>
concept communicator = std::same_as<T, MPI_Comm> || std::same_as<T, mpi::Communicator>;

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

//! A Kokkos profiling region for the lifetime of the object.
class Region {
 public:
  explicit Region(const std::string& name) { Kokkos::Profiling::pushRegion(name); }
  Region(const Region&) = delete;
  Region& operator=(const Region&) = delete;
  ~Region() { Kokkos::Profiling::popRegion(); }
};

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

template <class T>
struct is_complex : std::false_type {};
template <class T>
struct is_complex<std::complex<T>> : std::true_type {};

//! Compile-time checks of the View arguments, one static_assert per rule. Each returns whether all
//! its rules hold; the entry points compile their body only then (`if constexpr`), so a failed
//! rule is one error, not a cascade.
template <class V>
consteval bool check_view_type() {
  constexpr bool ok = mpi::has_datatype_v<typename V::value_type>;
  static_assert(
      ok,
      "kdist collectives: the View's value type has no MPI datatype; use an arithmetic type, "
      "std::complex, std::byte, or specialise kdist::mpi::datatype_traits");
  return ok;
}
template <class V>
consteval bool check_writable() {
  constexpr bool ok = !std::is_const_v<typename V::value_type>;
  static_assert(ok, "kdist collectives: the recv View must not be const");
  return ok;
}
template <class S, class R>
consteval bool check_pair_types() {
  constexpr bool same =
      std::is_same_v<typename S::non_const_value_type, typename R::non_const_value_type>;
  static_assert(same, "kdist collectives: the send and recv Views must have the same value type");
  constexpr auto send_rank = static_cast<std::size_t>(S::rank);
  constexpr auto recv_rank = static_cast<std::size_t>(R::rank);
  constexpr bool layouts = send_rank < 2 || recv_rank < 2 || send_rank != recv_rank ||
                           std::is_same_v<typename S::array_layout, typename R::array_layout>;
  static_assert(
      layouts,
      "kdist collectives: send and recv Views of the same rank >= 2 must have the same layout "
      "(the collectives work on elements in memory order)");
  return check_view_type<S>() && check_writable<R>() && same && layouts;
}
template <class V>
consteval bool check_reducible() {
  using T = typename V::non_const_value_type;
  constexpr bool ok = !mpi::has_datatype_v<T> ||
                      (std::is_arithmetic_v<T> && !std::is_same_v<T, bool>) || is_complex<T>::value;
  static_assert(ok,
                "kdist::all_reduce / reduce_scatter: the value type must be a number (not bool)");
  return ok;
}

[[noreturn]] inline void throw_value_error(const char* who, const std::string& what) {
  throw ValueError(std::string(who) + ": " + what);
}

//! KDIST_CHECK_COLLECTIVES's value (nullptr when unset) as a switch: unset, empty or "0" off,
//! "1" on; anything else is a kdist::ValueError naming it.
inline bool checking_from(const char* v) {
  if (v == nullptr || *v == '\0' || std::string_view(v) == "0") return false;
  if (std::string_view(v) == "1") return true;
  throw ValueError(std::string("kdist: KDIST_CHECK_COLLECTIVES is '") + v +
                   "'; set it to 1 (check collectives' arguments across processes) or 0");
}

//! Whether collectives check their arguments across processes (KDIST_CHECK_COLLECTIVES=1 in the
//! environment, or the macro KDIST_CHECK_COLLECTIVES at compile time); read once.
inline bool checking_across_processes() {
#if defined(KDIST_CHECK_COLLECTIVES)
  return true;
#else
  static const bool on = checking_from(std::getenv("KDIST_CHECK_COLLECTIVES"));
  return on;
#endif
}

//! One argument of a collective that every process must pass alike (a size, a root, an op).
struct SameEverywhere {
  const char* name;
  long long value;
};

//! Runs a collective's local argument checks. Normally they throw on the process that fails
//! them (a caller contract: every process passes the same sizes and root, as MPI requires). In
//! checking mode (checking_across_processes()) the processes first agree: a check failed on one
//! process is the same kdist::ValueError on all (mpi::agree), and arguments that differ between
//! processes (`same`) are an error naming them, where MPI would hang or read the wrong memory.
//! Costs two small MPI_Allreduce per call in checking mode, nothing otherwise.
template <class Checks>
void check_arguments(MPI_Comm comm, const char* who, std::initializer_list<SameEverywhere> same,
                     Checks&& local_checks) {
  if (!checking_across_processes()) {
    local_checks();
    return;
  }
  bool ok = true;
  std::string message;
  try {
    local_checks();
  } catch (const ValueError& e) {
    ok = false;
    message = e.what();
  }
  mpi::agree(comm, ok, message);
  std::vector<long long> mins;
  for (const auto& f : same) mins.push_back(f.value);
  for (const auto& f : same) mins.push_back(-f.value);  // MIN of -x is -MAX of x
  mpi::detail::check_mpi(MPI_Allreduce(MPI_IN_PLACE, mins.data(), static_cast<int>(mins.size()),
                                       MPI_LONG_LONG, MPI_MIN, comm),
                         "kdist collectives: MPI_Allreduce (KDIST_CHECK_COLLECTIVES)");
  std::size_t i = 0;
  for (const auto& f : same) {
    const long long lo = mins[i];
    const long long hi = -mins[i + same.size()];
    if (lo != hi) {
      throw_value_error(who, std::string("the processes disagree on ") + f.name + " (from " +
                                 std::to_string(lo) + " to " + std::to_string(hi) +
                                 "); every process of the communicator must pass the same "
                                 "(found by KDIST_CHECK_COLLECTIVES)");
    }
    ++i;
  }
}

template <class V>
inline void check_contiguous(const V& v, const char* who, const char* name) {
  if (!v.span_is_contiguous()) [[unlikely]] {
    throw_value_error(
        who,
        std::string("the ") + name + " View (\"" + v.label() +
            "\") is not contiguous (a strided subview?); copy it into a contiguous View first");
  }
}

//! The element count as MPI's int; kdist::ValueError when it does not fit.
inline int to_count(std::size_t n, const char* who) {
  if (n > static_cast<std::size_t>(INT_MAX)) [[unlikely]] {
    throw_value_error(who, std::to_string(n) +
                               " elements per message is more than MPI's int count allows (" +
                               std::to_string(INT_MAX) + "); split the View");
  }
  return static_cast<int>(n);
}

template <class T>
inline MPI_Op to_mpi_op(ReduceOp op, const char* who) {
  switch (op) {
    case ReduceOp::sum:
    case ReduceOp::mean:
      return MPI_SUM;
    case ReduceOp::max:
    case ReduceOp::min:
      if constexpr (is_complex<T>::value) {
        throw_value_error(who, std::string("ReduceOp::") + (op == ReduceOp::max ? "max" : "min") +
                                   " is not defined for complex values; use sum or mean");
      } else {
        return op == ReduceOp::max ? MPI_MAX : MPI_MIN;
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
//! copied) or a host copy (Stage = true), copied in from the View when asked and back by
//! write_back().
template <bool Stage, class V>
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
template <class V>
class MpiBuffer<true, V> {
 public:
  template <class Space>
  MpiBuffer(const Space& space, const V& v, bool copy_in)
      : view_(v),
        host_(Kokkos::view_alloc(Kokkos::WithoutInitializing, "kdist::mpi_host_copy"), v.size()) {
    if (copy_in) {
      Kokkos::deep_copy(space, host_, flat(v));
    }
  }
  [[nodiscard]] auto* data() const noexcept { return host_.data(); }
  static constexpr bool host_copy = true;
  template <class Space>
  void write_back(const Space& space) const {
    Kokkos::deep_copy(space, flat(view_), host_);
    space.fence();
  }

 private:
  V view_;
  Kokkos::View<typename V::non_const_value_type*, Kokkos::HostSpace> host_;
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

template <bool StageS, bool StageR, class Space, class S, class R>
void all_reduce(const Space& space, const S& send, const R& recv, ReduceOp op, MPI_Comm comm,
                int comm_size) {
  constexpr const char* who = "kdist::all_reduce";
  using T = typename R::non_const_value_type;
  const MPI_Op mpi_op = to_mpi_op<T>(op, who);
  const int count = to_count(recv.size(), who);
  MpiBuffer<StageS, S> in(space, send, true);
  MpiBuffer<StageR, R> out(space, recv, false);
  space.fence();
  const void* send_ptr = in.data();
  if (!StageS && !StageR &&
      static_cast<const void*>(in.data()) == static_cast<const void*>(out.data())) {
    send_ptr = MPI_IN_PLACE;  // the same memory: MPI forbids aliased buffers
  }
  mpi::detail::check_mpi(
      MPI_Allreduce(send_ptr, out.data(), count, mpi::datatype<T>(), mpi_op, comm),
      "kdist::all_reduce: MPI_Allreduce");
  if (op == ReduceOp::mean) {
    divide<StageR, R>(space, out.data(), recv.size(), comm_size);
  }
  out.write_back(space);
}

template <bool Stage, class Space, class V>
void all_reduce_in_place(const Space& space, const V& view, ReduceOp op, MPI_Comm comm,
                         int comm_size) {
  constexpr const char* who = "kdist::all_reduce";
  using T = typename V::non_const_value_type;
  const MPI_Op mpi_op = to_mpi_op<T>(op, who);
  const int count = to_count(view.size(), who);
  MpiBuffer<Stage, V> buf(space, view, true);
  space.fence();
  mpi::detail::check_mpi(
      MPI_Allreduce(MPI_IN_PLACE, buf.data(), count, mpi::datatype<T>(), mpi_op, comm),
      "kdist::all_reduce: MPI_Allreduce");
  if (op == ReduceOp::mean) {
    divide<Stage, V>(space, buf.data(), view.size(), comm_size);
  }
  buf.write_back(space);
}

template <bool StageS, bool StageR, class Space, class S, class R>
void all_gather(const Space& space, const S& send, const R& recv, MPI_Comm comm) {
  using T = typename R::non_const_value_type;
  const int count = to_count(send.size(), "kdist::all_gather");
  MpiBuffer<StageS, S> in(space, send, true);
  MpiBuffer<StageR, R> out(space, recv, false);
  space.fence();
  mpi::detail::check_mpi(MPI_Allgather(in.data(), count, mpi::datatype<T>(), out.data(), count,
                                       mpi::datatype<T>(), comm),
                         "kdist::all_gather: MPI_Allgather");
  out.write_back(space);
}

template <bool StageS, bool StageR, class Space, class S, class R>
void reduce_scatter(const Space& space, const S& send, const R& recv, ReduceOp op, MPI_Comm comm,
                    int comm_size) {
  constexpr const char* who = "kdist::reduce_scatter";
  using T = typename R::non_const_value_type;
  const MPI_Op mpi_op = to_mpi_op<T>(op, who);
  const int count = to_count(recv.size(), who);
  MpiBuffer<StageS, S> in(space, send, true);
  MpiBuffer<StageR, R> out(space, recv, false);
  space.fence();
  mpi::detail::check_mpi(
      MPI_Reduce_scatter_block(in.data(), out.data(), count, mpi::datatype<T>(), mpi_op, comm),
      "kdist::reduce_scatter: MPI_Reduce_scatter_block");
  if (op == ReduceOp::mean) {
    divide<StageR, R>(space, out.data(), recv.size(), comm_size);
  }
  out.write_back(space);
}

template <bool Stage, class Space, class V>
void broadcast(const Space& space, const V& view, int root, MPI_Comm comm, int rank) {
  using T = typename V::non_const_value_type;
  const int count = to_count(view.size(), "kdist::broadcast");
  MpiBuffer<Stage, V> buf(space, view, rank == root);
  space.fence();
  mpi::detail::check_mpi(MPI_Bcast(buf.data(), count, mpi::datatype<T>(), root, comm),
                         "kdist::broadcast: MPI_Bcast");
  if (rank != root) {
    buf.write_back(space);
  }
}

template <bool StageS, bool StageR, class Space, class S, class R>
void all_to_all(const Space& space, const S& send, const R& recv, MPI_Comm comm, int comm_size) {
  using T = typename R::non_const_value_type;
  const int block =
      to_count(send.size() / static_cast<std::size_t>(comm_size), "kdist::all_to_all");
  MpiBuffer<StageS, S> in(space, send, true);
  MpiBuffer<StageR, R> out(space, recv, false);
  space.fence();
  mpi::detail::check_mpi(MPI_Alltoall(in.data(), block, mpi::datatype<T>(), out.data(), block,
                                      mpi::datatype<T>(), comm),
                         "kdist::all_to_all: MPI_Alltoall");
  out.write_back(space);
}

}  // namespace detail::collectives

//! Reduces `send` over the processes of `comm` into `recv` on every process (MPI_Allreduce):
//! recv[i] = op over ranks of send[i]. `mean` divides the sum by comm's size.
//! Preconditions: send.size() == recv.size() on every rank; both contiguous; recv not const.
//! `send` and `recv` may be the same View (then it runs in place).
//! Errors: kdist::ValueError for sizes that differ (naming both), a View that is not
//! contiguous, max/min of complex values; kdist::RuntimeError when MPI fails.
//! \code
//! kdist::all_reduce(space, local_loss, total_loss, kdist::ReduceOp::sum, MPI_COMM_WORLD);
//! \endcode
template <class Space, class SendView, class RecvView, class Comm>
requires detail::collectives::exec_space<Space> && detail::collectives::view<SendView> &&
    detail::collectives::view<RecvView> && detail::collectives::communicator<Comm>
void all_reduce(const Space& space, const SendView& send, const RecvView& recv, ReduceOp op,
                const Comm& comm) {
  namespace dc = detail::collectives;
  if constexpr (dc::check_pair_types<SendView, RecvView>() && dc::check_reducible<RecvView>()) {
    dc::Region region(dc::all_reduce_name());
    constexpr const char* who = "kdist::all_reduce";
    dc::check_arguments(
        dc::raw(comm), who,
        {{"the reduction", static_cast<long long>(op)},
         {"the element count", static_cast<long long>(recv.size())}},
        [&] {
          dc::check_contiguous(send, who, "send");
          dc::check_contiguous(recv, who, "recv");
          if (send.size() != recv.size()) [[unlikely]] {
            dc::throw_value_error(who, "send has " + std::to_string(send.size()) +
                                           " elements but recv has " + std::to_string(recv.size()) +
                                           "; they must have the same number");
          }
        });
    const int size = op == ReduceOp::mean ? dc::size_of(comm) : 1;
    dc::with_staging<SendView, RecvView>([&](auto stage_s, auto stage_r) {
      dc::all_reduce<decltype(stage_s)::value, decltype(stage_r)::value>(space, send, recv, op, dc::raw(comm), size);
    });
  }
}

//! In-place all_reduce: `view` becomes the reduction of `view` over the processes of `comm`.
//! Errors as for the two-View all_reduce.
//! \code
//! kdist::all_reduce(space, grad, kdist::ReduceOp::mean, mesh.comm("data"));
//! \endcode
template <class Space, class View, class Comm>
requires detail::collectives::exec_space<Space> && detail::collectives::view<View> &&
    detail::collectives::communicator<Comm>
void all_reduce(const Space& space, const View& view, ReduceOp op, const Comm& comm) {
  namespace dc = detail::collectives;
  if constexpr (dc::check_view_type<View>() && dc::check_writable<View>() &&
                dc::check_reducible<View>()) {
    dc::Region region(dc::all_reduce_name());
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
template <class Space, class SendView, class RecvView, class Comm>
requires detail::collectives::exec_space<Space> && detail::collectives::view<SendView> &&
    detail::collectives::view<RecvView> && detail::collectives::communicator<Comm>
void all_gather(const Space& space, const SendView& send, const RecvView& recv, const Comm& comm) {
  namespace dc = detail::collectives;
  if constexpr (dc::check_pair_types<SendView, RecvView>()) {
    dc::Region region(dc::all_gather_name());
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
      dc::all_gather<decltype(stage_s)::value, decltype(stage_r)::value>(space, send, recv, dc::raw(comm));
    });
  }
}

//! Reduces `send` over the processes of `comm` and scatters equal blocks
//! (MPI_Reduce_scatter_block): recv on rank r is the reduction of elements [r*n, (r+1)*n) of
//! send, n = recv.size(). `mean` divides the sum by comm's size.
//! Preconditions: send.size() == recv.size() * comm size; both contiguous.
//! Errors: kdist::ValueError for a send of the wrong size (naming the sizes), a View that is
//! not contiguous, max/min of complex values; kdist::RuntimeError when MPI fails.
template <class Space, class SendView, class RecvView, class Comm>
requires detail::collectives::exec_space<Space> && detail::collectives::view<SendView> &&
    detail::collectives::view<RecvView> && detail::collectives::communicator<Comm>
void reduce_scatter(const Space& space, const SendView& send, const RecvView& recv, ReduceOp op,
                    const Comm& comm) {
  namespace dc = detail::collectives;
  if constexpr (dc::check_pair_types<SendView, RecvView>() && dc::check_reducible<RecvView>()) {
    dc::Region region(dc::reduce_scatter_name());
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
      dc::reduce_scatter<decltype(stage_s)::value, decltype(stage_r)::value>(space, send, recv, op, dc::raw(comm), size);
    });
  }
}

//! Copies `view` of process `root` into `view` on every process of `comm` (MPI_Bcast).
//! Preconditions: the same view.size() on every rank; contiguous; 0 <= root < comm size.
//! Errors: kdist::ValueError for a root outside the communicator or a View that is not
//! contiguous; kdist::RuntimeError when MPI fails.
template <class Space, class View, class Comm>
requires detail::collectives::exec_space<Space> && detail::collectives::view<View> &&
    detail::collectives::communicator<Comm>
void broadcast(const Space& space, const View& view, int root, const Comm& comm) {
  namespace dc = detail::collectives;
  constexpr bool writable = !std::is_const_v<typename View::value_type>;
  static_assert(writable, "kdist::broadcast: the View must not be const");
  if constexpr (dc::check_view_type<View>() && writable) {
    dc::Region region(dc::broadcast_name());
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

//! Exchanges equal blocks between all processes of `comm` (MPI_Alltoall): block j of send on rank
//! i becomes block i of recv on rank j, a block being send.size() / comm size elements in memory
//! order.
//! Preconditions: send.size() == recv.size(), a multiple of comm size; both contiguous.
//! Errors: kdist::ValueError for sizes that differ or do not split into comm-size blocks (naming
//! the sizes), or a View that is not contiguous; kdist::RuntimeError when MPI fails.
template <class Space, class SendView, class RecvView, class Comm>
requires detail::collectives::exec_space<Space> && detail::collectives::view<SendView> &&
    detail::collectives::view<RecvView> && detail::collectives::communicator<Comm>
void all_to_all(const Space& space, const SendView& send, const RecvView& recv, const Comm& comm) {
  namespace dc = detail::collectives;
  if constexpr (dc::check_pair_types<SendView, RecvView>()) {
    dc::Region region(dc::all_to_all_name());
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
      dc::all_to_all<decltype(stage_s)::value, decltype(stage_r)::value>(space, send, recv, dc::raw(comm), size);
    });
  }
}

}  // namespace kdist
