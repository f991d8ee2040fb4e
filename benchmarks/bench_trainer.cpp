// The trainers' training step (kdist::Sequential: the seeds' model, Adam, cross-entropy) against
// the plain single-process Eigen implementation of the same step (tests/reference_mlp.hpp: same
// shapes, same FLOPs, same random numbers), in one binary so that the ratio comes out of one run.
//
//   build-bench/benchmarks/bench_trainer                      # 1 rank: kdist / Eigen (<= 1.25x)
//   mpiexec -n 2 build-bench/benchmarks/bench_trainer         # 2 ranks: throughput, memory
//   benchmarks/trainer_scaling.sh build-bench                 # both, and the 2-rank / 1-rank ratios
//
// Every step's time is the slowest rank's (MPI_Allreduce MAX, reported as manual time); iteration
// counts are fixed, so every rank runs the same number of steps (train_step is collective).
// Rank 0 prints; the other ranks report to a null reporter. Inputs are synthetic (deterministic
// pixels in [0, 1) and labels 0..9): the step's cost does not depend on the pixel values.
//
// 1 rank:  BM_step_eigen/B, BM_step_kdist_{data,model}_parallel/B: separate runs, 5 repetitions;
//          BM_step_paired_{data,model}_parallel/B: kdist and Eigen alternating step by step in one
//          run (median per-step times, which a busy machine disturbs much less); B = 128, 256.
// N ranks: BM_data_parallel_throughput/256: DataParallel on mesh (N,), examples/s, and what a
//          timed step allocates (Kokkos Views) and page-faults (this process's minor faults);
//          BM_model_parallel_memory/256: ModelParallel on mesh (1, N): bytes per rank of the local
//          blocks of every variable and its two Adam slots, and that over the 1-rank figure (on 1
//          rank every block is the whole variable, so the 1-rank figure is the global size);
//          BM_data_parallel_sharded_state/256: DataParallel with the optimizer state sharded
//          (ZeRO-1) and with all-reduced gradients, alternating step by step: median ms, speed-up
//          and Adam's bytes per rank for both;
//          BM_fsdp_bfloat16_sums/256: FSDP on mesh (N,) (both kernels' rows over "batch") with
//          float32 gradient sums and with bfloat16 ones (the kernels' reduce-scatters moving
//          bfloat16), alternating step by step: median ms of both and the speed-up;
//          BM_fsdp_bfloat16_sums_and_gathers/256: the same, the kernels' all-gathers moving
//          bfloat16 too (GradientSyncOptions::bfloat16_gathers).
#include <benchmark/benchmark.h>

#include <mpi.h>
#include <sys/resource.h>
#include "mpi_benchmark_main.hpp"

#include <Kokkos_Core.hpp>
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <kdist/nn/model.hpp>
#include <kdist/parallel/collectives.hpp>
#include <kdist/parallel/initialize.hpp>
#include <kdist/strategy/data_parallel.hpp>
#include <kdist/strategy/layout_map.hpp>
#include <kdist/strategy/model_parallel.hpp>

#include "common/trainer.hpp"
#include "reference_mlp.hpp"

