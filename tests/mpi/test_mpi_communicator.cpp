// kdist-mpi-ranks: 1 2 4
// kdist/parallel/mpi/communicator.hpp, kdist/parallel/mpi/agree.hpp, kdist/parallel/mpi/datatype.hpp.
#include <gtest/gtest.h>
#include <mpi.h>
#include "mpi_test_util.hpp"

#include <complex>
#include <cstdint>
#include <kdist/parallel/mpi/agree.hpp>
#include <kdist/parallel/mpi/communicator.hpp>
#include <kdist/parallel/mpi/datatype.hpp>
#include <string>

namespace {

using kdist::test::world_rank;
using kdist::test::world_size;

// True when `comm` is a communicator MPI still knows (not freed).
bool is_live(MPI_Comm comm) {
  int result = MPI_UNEQUAL;
  MPI_Comm dup = MPI_COMM_NULL;
  if (MPI_Comm_dup(comm, &dup) != MPI_SUCCESS) {
    return false;
  }
  MPI_Comm_compare(comm, dup, &result);
  MPI_Comm_free(&dup);
  return result == MPI_CONGRUENT;
}

}  // namespace

// ---- datatype ---------------------------------------------------------------------------------

static_assert(kdist::mpi::has_datatype_v<double>);
static_assert(kdist::mpi::has_datatype_v<const float>);
static_assert(kdist::mpi::has_datatype_v<std::int64_t>);
static_assert(kdist::mpi::has_datatype_v<std::uint8_t>);
static_assert(kdist::mpi::has_datatype_v<std::complex<double>>);
static_assert(!kdist::mpi::has_datatype_v<std::string>);
static_assert(!kdist::mpi::has_datatype_v<double*>);

TEST(Datatype, MapsToMpiTypes) {
  EXPECT_EQ(kdist::mpi::datatype<float>(), MPI_FLOAT);
  EXPECT_EQ(kdist::mpi::datatype<double>(), MPI_DOUBLE);
  EXPECT_EQ(kdist::mpi::datatype<const double>(), MPI_DOUBLE);
  EXPECT_EQ(kdist::mpi::datatype<int>(), MPI_INT);
  EXPECT_EQ(kdist::mpi::datatype<unsigned char>(), MPI_UNSIGNED_CHAR);
  EXPECT_EQ(kdist::mpi::datatype<bool>(), MPI_CXX_BOOL);
  EXPECT_EQ(kdist::mpi::datatype<std::complex<float>>(), MPI_CXX_FLOAT_COMPLEX);
  // Fixed-width aliases: the size MPI sees is the C++ size.
  int size = 0;
  MPI_Type_size(kdist::mpi::datatype<std::int64_t>(), &size);
  EXPECT_EQ(size, 8);
  MPI_Type_size(kdist::mpi::datatype<std::uint8_t>(), &size);
  EXPECT_EQ(size, 1);
  MPI_Type_size(kdist::mpi::datatype<std::int16_t>(), &size);
  EXPECT_EQ(size, 2);
  MPI_Type_size(kdist::mpi::datatype<std::uint32_t>(), &size);
  EXPECT_EQ(size, 4);
}

// ---- Communicator -------------------------------------------------------------------------------

TEST(Communicator, WorldIsBorrowed) {
  auto world = kdist::mpi::Communicator::world();
  EXPECT_EQ(world.get(), MPI_COMM_WORLD);
  EXPECT_EQ(world.rank(), world_rank());
  EXPECT_EQ(world.size(), world_size());
  EXPECT_FALSE(world.owning());
  EXPECT_TRUE(static_cast<bool>(world));
}

TEST(Communicator, DefaultIsNull) {
  kdist::mpi::Communicator none;
  EXPECT_EQ(none.get(), MPI_COMM_NULL);
  EXPECT_EQ(none.rank(), -1);
  EXPECT_EQ(none.size(), 0);
  EXPECT_FALSE(static_cast<bool>(none));
}

TEST(Communicator, OwningFreesBorrowedDoesNot) {
  MPI_Comm raw = MPI_COMM_NULL;
  MPI_Comm_dup(MPI_COMM_WORLD, &raw);
  { auto borrowed = kdist::mpi::Communicator::borrow(raw); }
  EXPECT_TRUE(is_live(raw));
  {
    auto owned = kdist::mpi::Communicator::adopt(raw);
    EXPECT_TRUE(owned.owning());
    EXPECT_EQ(owned.size(), world_size());
  }  // freed here (using `raw` now would be erroneous)
  auto dup = kdist::mpi::Communicator::world().dup();
  EXPECT_TRUE(dup.owning());
  EXPECT_EQ(dup.size(), world_size());
  MPI_Comm released = dup.release();
  EXPECT_EQ(dup.get(), MPI_COMM_NULL);
  EXPECT_FALSE(dup.owning());
  EXPECT_TRUE(is_live(released));  // release() did not free it
  MPI_Comm_free(&released);
}

