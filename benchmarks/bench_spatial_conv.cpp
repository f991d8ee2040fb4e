// A field convolved on its blocks (issue 38): one training step (forward and backward) of a Conv2D
// ('same' 3x3, 8 -> 8 channels, relu) over one large 2-D field, batch 1, run by
//   mpiexec -n P build/benchmarks/bench_spatial_conv [--benchmark_filter=...]
// Two layers in one run, timed alternately (the slowest process's time per step):
// - baseline: the field on one process (DataParallel: a batch of 1 is one process's; the others
//   wait in the kernel gradient's all-reduce), what a code that cannot split a sample does;
// - kdist:    the field's height split over the P processes (the input in blocks, as a simulation
//   holds it), halos exchanged with the neighbours in forward and backward.
// The counter `speedup` is baseline / kdist: strong scaling of one field. BM_halo_only times the
// forward's halo exchange alone (one row each side), to set it against the step.
// BM_overlap: the split step with the forward's halos overlapped against waiting for them.
// BM_volume_step: a training step of a 3-D field surrogate (two Conv3D 'same' 3x3x3, 1 -> 8 -> 1
// channels, Adam) on one n^3 volume split over the P processes (depth, then height: 1 x P, or
// 2 x 2 at 4), input and targets the processes' own blocks (kdist::from_local_blocks); counters:
// the most View memory any process held (`peak_MB`, kdist::AllocationCounters, from before the
// model is built), the field's size and the step's time. A budget under the one-process peak fits
// 2 and 4 processes: the volume that one process cannot hold trains on several.
#include <benchmark/benchmark.h>
#include <mpi.h>

#include <array>
#include <memory>
#include <string>
#include <vector>

#include <kdist/nn/gradients.hpp>
#include <kdist/nn/layers/conv2d.hpp>
#include <kdist/nn/layers/convolution.hpp>
#include <kdist/nn/model.hpp>
#include <kdist/parallel/halo_exchange.hpp>
#include <kdist/strategy/layout_map.hpp>
#include <kdist/strategy/model_parallel.hpp>
#include <kdist/tensor/allocation_counters.hpp>
#include <kdist/tensor/distribute_tensor.hpp>
#include <kdist/tensor/from_local_blocks.hpp>

#include "mpi_benchmark_main.hpp"

namespace {

using Images = kdist::DistributedTensor<float****>;
constexpr std::size_t kChannels = 8;

int processes() {
  int n = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}

kdist::RuntimeDeviceMesh mesh(std::size_t data, std::size_t h) {
  return kdist::RuntimeDeviceMesh({data, h, 1}, {"data", "h", "w"}, kdist::list_devices());
}

// One step of a built layer on x: forward, then backward with dy = 1 (gradients resolved).
struct Step {
  std::shared_ptr<const kdist::Distribution> dist;
  kdist::layers::Conv2D conv;
  Images x, dy;
  Step(std::shared_ptr<const kdist::Distribution> d, const kdist::RuntimeTensorLayout& x_layout,
       std::size_t n)
      : dist(std::move(d)),
        conv(kChannels, {3, 3}, kdist::layers::Activation::relu, true, "conv",
             {.padding = kdist::layers::Padding::same}) {
    conv.build({n, n, kChannels}, *dist, 1);
    x = kdist::distribute_tensor<float****>(
        KOKKOS_LAMBDA(std::size_t, std::size_t i, std::size_t j, std::size_t c) {
          return static_cast<float>((i * 7 + j * 3 + c) % 11) * 0.1f;
        },
        {1, n, n, kChannels}, x_layout);
    const auto y = std::get<Images>(conv.forward(kdist::LayerTensor<float>(x), {}));
    dy = kdist::distribute_tensor<float****>(
        KOKKOS_LAMBDA(std::size_t, std::size_t, std::size_t, std::size_t) { return 1.0f; },
        y.shape(), y.layout());
  }
  void operator()() {
    (void)conv.forward(kdist::LayerTensor<float>(x), {});
    (void)kdist::backward_and_resolve(conv, kdist::LayerTensor<float>(dy), true);
    Kokkos::fence();
  }
};

void BM_field_step(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0));
  const auto p = static_cast<std::size_t>(processes());
  // Baseline: a batch of one example on one process.
  const auto dp_mesh = mesh(p, 1);
  auto dp = std::make_shared<kdist::ModelParallel>(kdist::LayoutMap(dp_mesh), "data");
  Step one(dp, dp->get_data_layout(std::array<std::size_t, 4>{1, n, n, kChannels}), n);
  // kdist: the field's rows in blocks over the processes.
  const auto sp_mesh = mesh(1, p);
  kdist::LayoutMap map(sp_mesh);
  map["conv/output"] = {"data", "h", "w", kdist::replicated};
  auto sp = std::make_shared<kdist::ModelParallel>(std::move(map), "data");
  Step split(sp, kdist::RuntimeTensorLayout({"data", "h", "w", kdist::replicated}, sp_mesh), n);
  const auto m = kdist::bench::paired_medians(state, one, split);
  state.counters["one_process_ms"] = m.base * 1e3;
  state.counters["split_ms"] = m.lib * 1e3;
  state.counters["speedup"] = m.base / m.lib;
  state.counters["processes"] = static_cast<double>(p);
}