namespace {

using Ref = kdist::reference::ReferenceMlp<float>;
constexpr std::size_t kFeatures = 784;
constexpr int kRepetitions = 5;
constexpr std::uint64_t kSeed = 1337;

int world_size() {
  int n = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}
int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

benchmark::IterationCount iterations_for(std::size_t batch) {
  return batch <= 128 ? 60 : 40;
}

//! A synthetic global batch: pixel (r, c) and label r, the same on every rank and every run.
struct Batch {
  std::size_t rows;
  std::vector<float> pixels;         // rows x 784, row-major
  std::vector<std::uint8_t> labels;  // rows
  explicit Batch(std::size_t b) : rows(b), pixels(b * kFeatures), labels(b) {
    for (std::size_t r = 0; r < b; ++r) {
      labels[r] = static_cast<std::uint8_t>((r * 7 + 3) % 10);
      for (std::size_t c = 0; c < kFeatures; ++c) {
        pixels[r * kFeatures + c] = static_cast<float>((r * 131 + c * 17) % 256) / 256.0f;
      }
    }
  }
  Ref::Matrix matrix() const {
    Ref::Matrix m(static_cast<Eigen::Index>(rows), static_cast<Eigen::Index>(kFeatures));
    std::copy(pixels.begin(), pixels.end(), m.data());
    return m;
  }
};

std::shared_ptr<const kdist::Distribution> make_dist(bool model_parallel) {
  const auto n = static_cast<std::size_t>(world_size());
  if (!model_parallel) {
    return std::make_shared<kdist::DataParallel>(
        kdist::RuntimeDeviceMesh({n}, {"batch"}, kdist::list_devices()));
  }
  kdist::RuntimeDeviceMesh mesh({1, n}, {"data", "model"}, kdist::list_devices());
  kdist::LayoutMap map(mesh);
  map["d1/kernel"] = {kdist::replicated, "model"};
  map["d1/bias"] = {"model"};
  map["d2/output"] = {"data", kdist::replicated};
  return std::make_shared<kdist::ModelParallel>(std::move(map), "data");
}

//! FSDP on mesh (N,): both kernels' rows sharded over "batch" (gathered for compute, their
//! gradients reduce-scattered), the batch too.
std::shared_ptr<const kdist::Distribution> make_fsdp_dist() {
  kdist::RuntimeDeviceMesh mesh({static_cast<std::size_t>(world_size())}, {"batch"},
                                kdist::list_devices());
  kdist::LayoutMap map(mesh);
  map["d\\d/kernel"] = {"batch", kdist::replicated};
  return std::make_shared<kdist::ModelParallel>(std::move(map), "batch");
}

//! The kdist trainer's model and this process's rows of a global batch.
struct KdistStep {
  kdist::Sequential model = kdist::examples::make_seed_model();
  Kokkos::View<float**, Kokkos::LayoutRight> x;
  Kokkos::View<std::int32_t*, Kokkos::LayoutRight> y;
  std::size_t global;
  //! `shard_state`: GradientSyncOptions::shard_optimizer_state (else the environment's setting).
  KdistStep(bool model_parallel, const Batch& batch, std::optional<bool> shard_state = {})
      : KdistStep(make_dist(model_parallel), batch, [&]() -> std::optional<Options> {
          if (!shard_state) return std::nullopt;
          auto options = Options::from_environment();
          options.shard_optimizer_state = *shard_state;
          return options;
        }()) {}
  //! On `dist`, with `options` (none: the environment's).
  using Options = kdist::GradientSyncOptions;
  KdistStep(std::shared_ptr<const kdist::Distribution> dist, const Batch& batch,
            std::optional<Options> options)
      : global(batch.rows) {
    if (options) model.set_gradient_sync(*options);
    model.compile(std::move(dist), kdist::Loss::categorical_crossentropy, kdist::Adam(0.001),
                  kSeed);
    const auto layout = model.input_layout(global);
    const auto ext =
        layout.local_extents(std::vector<std::size_t>{global, kFeatures}, world_rank());
    const auto off = layout.offsets(std::vector<std::size_t>{global, kFeatures}, world_rank());
    x = decltype(x)("x", ext[0], kFeatures);
    y = decltype(y)("y", ext[0]);
    for (std::size_t r = 0; r < ext[0]; ++r) {
      std::copy_n(&batch.pixels[(off[0] + r) * kFeatures], kFeatures, &x(r, 0));
      y(r) = batch.labels[off[0] + r];
    }
  }
  void operator()() { benchmark::DoNotOptimize(model.train_step(x, y, global)); }
};

//! The Eigen reference's step on the whole global batch.
struct EigenStep {
  Ref ref;
  Ref::Matrix x;
  std::vector<std::uint8_t> labels;
  explicit EigenStep(const Batch& batch) : x(batch.matrix()), labels(batch.labels) {
    // Like with like: kdist's rank runs on one thread unless OMP_NUM_THREADS says otherwise, and
    // Eigen (built with -fopenmp) would otherwise take every core for its GEMMs.
    if (std::getenv("OMP_NUM_THREADS") == nullptr) Eigen::setNbThreads(1);
  }
  void operator()() { benchmark::DoNotOptimize(ref.train_step(x, labels)); }
};

//! Times one step per iteration (slowest rank); returns the mean time per step.
template <class Op>
double timed_loop(benchmark::State& state, Op& op) {
  for (int i = 0; i < 3; ++i) op();  // warm-up: allocations, page faults, communicators
  MPI_Barrier(MPI_COMM_WORLD);
  double total = 0;
  for (auto _ : state) {
    const double start = MPI_Wtime();
    op();
    const double elapsed = kdist::bench::slowest_rank(MPI_Wtime() - start);
    total += elapsed;
    state.SetIterationTime(elapsed);
  }
  return total / static_cast<double>(state.iterations());
}

void step_eigen(benchmark::State& state) {
  const Batch batch(static_cast<std::size_t>(state.range(0)));
  EigenStep op(batch);
  timed_loop(state, op);
  state.SetItemsProcessed(state.iterations() * state.range(0));
}

template <bool ModelParallel>
void step_kdist(benchmark::State& state) {
  const Batch batch(static_cast<std::size_t>(state.range(0)));
  KdistStep op(ModelParallel, batch);
  timed_loop(state, op);
  state.SetItemsProcessed(state.iterations() * state.range(0));
  kdist::bench::report_device_graph(state, op.model);
}

//! kdist and Eigen steps alternating (each first every other iteration); counters are the median
//! per-step times in milliseconds and their ratio.
template <bool ModelParallel>
void step_paired(benchmark::State& state) {
  const Batch batch(static_cast<std::size_t>(state.range(0)));
  KdistStep lib(ModelParallel, batch);
  EigenStep ref(batch);
  const auto m = kdist::bench::paired_medians(state, ref, lib);
  const double l = m.lib * 1e3, r = m.base * 1e3;
  state.counters["kdist_ms"] = l;
  state.counters["eigen_ms"] = r;
  state.counters["ratio"] = l / r;
}

long allocations_seen = 0;
void count_allocation(Kokkos::Tools::SpaceHandle, const char*, const void*, std::uint64_t) {
  ++allocations_seen;
}
long minor_faults() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_minflt;
}

