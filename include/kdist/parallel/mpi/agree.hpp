#pragma once
//! \file parallel/mpi/agree.hpp
//! `kdist::mpi::agree`: turn a check that one rank made into the same exception on every rank.
//!
//! A rank that finds its input wrong and throws on its own leaves the other ranks waiting in the
//! next collective, forever. `agree` is one `MPI_Allreduce` of a flag: if any rank failed, every
//! rank throws the same exception, carrying the message of the lowest failing rank (which it
//! broadcasts). Collective: every rank of `comm` must call it.
//!
//! \code
//! const bool ok = x.extent(0) % comm_size == 0;
//! kdist::mpi::agree(comm, ok, ok ? "" : "extent " + std::to_string(x.extent(0)) + " is not a
//! multiple of ..."); \endcode

#include <mpi.h>

#include <kdist/core/error.hpp>
#include <kdist/parallel/detail/collective_split.hpp>
#include <kdist/parallel/detail/watchdog.hpp>
#include <kdist/parallel/mpi/communicator.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>

namespace kdist::mpi {

namespace detail {

//! What `agree_on` found when some rank failed: the lowest failing rank, its message and the
//! caller-chosen `kind` number it passed (so a caller can pick an exception type per failure).
struct Disagreement {
  int rank = 0;
  int kind = 0;
  std::string message;
};

//! The collective behind `agree`: empty when every rank is ok, else what the lowest failing rank
//! said. One MPI_Allreduce when all are ok; two MPI_Bcast more when one is not.
[[nodiscard]] inline std::optional<Disagreement> agree_on(MPI_Comm comm, bool local_ok,
                                                          std::string_view local_message,
                                                          int kind = 0) {
  kdist::detail::tell_split_cannot_take("kdist::mpi::agree (a flag the host computed)");
  int rank = 0;
  int size = 0;
  check_mpi(MPI_Comm_rank(comm, &rank), "kdist::mpi::agree: MPI_Comm_rank");
  check_mpi(MPI_Comm_size(comm, &size), "kdist::mpi::agree: MPI_Comm_size");
  const int mine = local_ok ? size : rank;
  int first = size;
  kdist::detail::watchdog::run(
      comm, "kdist::mpi::agree", "kdist::mpi::agree: MPI_Allreduce",
      [&](MPI_Request* r) { return MPI_Iallreduce(&mine, &first, 1, MPI_INT, MPI_MIN, comm, r); },
      [&] { return MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, comm); });
  if (first == size) [[likely]] {
    return std::nullopt;
  }
  Disagreement out;
  out.rank = first;
  int header[2] = {kind, static_cast<int>(local_message.size())};
  kdist::detail::watchdog::run(
      comm, "kdist::mpi::agree", "kdist::mpi::agree: MPI_Bcast",
      [&](MPI_Request* r) { return MPI_Ibcast(header, 2, MPI_INT, first, comm, r); },
      [&] { return MPI_Bcast(header, 2, MPI_INT, first, comm); });
  out.kind = header[0];
  if (rank == first) {
    out.message.assign(local_message);
  } else {
    out.message.resize(static_cast<std::size_t>(header[1]));
  }
  kdist::detail::watchdog::run(
      comm, "kdist::mpi::agree", "kdist::mpi::agree: MPI_Bcast",
      [&](MPI_Request* r) {
        return MPI_Ibcast(out.message.data(), header[1], MPI_CHAR, first, comm, r);
      },
      [&] { return MPI_Bcast(out.message.data(), header[1], MPI_CHAR, first, comm); });
  return out;
}

}  // namespace detail

//! Collective over `comm`. Returns when `local_ok` is true on every rank; otherwise every rank
//! throws `Exception` (default kdist::ValueError) with the `local_message` of the lowest rank
//! whose `local_ok` was false. `local_message` is only read on failing ranks.
//! Errors: kdist::RuntimeError if an MPI call fails.
template <class Exception = ValueError>
inline void agree(MPI_Comm comm, bool local_ok, std::string_view local_message) {
  static_assert(std::is_constructible_v<Exception, std::string>,
                "kdist::mpi::agree<Exception>: Exception must be constructible from std::string");
  if (auto failure = detail::agree_on(comm, local_ok, local_message)) {
    throw Exception(std::move(failure->message));
  }
}

//! The same over a kdist::mpi::Communicator.
template <class Exception = ValueError>
inline void agree(const Communicator& comm, bool local_ok, std::string_view local_message) {
  agree<Exception>(comm.get(), local_ok, local_message);
}

}  // namespace kdist::mpi