// The forward's halo exchange alone: each process's rows and one row of each neighbour.
void BM_halo_only(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0));
  const auto p = static_cast<std::size_t>(processes());
  std::vector<kdist::HaloRange> wanted;
  for (std::size_t q = 0; q < p; ++q) {
    const auto b = kdist::detail::chunk_block(n, p, q);
    wanted.push_back({static_cast<std::int64_t>(b.offset) - 1,
                      static_cast<std::int64_t>(b.offset + b.extent) + 1});
  }
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  const kdist::HaloPlan plan(n, p, static_cast<std::size_t>(rank), wanted, kdist::Boundary::zeros);
  using View = Kokkos::View<float****, Kokkos::LayoutRight>;
  View block("block", 1, plan.block().extent, n, kChannels);
  View extended("extended", 1, plan.wanted().size(), n, kChannels);
  const auto comm = kdist::mpi::Communicator::borrow(kdist::communicator());
  kdist::HaloMessages<View> kept;
  for (auto _ : state) {
    const double t0 = MPI_Wtime();
    kdist::start_halo_gather(Kokkos::DefaultExecutionSpace(), plan, 1, block, extended, &comm,
                             &kept)
        .wait();
    state.SetIterationTime(kdist::bench::slowest_rank(MPI_Wtime() - t0));
  }
}

// The split step with the forward's halos overlapped (the rows that read only the own block
// computed while they travel: the default) against waiting for them first; `overlap_gain` is
// waiting / overlapped.
void BM_overlap(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0));
  const auto p = static_cast<std::size_t>(processes());
  const auto sp_mesh = mesh(1, p);
  kdist::LayoutMap map(sp_mesh);
  map["conv/output"] = {"data", "h", "w", kdist::replicated};
  auto sp = std::make_shared<kdist::ModelParallel>(std::move(map), "data");
  Step split(sp, kdist::RuntimeTensorLayout({"data", "h", "w", kdist::replicated}, sp_mesh), n);
  auto waiting = [&] {
    kdist::layers::set_halo_overlap(false);
    split();
  };
  auto overlapped = [&] {
    kdist::layers::set_halo_overlap(true);
    split();
  };
  const auto m = kdist::bench::paired_medians(state, waiting, overlapped);
  kdist::layers::set_halo_overlap(true);
  state.counters["waiting_ms"] = m.base * 1e3;
  state.counters["overlapped_ms"] = m.lib * 1e3;
  state.counters["overlap_gain"] = m.base / m.lib;
}

void BM_volume_step(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0));
  const auto p = static_cast<std::size_t>(processes());
  const std::size_t pd = p == 4 ? 2 : p, ph = p / pd;
  kdist::AllocationCounters memory;
  const kdist::RuntimeDeviceMesh m({1, pd, ph, 1}, {"data", "d", "h", "w"}, kdist::list_devices());
  const kdist::RuntimeTensorLayout blocks({kdist::replicated, "d", "h", "w", kdist::replicated}, m);
  using namespace kdist::layers;
  std::vector<kdist::Sequential::Layer> layers;
  layers.emplace_back(
      Conv3D(8, {3, 3, 3}, Activation::relu, true, "conv", {.padding = Padding::same}));
  layers.emplace_back(
      Conv3D(1, {3, 3, 3}, Activation::linear, true, "conv_1", {.padding = Padding::same}));
  kdist::Sequential model({n, n, n, 1}, std::move(layers));
  model.compile(std::make_shared<kdist::ModelParallel>(kdist::LayoutMap(m), "data"),
                kdist::Loss::mean_squared_error, kdist::Adam(1e-3), 1);
  const auto coords = m.coords_of(static_cast<std::size_t>(kdist::process_id()));
  const auto bd = kdist::detail::chunk_block(n, pd, coords[1]);
  const auto bh = kdist::detail::chunk_block(n, ph, coords[2]);
  Kokkos::View<float*****, Kokkos::LayoutRight> u("u", 1, bd.extent, bh.extent, n, 1),
      next("next", 1, bd.extent, bh.extent, n, 1);
  Kokkos::deep_copy(u, 0.5f);
  Kokkos::deep_copy(next, 0.25f);
  const auto x = kdist::from_local_blocks<float*****>(u, {1, n, n, n, 1}, blocks);
  (void)model.train_step(x, next);  // the shapes seen: later steps allocate nothing
  for (auto _ : state) {
    const double t0 = MPI_Wtime();
    (void)model.train_step(x, next);
    Kokkos::fence();
    state.SetIterationTime(kdist::bench::slowest_rank(MPI_Wtime() - t0));
  }
  double peak = static_cast<double>(memory.peak_bytes());
  MPI_Allreduce(MPI_IN_PLACE, &peak, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  state.counters["peak_MB"] = peak / 1e6;
  state.counters["field_MB"] = static_cast<double>(n * n * n) * sizeof(float) / 1e6;
  state.counters["processes"] = static_cast<double>(p);
}

void register_all() {
  benchmark::RegisterBenchmark("BM_field_step", BM_field_step)
      ->Arg(512)
      ->Arg(1024)
      ->UseManualTime()
      ->Unit(benchmark::kMillisecond)
      ->Iterations(10);
  benchmark::RegisterBenchmark("BM_overlap", BM_overlap)
      ->Arg(512)
      ->Arg(1024)
      ->UseManualTime()
      ->Unit(benchmark::kMillisecond)
      ->Iterations(10);
  benchmark::RegisterBenchmark("BM_volume_step", BM_volume_step)
      ->Arg(48)
      ->Arg(64)
      ->UseManualTime()
      ->Unit(benchmark::kMillisecond)
      ->Iterations(3);
  benchmark::RegisterBenchmark("BM_halo_only", BM_halo_only)
      ->Arg(512)
      ->Arg(1024)
      ->UseManualTime()
      ->Unit(benchmark::kMicrosecond)
      ->Iterations(50);
}

}  // namespace

int main(int argc, char** argv) {
  return kdist::bench::mpi_benchmark_main<benchmark::ConsoleReporter>(argc, argv, register_all);
}
