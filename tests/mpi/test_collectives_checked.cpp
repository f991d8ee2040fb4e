// kdist-mpi-ranks: 2 4
// Collectives in checking mode (KDIST_CHECK_COLLECTIVES, here the macro): arguments that differ
// between processes, and a check failed on one process only, are the same kdist::ValueError on
// every process instead of a hang or a wrong result; good calls give the same results.
#define KDIST_CHECK_COLLECTIVES 1
#include <gtest/gtest.h>
#include <mpi.h>

#include <Kokkos_Core.hpp>
#include <kdist/parallel/collectives.hpp>
#include <string>

#include "mpi_test_util.hpp"

namespace {

using Space = Kokkos::DefaultHostExecutionSpace;
template <class D>
using HostView = Kokkos::View<D, Kokkos::LayoutRight, Kokkos::HostSpace>;
using kdist::ReduceOp;
using kdist::test::contains;
using kdist::test::message_of;
using kdist::test::world_rank;
using kdist::test::world_size;

TEST(CollectivesChecked, SwitchValues) {
  namespace dc = kdist::detail::collectives;
  EXPECT_TRUE(dc::checking_across_processes());
  EXPECT_FALSE(dc::checking_from(nullptr));
  EXPECT_FALSE(dc::checking_from("0"));
  EXPECT_TRUE(dc::checking_from("1"));
  const auto m = message_of<kdist::ValueError>([] { (void)dc::checking_from("yes"); });
  EXPECT_TRUE(contains(m, "KDIST_CHECK_COLLECTIVES is 'yes'; set it to 1")) << m;
}

TEST(CollectivesChecked, GoodCallsStillWork) {
  const int p = world_size();
  HostView<double*> v("v", 3);
  Kokkos::deep_copy(v, 1.0);
  kdist::all_reduce(Space(), v, ReduceOp::sum, MPI_COMM_WORLD);
  EXPECT_EQ(v(2), double(p));
  HostView<int*> mine("mine", 1), all("all", static_cast<std::size_t>(p));
  mine(0) = world_rank();
  kdist::all_gather(Space(), mine, all, MPI_COMM_WORLD);
  for (int q = 0; q < p; ++q) EXPECT_EQ(all(static_cast<std::size_t>(q)), q);
}

TEST(CollectivesChecked, BroadcastRootsThatDifferAreAnErrorEverywhere) {
  // Without checking, MPI_Bcast with different roots returns garbage or hangs.
  HostView<double*> v("v", 2);
  const int root = world_rank() % 2;
  const auto m =
      message_of<kdist::ValueError>([&] { kdist::broadcast(Space(), v, root, MPI_COMM_WORLD); });
  EXPECT_TRUE(contains(m, "kdist::broadcast: the processes disagree on the root (from 0 to 1)"))
      << m;
}

TEST(CollectivesChecked, ACheckFailedOnOneProcessIsTheSameErrorOnAll) {
  const int p = world_size();
  HostView<double*> send("send", 2);
  HostView<double*> recv("recv", 2 * static_cast<std::size_t>(p) + (world_rank() == 1 ? 1 : 0));
  const auto m = message_of<kdist::ValueError>(
      [&] { kdist::all_gather(Space(), send, recv, MPI_COMM_WORLD); });
  EXPECT_TRUE(contains(m, "kdist::all_gather: recv has " + std::to_string(2 * p + 1) +
                              " elements but must have send.size() * communicator size"))
      << m;
}

TEST(CollectivesChecked, SizesAndOpsThatDifferAreAnErrorEverywhere) {
  const int p = world_size();
  const std::size_t n = world_rank() == 1 ? 4 : 3;  // consistent on each process, not across
  HostView<double*> a("a", n), b("b", n);
  auto m = message_of<kdist::ValueError>(
      [&] { kdist::all_reduce(Space(), a, b, ReduceOp::sum, MPI_COMM_WORLD); });
  EXPECT_TRUE(contains(m,
                       "kdist::all_reduce: the processes disagree on the element count (from 3 "
                       "to 4)"))
      << m;
  m = message_of<kdist::ValueError>(
      [&] { kdist::all_reduce(Space(), a, ReduceOp::sum, MPI_COMM_WORLD); });
  EXPECT_TRUE(contains(m, "disagree on the element count")) << m;
  HostView<double*> c("c", 2 * static_cast<std::size_t>(p)), d("d", 2);
  const ReduceOp op = world_rank() == 0 ? ReduceOp::sum : ReduceOp::max;
  m = message_of<kdist::ValueError>(
      [&] { kdist::reduce_scatter(Space(), c, d, op, MPI_COMM_WORLD); });
  EXPECT_TRUE(contains(m, "kdist::reduce_scatter: the processes disagree on the reduction")) << m;
  HostView<double*> e("e", n * static_cast<std::size_t>(p)),
      f("f", n * static_cast<std::size_t>(p));
  m = message_of<kdist::ValueError>([&] { kdist::all_to_all(Space(), e, f, MPI_COMM_WORLD); });
  EXPECT_TRUE(contains(m, "kdist::all_to_all: the processes disagree on the element count")) << m;
}

}  // namespace
