#pragma once
// The main() of kdist's MPI benchmarks: start MPI and Kokkos, let rank 0 report (with the
// binary's own reporter, e.g. one that prints ratios) while the other ranks run the same
// benchmarks silently, and let only rank 0 write --benchmark_out files. Every rank must run the
// same iterations: benchmarks time with manual time = the slowest rank's (slowest_rank below).

#include <benchmark/benchmark.h>
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <vector>

#include <kdist/parallel/initialize.hpp>

namespace kdist::bench {

//! The slowest rank's value of `seconds` (what an MPI benchmark iteration costs).
inline double slowest_rank(double seconds) {
  MPI_Allreduce(MPI_IN_PLACE, &seconds, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return seconds;
}

//! The device graph's replays as a counter ("graph_replays"; KDIST_DEVICE_GRAPH=1 asks for the
//! step as one graph) and, on rank 0, why the step was not captured when it was asked for.
template <class Model>
void report_device_graph(benchmark::State& state, const Model& model) {
  const auto graph = model.device_graph();
  state.counters["graph_replays"] = static_cast<double>(graph.replays);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank == 0 && graph.requested && !graph.not_captured.empty()) {
    std::fprintf(stderr, "kdist device graph: not captured: %s\n", graph.not_captured.c_str());
  }
}

inline double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
  return v[v.size() / 2];
}

//! Median seconds per call of a baseline and of kdist, timed alternately within one run (which goes
//! first flips every iteration), so load changes on a shared machine hit both alike; each call's
//! time is the slowest rank's. The iteration time reported to Google Benchmark is kdist's.
struct PairedMedians {
  double base = 0;
  double lib = 0;
};
template <class Base, class Lib>
PairedMedians paired_medians(benchmark::State& state, Base&& base, Lib&& lib) {
  for (int i = 0; i < 3; ++i) {  // warm up both
    base();
    lib();
  }
  MPI_Barrier(MPI_COMM_WORLD);
  std::vector<double> base_t, lib_t;
  base_t.reserve(static_cast<std::size_t>(state.max_iterations));
  lib_t.reserve(static_cast<std::size_t>(state.max_iterations));
  bool base_first = true;
  for (auto _ : state) {
    const double t0 = MPI_Wtime();
    base_first ? base() : lib();
    const double t1 = MPI_Wtime();
    base_first ? lib() : base();
    const double t2 = MPI_Wtime();
    double t[2] = {base_first ? t1 - t0 : t2 - t1, base_first ? t2 - t1 : t1 - t0};
    MPI_Allreduce(MPI_IN_PLACE, t, 2, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    base_t.push_back(t[0]);
    lib_t.push_back(t[1]);
    state.SetIterationTime(t[1]);
    base_first = !base_first;
  }
  return {median(base_t), median(lib_t)};
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