void data_parallel_throughput(benchmark::State& state) {
  const Batch batch(static_cast<std::size_t>(state.range(0)));
  KdistStep op(false, batch);
  for (int i = 0; i < 2; ++i) op();  // a step's buffers are allocated in the first two steps
  allocations_seen = 0;
  Kokkos::Tools::Experimental::set_allocate_data_callback(count_allocation);
  const long faults = minor_faults();
  const std::uint64_t staged = kdist::host_staged_bytes();
  const double per_step = timed_loop(state, op);  // its 3 warm-up steps are counted too
  const auto steps = static_cast<double>(state.iterations() + 3);
  const double faults_per_step = static_cast<double>(minor_faults() - faults) / steps;
  Kokkos::Tools::Experimental::set_allocate_data_callback(nullptr);
  // device memory copied to and from the host for MPI (0 on CPUs and with a GPU-aware MPI)
  state.counters["host_staged_bytes_per_step"] =
      static_cast<double>(kdist::host_staged_bytes() - staged) / steps;
  state.counters["examples_per_s"] = static_cast<double>(state.range(0)) / per_step;
  state.counters["ranks"] = world_size();
  state.counters["allocations_per_step"] = static_cast<double>(allocations_seen) / steps;
  state.counters["page_faults_per_step"] = faults_per_step;
}

//! This process's bytes of Adam's two slots over every variable of `model`: the local block of
//! each, or its part where the optimizer state is sharded.
double adam_state_bytes(kdist::Sequential& model) {
  double bytes = 0;
  model.for_each_variable([&](auto& v) {
    using T = typename std::decay_t<decltype(v.value)>::value_type;
    const auto part = model.optimizer_state_part(v.path);
    bytes += 2.0 * static_cast<double>((part ? part->second : v.value.local().size()) * sizeof(T));
  });
  return bytes;
}

