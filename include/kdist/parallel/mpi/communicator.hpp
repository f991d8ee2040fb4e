#pragma once
//! \file parallel/mpi/communicator.hpp
//! `kdist::mpi::Communicator`: an MPI communicator handle that frees what it owns (RAII).
//!
//! An owning Communicator calls `MPI_Comm_free` when it goes away (unless MPI is finalised by
//! then, when there is nothing left to free); a borrowed one (`Communicator::world()`,
//! `Communicator::borrow(c)`) never does. Move-only. rank() and size() are read once, at
//! construction, so asking for them costs nothing.
//!
//! \code
//! auto row = kdist::mpi::Communicator::world().split(rank / 2, rank);  // owning, freed by RAII
//! MPI_Barrier(row.get());
//! \endcode

#include <mpi.h>

#include <kdist/core/error.hpp>
#include <kdist/parallel/world.hpp>
#include <string>
#include <utility>

namespace kdist::mpi {

namespace detail {

//! Throws kdist::RuntimeError naming the MPI call and MPI's message when `rc` is not MPI_SUCCESS.
inline void check_mpi(int rc, const char* what) {
  if (rc == MPI_SUCCESS) [[likely]] {
    return;
  }
  char text[MPI_MAX_ERROR_STRING] = {};
  int length = 0;
  MPI_Error_string(rc, text, &length);
  throw RuntimeError(std::string(what) +
                     " failed: " + std::string(text, static_cast<std::size_t>(length)));
}

using kdist::detail::require_mpi;  // the one check, parallel/world.hpp

}  // namespace detail

//! An MPI communicator, owning (freed on destruction) or borrowed. Default: MPI_COMM_NULL.
class Communicator {
 public:
  //! MPI_COMM_NULL: rank() is -1, size() is 0.
  Communicator() noexcept = default;

  //! MPI_COMM_WORLD, borrowed. Requires MPI to be initialised (kdist::RuntimeError otherwise).
  [[nodiscard]] static Communicator world() { return borrow(MPI_COMM_WORLD); }

  //! Wraps `comm` without taking ownership: the caller keeps freeing it.
  [[nodiscard]] static Communicator borrow(MPI_Comm comm) { return Communicator(comm, false); }

  //! Takes ownership of `comm` (from MPI_Comm_split, MPI_Cart_create, ...): freed on destruction.
  [[nodiscard]] static Communicator adopt(MPI_Comm comm) { return Communicator(comm, true); }

  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;
  Communicator(Communicator&& other) noexcept
      : comm_(std::exchange(other.comm_, MPI_COMM_NULL)),
        owning_(std::exchange(other.owning_, false)),
        rank_(std::exchange(other.rank_, -1)),
        size_(std::exchange(other.size_, 0)) {}
  Communicator& operator=(Communicator&& other) noexcept {
    if (this != &other) {
      reset();
      comm_ = std::exchange(other.comm_, MPI_COMM_NULL);
      owning_ = std::exchange(other.owning_, false);
      rank_ = std::exchange(other.rank_, -1);
      size_ = std::exchange(other.size_, 0);
    }
    return *this;
  }
  ~Communicator() { reset(); }

  //! The raw handle, for MPI calls. Stays owned by this object.
  [[nodiscard]] MPI_Comm get() const noexcept { return comm_; }
  //! This process' rank in the communicator (-1 for MPI_COMM_NULL).
  [[nodiscard]] int rank() const noexcept { return rank_; }
  //! The number of processes in the communicator (0 for MPI_COMM_NULL).
  [[nodiscard]] int size() const noexcept { return size_; }
  //! True when this object frees the communicator.
  [[nodiscard]] bool owning() const noexcept { return owning_; }
  //! True unless MPI_COMM_NULL.
  [[nodiscard]] explicit operator bool() const noexcept { return comm_ != MPI_COMM_NULL; }

  //! Gives up ownership and returns the handle; this object becomes MPI_COMM_NULL.
  [[nodiscard]] MPI_Comm release() noexcept {
    owning_ = false;
    rank_ = -1;
    size_ = 0;
    return std::exchange(comm_, MPI_COMM_NULL);
  }

  //! An owning duplicate (MPI_Comm_dup). Collective over this communicator.
  [[nodiscard]] Communicator dup() const {
    MPI_Comm out = MPI_COMM_NULL;
    detail::check_mpi(MPI_Comm_dup(comm_, &out), "kdist::mpi::Communicator::dup: MPI_Comm_dup");
    return adopt(out);
  }

  //! An owning sub-communicator (MPI_Comm_split): processes with the same `color` end up
  //! together, ordered by `key`. Collective over this communicator. A process that passes
  //! MPI_UNDEFINED as color gets an empty Communicator.
  [[nodiscard]] Communicator split(int color, int key) const {
    MPI_Comm out = MPI_COMM_NULL;
    detail::check_mpi(MPI_Comm_split(comm_, color, key, &out),
                      "kdist::mpi::Communicator::split: MPI_Comm_split");
    return adopt(out);
  }

 private:
  Communicator(MPI_Comm comm, bool owning) : comm_(comm), owning_(owning) {
    if (comm_ != MPI_COMM_NULL) {
      detail::require_mpi("kdist::mpi::Communicator");
      detail::check_mpi(MPI_Comm_rank(comm_, &rank_), "kdist::mpi::Communicator: MPI_Comm_rank");
      detail::check_mpi(MPI_Comm_size(comm_, &size_), "kdist::mpi::Communicator: MPI_Comm_size");
    } else {
      owning_ = false;
    }
  }

  void reset() noexcept {
    if (owning_ && comm_ != MPI_COMM_NULL && comm_ != MPI_COMM_WORLD && comm_ != MPI_COMM_SELF) {
      if (!kdist::detail::mpi_is_finalized()) {
        MPI_Comm_free(&comm_);
      }
    }
    comm_ = MPI_COMM_NULL;
    owning_ = false;
    rank_ = -1;
    size_ = 0;
  }

  MPI_Comm comm_ = MPI_COMM_NULL;
  bool owning_ = false;
  int rank_ = -1;
  int size_ = 0;
};

}  // namespace kdist::mpi
