#pragma once
//! \file parallel/detail/collectives_checks.hpp
//! What the collectives of collectives.hpp check. At compile time, the View types, one
//! static_assert per rule (the entry points compile their body only when every rule holds, so a
//! failed rule is one error). At run time, the arguments: contiguity, sizes, roots, counts that fit
//! MPI's int; on the failing process by default, agreed over the communicator and compared between
//! processes with KDIST_CHECK_COLLECTIVES.

#include <mpi.h>

#include <climits>
#include <complex>
#include <cstddef>
#include <cstdlib>
#include <initializer_list>
#include <kdist/core/error.hpp>
#include <kdist/parallel/mpi/agree.hpp>
#include <kdist/parallel/mpi/communicator.hpp>
#include <kdist/parallel/mpi/datatype.hpp>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace kdist::detail::collectives {

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
  constexpr bool bf16 = is_sixteen_bit_float_v<T>;
  static_assert(!bf16,
                "kdist::all_reduce / reduce_scatter: bfloat16 and float16 values are not summed by "
                "MPI (the sum would be of their bits); sum float32 values moving bfloat16 with "
                "kdist::all_reduce_in_bfloat16, or cast to float first");
  constexpr bool ok =
      !bf16 && (!mpi::has_datatype_v<T> || (std::is_arithmetic_v<T> && !std::is_same_v<T, bool>) ||
                is_complex<T>::value);
  static_assert(ok || bf16,
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

//! An element-wise pair (all_reduce, start_all_reduce): both contiguous, of the same size.
template <class S, class R>
inline void check_elementwise_pair(const S& send, const R& recv, const char* who) {
  check_contiguous(send, who, "send");
  check_contiguous(recv, who, "recv");
  if (send.size() != recv.size()) [[unlikely]] {
    throw_value_error(who, "send has " + std::to_string(send.size()) + " elements but recv has " +
                               std::to_string(recv.size()) + "; they must have the same number");
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

}  // namespace kdist::detail::collectives