//! DataParallel with the optimizer state sharded over the processes (ZeRO-1: reduce-scatter,
//! update of this process's part, all-gather) against the same model with all-reduced gradients
//! and whole state, steps alternating in one run: median per-step times (slowest rank), their
//! ratio, and Adam's state bytes on the largest process for both.
void data_parallel_sharded_state(benchmark::State& state) {
  const Batch batch(static_cast<std::size_t>(state.range(0)));
  KdistStep whole(false, batch, false);
  KdistStep sharded(false, batch, true);
  const auto m = kdist::bench::paired_medians(state, whole, sharded);
  state.counters["all_reduce_ms"] = m.base * 1e3;
  state.counters["sharded_ms"] = m.lib * 1e3;
  state.counters["speedup"] = m.base / m.lib;
  double bytes[2] = {adam_state_bytes(whole.model), adam_state_bytes(sharded.model)};
  MPI_Allreduce(MPI_IN_PLACE, bytes, 2, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  state.counters["adam_bytes_whole"] = bytes[0];
  state.counters["adam_bytes_sharded"] = bytes[1];
  state.counters["ranks"] = world_size();
}

void model_parallel_memory(benchmark::State& state) {
  const Batch batch(static_cast<std::size_t>(state.range(0)));
  KdistStep op(true, batch);
  const double per_step = timed_loop(state, op);
  double local = 0, global = 0;
  op.model.for_each_variable([&](auto& v) {
    using T = typename std::decay_t<decltype(v.value)>::value_type;
    // the value and Adam's two slots (m, v), each shaped like the local block
    local += 3.0 * static_cast<double>(v.value.local().size() * sizeof(T));
    global += 3.0 * static_cast<double>(v.value.global_size() * sizeof(T));
  });
  double worst = local;
  MPI_Allreduce(MPI_IN_PLACE, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  state.counters["weight_bytes_per_rank"] = worst;  // the largest rank's
  state.counters["weight_bytes_1rank"] = global;
  state.counters["memory_ratio"] = worst / global;
  state.counters["examples_per_s"] = static_cast<double>(state.range(0)) / per_step;
  state.counters["ranks"] = world_size();
}

//! FSDP (make_fsdp_dist) with float32 collectives against bfloat16 ones, steps alternating in one
//! run: median per-step times (slowest rank), their ratio, and examples/s for both. bfloat16:
//! the kernels' gradient reduce-scatters (GradientSyncOptions::bfloat16_sums), and with `gathers`
//! their all-gathers too (bfloat16_gathers).
void fsdp_bfloat16(benchmark::State& state, bool gathers) {
  const Batch batch(static_cast<std::size_t>(state.range(0)));
  auto options = kdist::GradientSyncOptions::from_environment();
  options.bfloat16_sums = false;
  options.bfloat16_gathers = false;
  KdistStep float32(make_fsdp_dist(), batch, options);
  options.bfloat16_sums = true;
  options.bfloat16_gathers = gathers;
  KdistStep bfloat16(make_fsdp_dist(), batch, options);
  const auto m = kdist::bench::paired_medians(state, float32, bfloat16);
  state.counters["float32_ms"] = m.base * 1e3;
  state.counters["bfloat16_ms"] = m.lib * 1e3;
  state.counters["speedup"] = m.base / m.lib;
  state.counters["float32_examples_per_s"] = static_cast<double>(state.range(0)) / m.base;
  state.counters["bfloat16_examples_per_s"] = static_cast<double>(state.range(0)) / m.lib;
}
void fsdp_bfloat16_sums(benchmark::State& state) {
  fsdp_bfloat16(state, false);
}
void fsdp_bfloat16_sums_and_gathers(benchmark::State& state) {
  fsdp_bfloat16(state, true);
}

void register_all() {
  auto reg = [](const std::string& name, void (*fn)(benchmark::State&), std::int64_t batch,
                int reps) {
    auto* b = benchmark::RegisterBenchmark(name.c_str(), fn)
                  ->Arg(batch)
                  ->Iterations(iterations_for(static_cast<std::size_t>(batch)))
                  ->UseManualTime()
                  ->Unit(benchmark::kMillisecond);
    if (reps > 1) b->Repetitions(reps)->ReportAggregatesOnly(true);
  };
  if (world_size() == 1) {
    for (std::int64_t batch : {128, 256}) {
      reg("BM_step_eigen", step_eigen, batch, kRepetitions);
      reg("BM_step_kdist_data_parallel", step_kdist<false>, batch, kRepetitions);
      reg("BM_step_kdist_model_parallel", step_kdist<true>, batch, kRepetitions);
      reg("BM_step_paired_data_parallel", step_paired<false>, batch, 1);
      reg("BM_step_paired_model_parallel", step_paired<true>, batch, 1);
    }
  }
  reg("BM_data_parallel_throughput", data_parallel_throughput, 256, kRepetitions);
  reg("BM_model_parallel_memory", model_parallel_memory, 256, 1);
  if (world_size() > 1) {
    reg("BM_data_parallel_sharded_state", data_parallel_sharded_state, 256, 1);
    reg("BM_fsdp_bfloat16_sums", fsdp_bfloat16_sums, 256, 1);
    reg("BM_fsdp_bfloat16_sums_and_gathers", fsdp_bfloat16_sums_and_gathers, 256, 1);
  }
}

// Rank 0: the console table, then a summary of the ratios against the targets.
class SummaryReporter : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    ConsoleReporter::ReportRuns(runs);
    for (const auto& run : runs) {
      const std::string key = run.run_name.function_name + "/" + run.run_name.args;
      if (run.run_type == Run::RT_Aggregate && run.aggregate_name == "median") {
        medians_[key] = run.GetAdjustedRealTime();
        for (const auto& [name, c] : run.counters) counters_[key + ":" + name] = c.value;
      }
      if (run.run_type == Run::RT_Iteration) {
        for (const auto& [name, c] : run.counters) counters_[key + ":" + name] = c.value;
      }
    }
  }
  void Finalize() override {
    ConsoleReporter::Finalize();
    const int n = world_size();
    std::printf("\nsummary (%d rank%s; times are the slowest rank's, ms per step)\n", n,
                n == 1 ? "" : "s");
    for (const char* strategy : {"data_parallel", "model_parallel"}) {
      for (const int batch : {128, 256}) {
        const std::string b = std::to_string(batch);
        const auto e = medians_.find("BM_step_eigen/" + b);
        const auto k = medians_.find(std::string("BM_step_kdist_") + strategy + "/" + b);
        const auto p =
            counters_.find(std::string("BM_step_paired_") + strategy + "/" + b + ":ratio");
        if (e == medians_.end() || k == medians_.end() || p == counters_.end()) continue;
        const std::string pk = std::string("BM_step_paired_") + strategy + "/" + b;
        std::printf(
            "step %-14s batch %3d: eigen %7.3f kdist %7.3f ratio %.3f | paired: eigen %7.3f "
            "kdist %7.3f ratio %.3f (target <= 1.25)\n",
            strategy, batch, e->second, k->second, k->second / e->second,
            counters_[pk + ":eigen_ms"], counters_[pk + ":kdist_ms"], p->second);
      }
    }
    const auto t = counters_.find("BM_data_parallel_throughput/256:examples_per_s");
    if (t != counters_.end()) {
      std::printf(
          "data_parallel_throughput ranks=%d batch=256 examples_per_s=%.1f "
          "allocations_per_step=%.2f page_faults_per_step=%.2f\n",
          n, t->second, counters_["BM_data_parallel_throughput/256:allocations_per_step"],
          counters_["BM_data_parallel_throughput/256:page_faults_per_step"]);
    }
    const auto m = counters_.find("BM_model_parallel_memory/256:memory_ratio");
    if (m != counters_.end()) {
      std::printf(
          "model_parallel_memory ranks=%d bytes_per_rank=%.0f bytes_1rank=%.0f ratio=%.4f "
          "(target <= 0.55)\n",
          n, counters_["BM_model_parallel_memory/256:weight_bytes_per_rank"],
          counters_["BM_model_parallel_memory/256:weight_bytes_1rank"], m->second);
    }
    std::fflush(stdout);
  }

 private:
  std::map<std::string, double> medians_;
  std::map<std::string, double> counters_;
};

}  // namespace

int main(int argc, char** argv) {
  return kdist::bench::mpi_benchmark_main<SummaryReporter>(argc, argv, register_all);
}
