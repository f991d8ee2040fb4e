// kdist's all_reduce, all_gather and reduce_scatter against the raw MPI calls on the same buffers
// and communicator, 4 KiB to 16 MiB per process, in one binary so that the ratio comes out of one
// run. Run under MPI:
//
//   mpiexec -n 2 build/benchmarks/bench_collectives
//
// Each iteration is one collective; its time is the slowest rank's (MPI_Allreduce MAX of the
// per-rank time, reported as manual time). Raw and kdist runs of one size are registered next to
// each other, with a fixed iteration count (the same on every rank, so no rank decides to stop
// alone) and 5 repetitions; a third, "paired" run alternates raw and kdist call by call and keeps
// the median per-call times, which a busy machine disturbs much less. Rank 0 prints, then a table:
// kdist / raw and the time kdist adds, both ways. The other ranks report to a null reporter.
//
// kdist's calls run with the stuck-collective watchdog on (its default: the non-blocking MPI call
// polled with MPI_Test). BM_all_reduce_watchdog_paired times kdist::all_reduce of 8 bytes and 4 MiB
// with the watchdog off and on, alternating call by call, 5 runs; run just those with
//   mpiexec -n 2 build/benchmarks/bench_collectives --benchmark_filter=watchdog
#include <benchmark/benchmark.h>

#include <mpi.h>
#include "mpi_benchmark_main.hpp"

#include <Kokkos_Core.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <kdist/parallel/bfloat16_all_reduce.hpp>
#include <kdist/parallel/collective_timeout.hpp>
#include <kdist/parallel/collectives.hpp>
#include <kdist/parallel/initialize.hpp>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace {

using Space = Kokkos::DefaultHostExecutionSpace;
using Buffer = Kokkos::View<double*, Kokkos::HostSpace>;

constexpr int kRepetitions = 5;
const std::vector<std::int64_t> kSizes = {4 << 10, 16 << 10, 64 << 10, 256 << 10,
                                          1 << 20, 4 << 20,  16 << 20};

int world_size() {
  int n = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}

// Enough iterations for ~0.1-0.5 s per run at shared-memory speeds, the same on every rank.
benchmark::IterationCount iterations_for(std::int64_t bytes) {
  return std::clamp<std::int64_t>((std::int64_t{128} << 20) / bytes, 16, 20000);
}
// Paired runs keep per-call medians: at least 64 samples each.
benchmark::IterationCount paired_iterations_for(std::int64_t bytes) {
  return std::clamp<std::int64_t>((std::int64_t{512} << 20) / bytes, 64, 20000);
}

// Times `op` once per iteration; the iteration's time is the slowest rank's.
template <class Op>
void timed_loop(benchmark::State& state, Op&& op) {
  for (int i = 0; i < 3; ++i) {  // warm-up: connections, page faults
    op();
  }
  MPI_Barrier(MPI_COMM_WORLD);
  for (auto _ : state) {
    const double start = MPI_Wtime();
    op();
    double elapsed = MPI_Wtime() - start;
    MPI_Allreduce(MPI_IN_PLACE, &elapsed, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    state.SetIterationTime(elapsed);
  }
  state.SetBytesProcessed(state.iterations() * state.range(0));
}

// ---- all_reduce: `bytes` per process, out of place ----------------------------------------------
void all_reduce_raw(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0)) / sizeof(double);
  Buffer send("send", n), recv("recv", n);
  Kokkos::deep_copy(send, 1.0);
  timed_loop(state, [&] {
    MPI_Allreduce(send.data(), recv.data(), static_cast<int>(n), MPI_DOUBLE, MPI_SUM,
                  MPI_COMM_WORLD);
  });
}
void all_reduce_kdist(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0)) / sizeof(double);
  Buffer send("send", n), recv("recv", n);
  Kokkos::deep_copy(send, 1.0);
  const auto world = kdist::mpi::Communicator::world();
  timed_loop(state, [&] { kdist::all_reduce(Space(), send, recv, kdist::ReduceOp::sum, world); });
}

// ---- all_gather: `bytes` sent per process
// --------------------------------------------------------
void all_gather_raw(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0)) / sizeof(double);
  Buffer send("send", n), recv("recv", n * static_cast<std::size_t>(world_size()));
  Kokkos::deep_copy(send, 1.0);
  timed_loop(state, [&] {
    MPI_Allgather(send.data(), static_cast<int>(n), MPI_DOUBLE, recv.data(), static_cast<int>(n),
                  MPI_DOUBLE, MPI_COMM_WORLD);
  });
}
void all_gather_kdist(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0)) / sizeof(double);
  Buffer send("send", n), recv("recv", n * static_cast<std::size_t>(world_size()));
  Kokkos::deep_copy(send, 1.0);
  const auto world = kdist::mpi::Communicator::world();
  timed_loop(state, [&] { kdist::all_gather(Space(), send, recv, world); });
}