TEST(Communicator, MoveTransfersOwnership) {
  auto a = kdist::mpi::Communicator::world().dup();
  const MPI_Comm raw = a.get();
  kdist::mpi::Communicator b(std::move(a));
  EXPECT_EQ(a.get(),
            MPI_COMM_NULL);  // NOLINT(bugprone-use-after-move): moved-from state is specified
  EXPECT_FALSE(a.owning());
  EXPECT_EQ(b.get(), raw);
  EXPECT_TRUE(b.owning());
  kdist::mpi::Communicator c;
  c = std::move(b);
  EXPECT_EQ(c.get(), raw);
  EXPECT_EQ(c.rank(), world_rank());
}

TEST(Communicator, SplitGivesRanksByKey) {
  const int n = world_size();
  // Reverse order: key = -rank.
  auto reversed = kdist::mpi::Communicator::world().split(0, -world_rank());
  EXPECT_EQ(reversed.size(), n);
  EXPECT_EQ(reversed.rank(), n - 1 - world_rank());
  auto odd_even = kdist::mpi::Communicator::world().split(world_rank() % 2, world_rank());
  EXPECT_EQ(odd_even.rank(), world_rank() / 2);
  auto none = kdist::mpi::Communicator::world().split(MPI_UNDEFINED, 0);
  EXPECT_FALSE(static_cast<bool>(none));
}

// ---- agree ------------------------------------------------------------------------------------

TEST(Agree, AllOkReturns) {
  EXPECT_NO_THROW(kdist::mpi::agree(MPI_COMM_WORLD, true, "unused"));
  EXPECT_NO_THROW(kdist::mpi::agree(kdist::mpi::Communicator::world(), true, ""));
}

TEST(Agree, EveryRankThrowsTheMessageOfTheLowestFailingRank) {
  const int n = world_size();
  const int r = world_rank();
  // The last rank fails alone: everyone throws its message.
  try {
    kdist::mpi::agree(MPI_COMM_WORLD, r != n - 1, "rank " + std::to_string(r) + " is unhappy");
    ADD_FAILURE() << "no exception on rank " << r;
  } catch (const kdist::ValueError& e) {
    EXPECT_EQ(std::string(e.what()), "rank " + std::to_string(n - 1) + " is unhappy");
  }
  // Ranks >= 1 fail (all, at one rank): the lowest failing one speaks.
  const int first = n > 1 ? 1 : 0;
  try {
    kdist::mpi::agree(MPI_COMM_WORLD, r < first, "rank " + std::to_string(r));
    ADD_FAILURE() << "no exception on rank " << r;
  } catch (const kdist::ValueError& e) {
    EXPECT_EQ(std::string(e.what()), "rank " + std::to_string(first));
  }
}

TEST(Agree, ExceptionTypeAndLongMessages) {
  const std::string long_message(100000, 'x');
  try {
    kdist::mpi::agree<kdist::RuntimeError>(MPI_COMM_WORLD, world_rank() != 0, long_message);
    ADD_FAILURE() << "no exception";
  } catch (const kdist::RuntimeError& e) {
    EXPECT_EQ(std::string(e.what()), long_message);
  }
}

TEST(Agree, DisagreementCarriesRankAndKind) {
  const int n = world_size();
  const auto d = kdist::mpi::detail::agree_on(MPI_COMM_WORLD, world_rank() != n - 1, "last", 7);
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->rank, n - 1);
  EXPECT_EQ(d->kind, 7);
  EXPECT_EQ(d->message, "last");
  EXPECT_FALSE(kdist::mpi::detail::agree_on(MPI_COMM_WORLD, true, "", 1).has_value());
}

TEST(CheckMpi, FailuresBecomeRuntimeErrorsWithMpisMessage) {
  EXPECT_NO_THROW(kdist::mpi::detail::check_mpi(MPI_SUCCESS, "MPI_Barrier"));
  try {
    kdist::mpi::detail::check_mpi(MPI_ERR_COUNT, "kdist::x: MPI_Send");
    ADD_FAILURE() << "no exception";
  } catch (const kdist::RuntimeError& e) {
    char text[MPI_MAX_ERROR_STRING] = {};
    int length = 0;
    MPI_Error_string(MPI_ERR_COUNT, text, &length);
    EXPECT_EQ(std::string(e.what()), "kdist::x: MPI_Send failed: " + std::string(text, length));
  }
}
