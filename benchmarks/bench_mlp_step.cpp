// The issue-21 MLP's training step on any number of processes, with the threads each process is
// given: ranks x threads against each other on one machine, and against Keras/JAX
// (benchmarks/keras_mlp_step.py, the same model, batch and optimizer).
//
//   build/benchmarks/bench_mlp_step                                  # 1 rank x 1 thread
//   OMP_NUM_THREADS=2 build/benchmarks/bench_mlp_step                # 1 rank x 2 threads
//   mpiexec -n 2 build/benchmarks/bench_mlp_step                     # 2 ranks x 1 thread
//
// Threads per rank are OpenBLAS' (OMP_NUM_THREADS or OPENBLAS_NUM_THREADS, read by OpenBLAS; its
// OpenMP or pthread variant, Debian's libopenblas-openmp-dev): without either variable a rank's
// GEMMs use one thread (kdist/ops/detail/cblas.hpp). The elementwise kernels use one.
//
// BM_mlp_step/H/P: 784-4096[-4096]-10 (H = 1 or 2 hidden Dense relu layers of 4096, Dropout(0.4)
// after the first, Dense softmax; Adam 1e-3, categorical cross-entropy, global batch 128).
// P = 0: DataParallel on mesh (N,); P = 1: ModelParallel on mesh (1, N), Megatron-style (the first
// hidden kernel split by columns, the next by rows, the head replicated). ms per step of the
// slowest rank; counters: ranks, blas_threads.
#include <benchmark/benchmark.h>

#include <mpi.h>
#include "mpi_benchmark_main.hpp"

#include <Kokkos_Core.hpp>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <kdist/kdist.hpp>

#if defined(KDIST_ENABLE_CBLAS) && defined(OPENBLAS_VERSION)
#include <cblas.h>
#endif

namespace {

constexpr std::size_t kFeatures = 784;
constexpr std::size_t kHidden = 4096;
constexpr std::size_t kBatch = 128;

int world(int (*what)(MPI_Comm, int*)) {
  int v = 0;
  what(MPI_COMM_WORLD, &v);
  return v;
}

std::shared_ptr<const kdist::Distribution> make_distribution(bool model_parallel,
                                                             int hidden_layers) {
  const auto n = static_cast<std::size_t>(world(MPI_Comm_size));
  if (!model_parallel) {
    return std::make_shared<kdist::DataParallel>(
        kdist::RuntimeDeviceMesh({n}, {"batch"}, kdist::list_devices()));
  }
  kdist::RuntimeDeviceMesh mesh({1, n}, {"data", "model"}, kdist::list_devices());
  kdist::LayoutMap map(mesh);
  map["d1/kernel"] = {kdist::replicated, "model"};  // column-parallel
  map["d1/bias"] = {"model"};
  if (hidden_layers == 2) {
    map["d2/kernel"] = {"model", kdist::replicated};  // row-parallel: one all-reduce
  }
  return std::make_shared<kdist::ModelParallel>(std::move(map), "data");
}

kdist::Sequential make_model(int hidden_layers) {
  using namespace kdist::layers;
  std::vector<kdist::Sequential::Layer> l;
  l.emplace_back(Dense(kHidden, Activation::relu, true, "d1"));
  l.emplace_back(Dropout(0.4, "dropout"));
  if (hidden_layers == 2) l.emplace_back(Dense(kHidden, Activation::relu, true, "d2"));
  l.emplace_back(Dense(10, Activation::softmax, true, "head"));
  return kdist::Sequential(kdist::Shape{kFeatures}, std::move(l));
}

void BM_mlp_step(benchmark::State& state) {
  const auto hidden_layers = static_cast<int>(state.range(0));
  const bool model_parallel = state.range(1) != 0;
  kdist::Sequential model = make_model(hidden_layers);
  model.compile(make_distribution(model_parallel, hidden_layers),
                kdist::Loss::categorical_crossentropy, kdist::Adam(0.001), 1337);
  const auto layout = model.input_layout(kBatch);
  const std::vector<std::size_t> global{kBatch, kFeatures};
  const auto rank = world(MPI_Comm_rank);
  const auto ext = layout.local_extents(global, rank);
  const auto off = layout.offsets(global, rank);
  Kokkos::View<float**, Kokkos::LayoutRight> x("x", ext[0], kFeatures);
  Kokkos::View<std::int32_t*, Kokkos::LayoutRight> y("y", ext[0]);
  for (std::size_t r = 0; r < ext[0]; ++r) {
    const std::size_t g = off[0] + r;
    for (std::size_t c = 0; c < kFeatures; ++c) x(r, c) = float((g * 131 + c * 7) % 256) / 255.0f;
    y(r) = static_cast<std::int32_t>(g % 10);
  }
  for (int i = 0; i < 3; ++i) model.train_step(x, y, kBatch);  // warm-up
  MPI_Barrier(MPI_COMM_WORLD);
  for (auto _ : state) {
    const double start = MPI_Wtime();
    benchmark::DoNotOptimize(model.train_step(x, y, kBatch));
    state.SetIterationTime(kdist::bench::slowest_rank(MPI_Wtime() - start));
  }
  state.counters["ranks"] = world(MPI_Comm_size);
#if defined(KDIST_ENABLE_CBLAS) && defined(OPENBLAS_VERSION)
  state.counters["blas_threads"] = openblas_get_num_threads();
#endif
}

void register_all() {
  for (int hidden_layers : {1, 2}) {
    for (int model_parallel : {0, 1}) {
      benchmark::RegisterBenchmark("BM_mlp_step", BM_mlp_step)
          ->Args({hidden_layers, model_parallel})
          ->Iterations(hidden_layers == 1 ? 60 : 15)
          ->Repetitions(3)
          ->ReportAggregatesOnly(true)
          ->UseManualTime()
          ->Unit(benchmark::kMillisecond);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  return kdist::bench::mpi_benchmark_main<benchmark::ConsoleReporter>(argc, argv, register_all);
}