// ---- reduce_scatter: `bytes` reduced per process, bytes / P kept
// ---------------------------------
void reduce_scatter_raw(benchmark::State& state) {
  const auto p = static_cast<std::size_t>(world_size());
  const auto n = static_cast<std::size_t>(state.range(0)) / sizeof(double) / p;
  Buffer send("send", n * p), recv("recv", n);
  Kokkos::deep_copy(send, 1.0);
  timed_loop(state, [&] {
    MPI_Reduce_scatter_block(send.data(), recv.data(), static_cast<int>(n), MPI_DOUBLE, MPI_SUM,
                             MPI_COMM_WORLD);
  });
}
void reduce_scatter_kdist(benchmark::State& state) {
  const auto p = static_cast<std::size_t>(world_size());
  const auto n = static_cast<std::size_t>(state.range(0)) / sizeof(double) / p;
  Buffer send("send", n * p), recv("recv", n);
  Kokkos::deep_copy(send, 1.0);
  const auto world = kdist::mpi::Communicator::world();
  timed_loop(state,
             [&] { kdist::reduce_scatter(Space(), send, recv, kdist::ReduceOp::sum, world); });
}

// ---- paired: raw and kdist alternate within one run (order flipped every iteration), so load
// changes on a shared machine hit both alike; medians of the per-iteration times resist preemption
// outliers. Counters: raw_us, kdist_us (medians), ratio = kdist_us / raw_us, added_us.
using kdist::bench::median;

template <class Raw, class Lib>
void paired_loop(benchmark::State& state, Raw&& raw, Lib&& lib) {
  const auto m = kdist::bench::paired_medians(state, raw, lib);
  const double r = m.base * 1e6;
  const double k = m.lib * 1e6;
  state.counters["raw_us"] = r;
  state.counters["kdist_us"] = k;
  state.counters["ratio"] = k / r;
  state.counters["added_us"] = k - r;
}

void all_reduce_paired(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0)) / sizeof(double);
  Buffer send("send", n), recv("recv", n);
  Kokkos::deep_copy(send, 1.0);
  const auto world = kdist::mpi::Communicator::world();
  paired_loop(
      state,
      [&] {
        MPI_Allreduce(send.data(), recv.data(), static_cast<int>(n), MPI_DOUBLE, MPI_SUM,
                      MPI_COMM_WORLD);
      },
      [&] { kdist::all_reduce(Space(), send, recv, kdist::ReduceOp::sum, world); });
}
void all_gather_paired(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0)) / sizeof(double);
  Buffer send("send", n), recv("recv", n * static_cast<std::size_t>(world_size()));
  Kokkos::deep_copy(send, 1.0);
  const auto world = kdist::mpi::Communicator::world();
  paired_loop(
      state,
      [&] {
        MPI_Allgather(send.data(), static_cast<int>(n), MPI_DOUBLE, recv.data(),
                      static_cast<int>(n), MPI_DOUBLE, MPI_COMM_WORLD);
      },
      [&] { kdist::all_gather(Space(), send, recv, world); });
}
void reduce_scatter_paired(benchmark::State& state) {
  const auto p = static_cast<std::size_t>(world_size());
  const auto n = static_cast<std::size_t>(state.range(0)) / sizeof(double) / p;
  Buffer send("send", n * p), recv("recv", n);
  Kokkos::deep_copy(send, 1.0);
  const auto world = kdist::mpi::Communicator::world();
  paired_loop(
      state,
      [&] {
        MPI_Reduce_scatter_block(send.data(), recv.data(), static_cast<int>(n), MPI_DOUBLE, MPI_SUM,
                                 MPI_COMM_WORLD);
      },
      [&] { kdist::reduce_scatter(Space(), send, recv, kdist::ReduceOp::sum, world); });
}

// ---- the stuck-collective watchdog's cost: kdist::all_reduce with the watchdog off (MPI's
// blocking MPI_Allreduce) against on (MPI_Iallreduce polled with MPI_Test), alternating call by
// call. Counters as for the paired runs: raw_us is the watchdog off, kdist_us on.
void all_reduce_watchdog_paired(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0)) / sizeof(double);
  Buffer send("send", n), recv("recv", n);
  Kokkos::deep_copy(send, 1.0);
  const auto world = kdist::mpi::Communicator::world();
  paired_loop(
      state,
      [&] {
        kdist::set_collective_timeout(std::chrono::seconds(0));
        kdist::all_reduce(Space(), send, recv, kdist::ReduceOp::sum, world);
      },
      [&] {
        kdist::set_collective_timeout(std::chrono::minutes(10));
        kdist::all_reduce(Space(), send, recv, kdist::ReduceOp::sum, world);
      });
}

