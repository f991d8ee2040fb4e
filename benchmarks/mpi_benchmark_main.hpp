#pragma once
// The main() of kdist's MPI benchmarks: start MPI and Kokkos, let rank 0 report (with the
// binary's own reporter, e.g. one that prints ratios) while the other ranks run the same
// benchmarks silently, and let only rank 0 write --benchmark_out files. Every rank must run the
// same iterations: benchmarks time with manual time = the slowest rank's (slowest_rank below).

#include <benchmark/benchmark.h>
#include <mpi.h>

#include <cstring>
#include <vector>

#include <kdist/runtime.hpp>

namespace kdist::bench {

//! The slowest rank's value of `seconds` (what an MPI benchmark iteration costs).
inline double slowest_rank(double seconds) {
  MPI_Allreduce(MPI_IN_PLACE, &seconds, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return seconds;
}

class NullReporter : public benchmark::BenchmarkReporter {
 public:
  bool ReportContext(const Context&) override { return true; }
  void ReportRuns(const std::vector<Run>&) override {}
};

template <class RootReporter, class Register>
int mpi_benchmark_main(int argc, char** argv, Register register_all) {
  kdist::ScopeGuard guard(argc, argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  std::vector<char*> args(argv, argv + argc);
  if (rank != 0) {
    std::erase_if(args, [](const char* a) { return std::strncmp(a, "--benchmark_out", 15) == 0; });
  }
  int n = static_cast<int>(args.size());
  args.push_back(nullptr);
  benchmark::Initialize(&n, args.data());
  register_all();
  if (rank == 0) {
    RootReporter reporter;
    benchmark::RunSpecifiedBenchmarks(&reporter);
  } else {
    NullReporter reporter;
    benchmark::RunSpecifiedBenchmarks(&reporter);
  }
  benchmark::Shutdown();
  return 0;
}

}  // namespace kdist::bench
