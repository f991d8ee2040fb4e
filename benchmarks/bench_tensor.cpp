// Distributed tensors (issue 3), in one binary so that every ratio comes out of one run:
//
//  - kdist::distribute_tensor from a function of the global index (each process fills only its
//    block) vs from a global array that every process holds (each copies its block out), for
//    layouts ('data', None) on mesh (N, 1) and (None, 'model') on mesh (1, N);
//  - kdist::redistribute ('x', None) -> (None, 'x') on mesh (N,) (an all-to-all) vs a raw
//    MPI_Alltoall of the same bytes on the same communicator (MPI_COMM_WORLD), and vs the raw
//    call plus the hand-written pack/unpack of the column blocks (what the move really needs);
//  - kdist::redistribute ('x', None) -> (None, None) (an all-gather) vs a raw MPI_Allgather of
//    the same bytes, whose row-major result is already the full tensor.
//
// Sizes are the bytes of the whole float tensor, n x n: 1, 4 and 16 MiB (n = 512, 1024, 2048),
// and 64 MiB (n = 4096) for distribute_tensor. Run with 2 processes:
//
//   mpiexec -n 2 build-bench/benchmarks/bench_tensor
//
// Each iteration's time is the slowest rank's (MPI_Allreduce MAX, manual time); iteration counts
// are fixed so every rank runs the same collectives. "paired" runs alternate raw and kdist call by
// call and keep the median per-call times (a busy machine disturbs them much less). Rank 0 prints
// the table and then kdist / baseline; the other ranks report to a null reporter.
#include <benchmark/benchmark.h>

#include <mpi.h>
#include "mpi_benchmark_main.hpp"

#include <Kokkos_Core.hpp>
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <kdist/parallel/initialize.hpp>
#include <kdist/tensor/distribute_tensor.hpp>
#include <kdist/tensor/redistribute.hpp>