// ---- 16-bit gradient sums (issue 37): kdist::all_reduce of float32 against
// kdist::all_reduce_in_bfloat16 of the same float32 View (half the bytes on the wire, two
// conversions and a reduce-scatter + all-gather), alternating call by call. Counters as for the
// paired runs: raw_us is float32, kdist_us bfloat16; ratio < 1 where the link is the bottleneck.
// Across two network-namespace hosts at 1 Gbit/s (docs/benchmarks.md):
//   scripts/netns/cluster.sh up 2 1gbit 50us
//   scripts/netns/cluster.sh run 2 -n 2 -ppn 1 build/benchmarks/bench_collectives
//     --benchmark_filter=bfloat16   (one command line)
void all_reduce_bfloat16_paired(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0)) / sizeof(float);
  Kokkos::View<float*, Kokkos::LayoutRight, Kokkos::HostSpace> f32("f32", n), bf16("bf16", n);
  Kokkos::deep_copy(f32, 0.5F);
  Kokkos::deep_copy(bf16, 0.5F);
  const auto world = kdist::mpi::Communicator::world();
  paired_loop(
      state, [&] { kdist::all_reduce(Space(), f32, kdist::ReduceOp::mean, world); },
      [&] { kdist::all_reduce_in_bfloat16(Space(), bf16, kdist::ReduceOp::mean, world); });
}

// ---- the cost kdist adds to a call, without the network: all_reduce on MPI_COMM_SELF (a copy in
// MPI), standard Google Benchmark timing (no cross-rank communication, so the ranks may run
// different iteration counts).
void all_reduce_self_raw(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0)) / sizeof(double);
  Buffer send("send", n), recv("recv", n);
  for (auto _ : state) {
    MPI_Allreduce(send.data(), recv.data(), static_cast<int>(n), MPI_DOUBLE, MPI_SUM,
                  MPI_COMM_SELF);
    benchmark::ClobberMemory();
  }
}
void all_reduce_self_kdist(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0)) / sizeof(double);
  Buffer send("send", n), recv("recv", n);
  const auto self = kdist::mpi::Communicator::borrow(MPI_COMM_SELF);
  for (auto _ : state) {
    kdist::all_reduce(Space(), send, recv, kdist::ReduceOp::sum, self);
    benchmark::ClobberMemory();
  }
}

void register_all() {
  using Fn = void (*)(benchmark::State&);
  for (const auto& [variant, fn] : {std::pair<const char*, Fn>{"raw", all_reduce_self_raw},
                                    std::pair<const char*, Fn>{"kdist", all_reduce_self_kdist}}) {
    benchmark::RegisterBenchmark((std::string("BM_all_reduce_self_") + variant).c_str(), fn)
        ->Arg(4096)
        ->MinTime(0.2)
        ->Repetitions(kRepetitions)
        ->ReportAggregatesOnly(true)
        ->Unit(benchmark::kNanosecond);
  }
  for (const std::int64_t bytes : {std::int64_t{8}, std::int64_t{4} << 20}) {
    benchmark::RegisterBenchmark("BM_all_reduce_watchdog_paired", all_reduce_watchdog_paired)
        ->Arg(bytes)
        ->Iterations(bytes == 8 ? 20000 : 400)
        ->Repetitions(kRepetitions)
        ->UseManualTime()
        ->Unit(benchmark::kMicrosecond);
  }
  for (const std::int64_t bytes :
       {std::int64_t{64} << 10, std::int64_t{4} << 20, std::int64_t{32} << 20}) {
    benchmark::RegisterBenchmark("BM_all_reduce_bfloat16_paired", all_reduce_bfloat16_paired)
        ->Arg(bytes)
        ->Iterations(bytes < (std::int64_t{1} << 20)    ? 2000
                     : bytes < (std::int64_t{16} << 20) ? 100
                                                        : 20)
        ->Repetitions(3)
        ->UseManualTime()
        ->Unit(benchmark::kMicrosecond);
  }
  const std::vector<
      std::pair<std::string, std::pair<void (*)(benchmark::State&), void (*)(benchmark::State&)>>>
      collectives = {{"all_reduce", {all_reduce_raw, all_reduce_kdist}},
                     {"all_gather", {all_gather_raw, all_gather_kdist}},
                     {"reduce_scatter", {reduce_scatter_raw, reduce_scatter_kdist}}};
  for (const auto& [name, fns] : collectives) {
    for (auto bytes : kSizes) {
      for (const auto& [variant, fn] :
           {std::pair{"raw", fns.first}, std::pair{"kdist", fns.second}}) {
        benchmark::RegisterBenchmark(("BM_" + name + "_" + variant).c_str(), fn)
            ->Arg(bytes)
            ->Iterations(iterations_for(bytes))
            ->Repetitions(kRepetitions)
            ->ReportAggregatesOnly(true)
            ->UseManualTime()
            ->Unit(benchmark::kMicrosecond);
      }
      const auto paired = name == "all_reduce"   ? all_reduce_paired
                          : name == "all_gather" ? all_gather_paired
                                                 : reduce_scatter_paired;
      benchmark::RegisterBenchmark(("BM_" + name + "_paired").c_str(), paired)
          ->Arg(bytes)
          ->Iterations(paired_iterations_for(bytes))
          ->UseManualTime()
          ->Unit(benchmark::kMicrosecond);
    }
  }
}

