// One main for every MPI test (kokkos-comm style): initialise MPI and Kokkos, let only rank 0
// print, and fail the process on every rank when any rank saw a failure.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdio>
#include <kdist/parallel/initialize.hpp>

int main(int argc, char** argv) {
  // MPI (MPI_THREAD_FUNNELED) and Kokkos, finalised in reverse order when main returns.
  kdist::ScopeGuard guard(argc, argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  ::testing::InitGoogleTest(&argc, argv);
  if (rank != 0) {
    // Failures on other ranks still count (reduced below) and print their own message.
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
  }
  int local_failed = RUN_ALL_TESTS() != 0 ? 1 : 0;
  int any_failed = 0;
  MPI_Allreduce(&local_failed, &any_failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (local_failed) {
    std::fprintf(stderr, "[rank %d] had failing tests\n", rank);
  }
  return any_failed;
}