namespace {

using Tensor = kdist::DistributedTensor<float**>;
constexpr int kRepetitions = 5;
const std::vector<std::int64_t> kRedistributeSides = {512, 1024, 2048};      // 1, 4, 16 MiB
const std::vector<std::int64_t> kDistributeSides = {512, 1024, 2048, 4096};  // .. 64 MiB

std::size_t world_size() {
  int n = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return static_cast<std::size_t>(n);
}

benchmark::IterationCount iterations_for(std::int64_t side) {
  const std::int64_t bytes = side * side * 4;
  return std::clamp<std::int64_t>((std::int64_t{256} << 20) / bytes, 8, 400);
}

template <class Op>
void timed_loop(benchmark::State& state, Op&& op) {
  for (int i = 0; i < 2; ++i) op();  // warm-up: page faults, connections
  MPI_Barrier(MPI_COMM_WORLD);
  for (auto _ : state) {
    const double start = MPI_Wtime();
    op();
    state.SetIterationTime(kdist::bench::slowest_rank(MPI_Wtime() - start));
  }
  state.SetBytesProcessed(state.iterations() * state.range(0) * state.range(0) * 4);
}

template <class Raw, class Lib>
void paired_loop(benchmark::State& state, Raw&& raw, Lib&& lib) {
  const auto m = kdist::bench::paired_medians(state, raw, lib);
  const double r = m.base * 1e3, k = m.lib * 1e3;
  state.counters["base_ms"] = r;
  state.counters["kdist_ms"] = k;
  state.counters["ratio"] = k / r;
}

// ---- distribute_tensor: function vs global array ----------------------------------------------
//! Layout 0: ('data', None) on mesh (N, 1); layout 1: (None, 'model') on mesh (1, N).
kdist::RuntimeTensorLayout layout_for(std::int64_t which) {
  const std::size_t n = world_size();
  if (which == 0) {
    kdist::RuntimeDeviceMesh mesh({n, 1}, {"data", "model"}, kdist::list_devices());
    return kdist::RuntimeTensorLayout({"data", kdist::DimAxes()}, mesh);
  }
  kdist::RuntimeDeviceMesh mesh({1, n}, {"data", "model"}, kdist::list_devices());
  return kdist::RuntimeTensorLayout({kdist::DimAxes(), "model"}, mesh);
}

struct Distribute {
  std::size_t side;
  kdist::RuntimeTensorLayout layout;
  std::vector<float> global;
  Distribute(std::int64_t s, std::int64_t which)
      : side(static_cast<std::size_t>(s)), layout(layout_for(which)), global(side * side) {
    for (std::size_t k = 0; k < global.size(); ++k) global[k] = static_cast<float>(k);
  }
  void from_function() {
    const std::size_t n = side;
    auto t = kdist::distribute_tensor<float**>(
        [n](std::size_t i, std::size_t j) { return static_cast<float>(i * n + j); }, {side, side},
        layout);
    benchmark::DoNotOptimize(t.local().data());
  }
  void from_array() {
    auto t = kdist::distribute_tensor<float**>(global.data(), {side, side}, layout);
    benchmark::DoNotOptimize(t.local().data());
  }
};

void distribute_fn(benchmark::State& state) {
  Distribute d(state.range(0), state.range(1));
  timed_loop(state, [&] { d.from_function(); });
}
void distribute_array(benchmark::State& state) {
  Distribute d(state.range(0), state.range(1));
  timed_loop(state, [&] { d.from_array(); });
}
void distribute_paired(benchmark::State& state) {  // base: from the global array
  Distribute d(state.range(0), state.range(1));
  paired_loop(
      state, [&] { d.from_array(); }, [&] { d.from_function(); });
}

// ---- redistribute vs raw MPI --------------------------------------------------------------------
struct Redistribute {
  std::size_t side, p, rows;
  kdist::RuntimeDeviceMesh mesh;
  kdist::RuntimeTensorLayout rows_layout, cols_layout, replicated_layout;
  Tensor t;
  std::vector<float> send, recv, unpacked;
  explicit Redistribute(std::int64_t s)
      : side(static_cast<std::size_t>(s)),
        p(world_size()),
        rows(side / p),
        mesh({p}, {"x"}, kdist::list_devices()),
        rows_layout({"x", kdist::DimAxes()}, mesh),
        cols_layout({kdist::DimAxes(), "x"}, mesh),
        replicated_layout({kdist::DimAxes(), kdist::DimAxes()}, mesh) {
    const std::size_t n = side;
    t = kdist::distribute_tensor<float**>(
        [n](std::size_t i, std::size_t j) { return static_cast<float>(i * n + j); }, {side, side},
        rows_layout);
    send.resize(rows * side);
    std::copy_n(t.local().data(), send.size(), send.data());
    recv.resize(side * side);
    unpacked.resize(side * (side / p));
  }
  // shard(0) -> shard(1)
  void all_to_all_kdist() {
    benchmark::DoNotOptimize(kdist::redistribute(t, cols_layout).local().data());
  }
  void
  all_to_all_raw() {  // the same bytes, no packing: each peer gets rows*side/p contiguous floats
    const int count = static_cast<int>(rows * side / p);
    MPI_Alltoall(send.data(), count, MPI_FLOAT, recv.data(), count, MPI_FLOAT, MPI_COMM_WORLD);
  }
  void all_to_all_packed() {  // pack column blocks, MPI_Alltoall, unpack: the hand-written move
    const std::size_t cols = side / p;
    const int count = static_cast<int>(rows * cols);
    const float* src = t.local().data();
    for (std::size_t q = 0; q < p; ++q) {
      for (std::size_t r = 0; r < rows; ++r) {
        std::memcpy(&send[(q * rows + r) * cols], src + r * side + q * cols, cols * sizeof(float));
      }
    }
    MPI_Alltoall(send.data(), count, MPI_FLOAT, recv.data(), count, MPI_FLOAT, MPI_COMM_WORLD);
    // recv holds p blocks of rows x cols, block q = global rows [q*rows, (q+1)*rows): already
    // row-major in the target's (side x cols) block, so the unpack is one copy
    std::memcpy(unpacked.data(), recv.data(), side * cols * sizeof(float));
  }
  // shard(0) -> replicated
  void all_gather_kdist() {
    benchmark::DoNotOptimize(kdist::redistribute(t, replicated_layout).local().data());
  }
  void all_gather_raw() {
    const int count = static_cast<int>(rows * side);
    MPI_Allgather(t.local().data(), count, MPI_FLOAT, recv.data(), count, MPI_FLOAT,
                  MPI_COMM_WORLD);
  }
};

#define KDIST_BENCH(name, body)        \
  void name(benchmark::State& state) { \
    Redistribute r(state.range(0));    \
    timed_loop(state, [&] { body; });  \
  }
KDIST_BENCH(all_to_all_kdist, r.all_to_all_kdist())
KDIST_BENCH(all_to_all_raw, r.all_to_all_raw())
KDIST_BENCH(all_to_all_packed, r.all_to_all_packed())
KDIST_BENCH(all_gather_kdist, r.all_gather_kdist())
KDIST_BENCH(all_gather_raw, r.all_gather_raw())
#undef KDIST_BENCH

void all_to_all_paired(benchmark::State& state) {  // base: raw MPI_Alltoall
  Redistribute r(state.range(0));
  paired_loop(
      state, [&] { r.all_to_all_raw(); }, [&] { r.all_to_all_kdist(); });
}
void all_to_all_packed_paired(benchmark::State& state) {  // base: pack + MPI_Alltoall + unpack
  Redistribute r(state.range(0));
  paired_loop(
      state, [&] { r.all_to_all_packed(); }, [&] { r.all_to_all_kdist(); });
}
void all_gather_paired(benchmark::State& state) {  // base: raw MPI_Allgather
  Redistribute r(state.range(0));
  paired_loop(
      state, [&] { r.all_gather_raw(); }, [&] { r.all_gather_kdist(); });
}

using Fn = void (*)(benchmark::State&);

void reg(const std::string& name, Fn fn, std::vector<std::int64_t> args, int reps) {
  auto* b = benchmark::RegisterBenchmark(name.c_str(), fn)
                ->Args(args)
                ->Iterations(iterations_for(args[0]))
                ->UseManualTime()
                ->Unit(benchmark::kMillisecond);
  if (reps > 1) b->Repetitions(reps)->ReportAggregatesOnly(true);
}

void register_all() {
  for (std::int64_t layout : {0, 1}) {
    for (auto side : kDistributeSides) {
      reg("BM_distribute_array", distribute_array, {side, layout}, kRepetitions);
      reg("BM_distribute_fn", distribute_fn, {side, layout}, kRepetitions);
      reg("BM_distribute_paired", distribute_paired, {side, layout}, 1);
    }
  }
  for (auto side : kRedistributeSides) {
    reg("BM_all_to_all_raw", all_to_all_raw, {side}, kRepetitions);
    reg("BM_all_to_all_packed", all_to_all_packed, {side}, kRepetitions);
    reg("BM_all_to_all_kdist", all_to_all_kdist, {side}, kRepetitions);
    reg("BM_all_to_all_paired", all_to_all_paired, {side}, 1);
    reg("BM_all_to_all_packed_paired", all_to_all_packed_paired, {side}, 1);
    reg("BM_all_gather_raw", all_gather_raw, {side}, kRepetitions);
    reg("BM_all_gather_kdist", all_gather_kdist, {side}, kRepetitions);
    reg("BM_all_gather_paired", all_gather_paired, {side}, 1);
  }
}

// Rank 0: the console table, then kdist / baseline of the medians and of the paired runs.
class RatioReporter : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    ConsoleReporter::ReportRuns(runs);
    for (const auto& run : runs) {
      const std::string key = run.run_name.function_name + "/" + run.run_name.args;
      if (run.run_type == Run::RT_Aggregate && run.aggregate_name == "median") {
        medians_[key] = run.GetAdjustedRealTime();
      }
      if (run.run_type == Run::RT_Iteration && run.counters.count("ratio") != 0) {
        paired_[key] = {run.counters.at("base_ms").value, run.counters.at("kdist_ms").value};
      }
    }
  }
  void Finalize() override {
    ConsoleReporter::Finalize();
    std::printf(
        "\nkdist vs baseline, slowest rank of %zu, ms per call; MiB = whole float tensor\n"
        "  separate: median over %d repetitions; paired: median per call, alternating\n",
        world_size(), kRepetitions);
    std::printf("%-34s %5s | %9s %9s %7s | %9s %9s %7s\n", "kdist / baseline", "MiB", "base",
                "kdist", "ratio", "base", "kdist", "ratio");
    auto row = [&](const std::string& label, const std::string& base, const std::string& lib,
                   const std::string& paired, const std::string& args, double mib) {
      const auto b = medians_.find(base + "/" + args);
      const auto l = medians_.find(lib + "/" + args);
      const auto p = paired_.find(paired + "/" + args);
      if (b == medians_.end() || l == medians_.end() || p == paired_.end()) return;
      std::printf("%-34s %5.0f | %9.3f %9.3f %7.3f | %9.3f %9.3f %7.3f\n", label.c_str(), mib,
                  b->second, l->second, l->second / b->second, p->second.first, p->second.second,
                  p->second.second / p->second.first);
    };
    for (std::int64_t layout : {0, 1}) {
      for (auto side : kDistributeSides) {
        row(layout == 0 ? "fn / array  ('data', None)" : "fn / array  (None, 'model')",
            "BM_distribute_array", "BM_distribute_fn", "BM_distribute_paired",
            std::to_string(side) + "/" + std::to_string(layout),
            double(side * side * 4) / (1 << 20));
      }
    }
    for (auto side : kRedistributeSides) {
      const double mib = double(side * side * 4) / (1 << 20);
      row("shard(0)->shard(1) / MPI_Alltoall", "BM_all_to_all_raw", "BM_all_to_all_kdist",
          "BM_all_to_all_paired", std::to_string(side), mib);
      row("shard(0)->shard(1) / pack+Alltoall", "BM_all_to_all_packed", "BM_all_to_all_kdist",
          "BM_all_to_all_packed_paired", std::to_string(side), mib);
      row("shard->replicated / MPI_Allgather", "BM_all_gather_raw", "BM_all_gather_kdist",
          "BM_all_gather_paired", std::to_string(side), mib);
    }
    std::fflush(stdout);
  }

 private:
  std::map<std::string, double> medians_;
  std::map<std::string, std::pair<double, double>> paired_;
};

}  // namespace

int main(int argc, char** argv) {
  return kdist::bench::mpi_benchmark_main<RatioReporter>(argc, argv, register_all);
}