// Rank 0: the console table, then kdist / raw of the medians.
class RatioReporter : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    ConsoleReporter::ReportRuns(runs);
    for (const auto& run : runs) {
      if (run.run_type == Run::RT_Aggregate && run.aggregate_name == "median") {
        medians_[run.run_name.function_name + "/" + run.run_name.args] = run.GetAdjustedRealTime();
      }
      if (run.run_type == Run::RT_Iteration && run.counters.count("ratio") != 0 &&
          run.run_name.function_name == "BM_all_reduce_watchdog_paired") {
        watchdog_[run.run_name.args].emplace_back(run.counters.at("raw_us").value,
                                                  run.counters.at("kdist_us").value);
        continue;
      }
      if (run.run_type == Run::RT_Iteration && run.counters.count("ratio") != 0) {
        paired_[run.run_name.function_name + "/" + run.run_name.args] = {
            run.counters.at("raw_us").value, run.counters.at("kdist_us").value};
      }
    }
  }
  void Finalize() override {
    ConsoleReporter::Finalize();
    std::printf(
        "\nkdist vs raw MPI, slowest rank, microseconds per call\n"
        "  separate: median over %d repetitions of the mean time of a run\n"
        "  paired:   median per-call time, raw and kdist alternating in one run\n",
        kRepetitions);
    std::printf("%-15s %9s | %10s %10s %7s %9s | %10s %10s %7s %9s\n", "collective", "bytes", "raw",
                "kdist", "ratio", "added", "raw", "kdist", "ratio", "added");
    for (const std::string name : {"all_reduce", "all_gather", "reduce_scatter"}) {
      for (auto bytes : kSizes) {
        const auto raw = medians_.find("BM_" + name + "_raw/" + std::to_string(bytes));
        const auto lib = medians_.find("BM_" + name + "_kdist/" + std::to_string(bytes));
        const auto pair = paired_.find("BM_" + name + "_paired/" + std::to_string(bytes));
        if (raw == medians_.end() || lib == medians_.end() || pair == paired_.end()) {
          continue;
        }
        const auto [pr, pk] = pair->second;
        std::printf("%-15s %9lld | %10.2f %10.2f %7.3f %9.3f | %10.2f %10.2f %7.3f %9.3f\n",
                    name.c_str(), static_cast<long long>(bytes), raw->second, lib->second,
                    lib->second / raw->second, lib->second - raw->second, pr, pk, pk / pr, pk - pr);
      }
    }
    for (const auto& [args, per_rep] : watchdog_) {
      std::vector<double> off, on, ratio;
      for (const auto& [o, w] : per_rep) {
        off.push_back(o);
        on.push_back(w);
        ratio.push_back(w / o);
      }
      std::printf(
          "all_reduce of %s bytes, watchdog off (blocking) vs on (non-blocking + MPI_Test), median "
          "per call over %zu runs: off %.2f us, on %.2f us, on/off %.3f (runs: %.3f to %.3f)\n",
          args.c_str(), per_rep.size(), median(off), median(on), median(ratio),
          *std::min_element(ratio.begin(), ratio.end()),
          *std::max_element(ratio.begin(), ratio.end()));
    }
    const auto self_raw = medians_.find("BM_all_reduce_self_raw/4096");
    const auto self_lib = medians_.find("BM_all_reduce_self_kdist/4096");
    if (self_raw != medians_.end() && self_lib != medians_.end()) {
      std::printf(
          "all_reduce of 4096 bytes on MPI_COMM_SELF (the cost of the call itself): raw %.1f ns, "
          "kdist "
          "%.1f ns, added %.1f ns\n",
          self_raw->second, self_lib->second, self_lib->second - self_raw->second);
    }
    std::fflush(stdout);
  }

 private:
  std::map<std::string, double> medians_;
  std::map<std::string, std::pair<double, double>> paired_;
  std::map<std::string, std::vector<std::pair<double, double>>> watchdog_;
};

}  // namespace

int main(int argc, char** argv) {
  return kdist::bench::mpi_benchmark_main<RatioReporter>(argc, argv, register_all);
}
