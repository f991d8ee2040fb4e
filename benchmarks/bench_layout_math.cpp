// Shard arithmetic: the block (global offset, local extent) each device holds, computed by a
// static TensorLayout, by the run-time RuntimeTensorLayout, and by hand-written index math, in one
// binary, so that the ratios come out of one run (printed after the table).
//
// Each iteration computes the blocks of both dimensions of the guide's (784, 200) kernel with
// layout (None, "model") (and of a tensor with one dimension over ('data', 'model')) for every
// device of the 2x4 mesh: 16 blocks. The global extents and the devices' coordinates are opaque
// to the compiler (reloaded each iteration), so nothing folds away, and each block is stored as
// it is computed; mesh extents are compile-time constants only where the mesh type says so
// ("static mesh").
//
//   build/benchmarks/bench_layout_math --benchmark_repetitions=5
//       --benchmark_report_aggregates_only=true   (one command line)
#include <benchmark/benchmark.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdio>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <kdist/core/layout.hpp>
#include <kdist/core/runtime_layout.hpp>

namespace {

using kdist::replicated;
using StaticMesh = kdist::DeviceMesh<kdist::axis<"data", 2>, kdist::axis<"model", 4>>;
using DynamicMesh = kdist::DeviceMesh<kdist::axis<"data">, kdist::axis<"model">>;
using Coords = std::array<std::size_t, 2>;

constexpr std::size_t kDevices = 8;
constexpr std::array<std::size_t, 2> kKernel{784, 200};
constexpr std::size_t kBlocksPerIteration = 2 * kDevices;

//! The 2x4 mesh's coordinates, row-major.
constexpr std::array<Coords, kDevices> all_coords() {
  std::array<Coords, kDevices> out{};
  for (std::size_t d = 0; d < kDevices; ++d) out[d] = {d / 4, d % 4};
  return out;
}
constexpr auto kCoords = all_coords();

//! Consumes a block: it must be computed, and stored, once per call. (DoNotOptimize on each
//! scalar: Google Benchmark 1.7's DoNotOptimize(T&) lets GCC pick a register for any T, and GCC 12
//! with AVX-512 miscompiles that for a 16-byte struct.)
inline void use(kdist::Block b) {
  benchmark::DoNotOptimize(b.offset);
  benchmark::DoNotOptimize(b.extent);
}

//! Makes `x` opaque: its address escapes into an asm statement that clobbers memory, so the
//! compiler must assume `x` changed and reload it.
template <class T>
inline void opaque(T& x) {
  benchmark::DoNotOptimize(&x);
}

// ---- hand-written index math: what one writes without a layout ---------------------------------

// The chunk rule written out: ceil-division blocks, trailing ones smaller or empty.
inline kdist::Block hand_block(std::size_t n, std::size_t parts, std::size_t index) {
  const std::size_t b = (n + parts - 1) / parts;
  const std::size_t off = std::min(index * b, n);
  return {off, std::min(b, n - off)};
}

// Hand-written, the mesh extents known at compile time (2 x 4).
void BM_HandWritten_StaticMesh(benchmark::State& state) {
  std::array<std::size_t, 2> shape = kKernel;
  auto coords = kCoords;
  for (auto _ : state) {
    opaque(shape);
    opaque(coords);
    for (const auto& c : coords) {
      use(hand_block(shape[0], 1, 0));     // rows replicated
      use(hand_block(shape[1], 4, c[1]));  // columns over "model" (extent 4)
    }
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * kBlocksPerIteration));
}
BENCHMARK(BM_HandWritten_StaticMesh);

// Hand-written, the mesh extents known only at run time.
void BM_HandWritten_DynamicMesh(benchmark::State& state) {
  std::array<std::size_t, 2> shape = kKernel;
  auto coords = kCoords;
  std::array<std::size_t, 2> mesh_shape{2, 4};
  opaque(mesh_shape);
  for (auto _ : state) {
    opaque(shape);
    opaque(coords);
    for (const auto& c : coords) {
      use(hand_block(shape[0], 1, 0));
      use(hand_block(shape[1], mesh_shape[1], c[1]));
    }
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * kBlocksPerIteration));
}
BENCHMARK(BM_HandWritten_DynamicMesh);

// Hand-written, one dimension over ('data', 'model'): shard d * 4 + m of 8.
void BM_HandWritten_TwoAxes_StaticMesh(benchmark::State& state) {
  std::array<std::size_t, 2> shape = kKernel;
  auto coords = kCoords;
  for (auto _ : state) {
    opaque(shape);
    opaque(coords);
    for (const auto& c : coords) {
      use(hand_block(shape[0], 8, c[0] * 4 + c[1]));
      use(hand_block(shape[1], 1, 0));
    }
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * kBlocksPerIteration));
}
BENCHMARK(BM_HandWritten_TwoAxes_StaticMesh);

// Hand-written, one dimension over ('data', 'model'), the mesh extents known only at run time.
void BM_HandWritten_TwoAxes_DynamicMesh(benchmark::State& state) {
  std::array<std::size_t, 2> shape = kKernel;
  auto coords = kCoords;
  std::array<std::size_t, 2> mesh_shape{2, 4};
  opaque(mesh_shape);
  for (auto _ : state) {
    opaque(shape);
    opaque(coords);
    for (const auto& c : coords) {
      use(hand_block(shape[0], mesh_shape[0] * mesh_shape[1], c[0] * mesh_shape[1] + c[1]));
      use(hand_block(shape[1], 1, 0));
    }
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * kBlocksPerIteration));
}
BENCHMARK(BM_HandWritten_TwoAxes_DynamicMesh);

// ---- static TensorLayout -------------------------------------------------------------------------

// TensorLayout::static_block: mesh extents from the type (no mesh object).
void BM_StaticLayout_StaticBlock(benchmark::State& state) {
  using Kernel = kdist::TensorLayout<StaticMesh, replicated, "model">;
  std::array<std::size_t, 2> shape = kKernel;
  auto coords = kCoords;
  for (auto _ : state) {
    opaque(shape);
    opaque(coords);
    for (const auto& c : coords) {
      use(Kernel::static_block(0, shape[0], c));
      use(Kernel::static_block(1, shape[1], c));
    }
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * kBlocksPerIteration));
}
BENCHMARK(BM_StaticLayout_StaticBlock);

// TensorLayout::block on a static mesh object.
void BM_StaticLayout_StaticMesh(benchmark::State& state) {
  const kdist::TensorLayout<StaticMesh, replicated, "model"> kernel{StaticMesh()};
  std::array<std::size_t, 2> shape = kKernel;
  auto coords = kCoords;
  for (auto _ : state) {
    opaque(shape);
    opaque(coords);
    for (const auto& c : coords) {
      use(kernel.block(0, shape[0], c));
      use(kernel.block(1, shape[1], c));
    }
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * kBlocksPerIteration));
}
BENCHMARK(BM_StaticLayout_StaticMesh);

// TensorLayout::block on a mesh whose extents are both dynamic.
void BM_StaticLayout_DynamicMesh(benchmark::State& state) {
  const kdist::TensorLayout<DynamicMesh, replicated, "model"> kernel{DynamicMesh({2, 4}, 8)};
  std::array<std::size_t, 2> shape = kKernel;
  auto coords = kCoords;
  for (auto _ : state) {
    opaque(shape);
    opaque(coords);
    for (const auto& c : coords) {
      use(kernel.block(0, shape[0], c));
      use(kernel.block(1, shape[1], c));
    }
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * kBlocksPerIteration));
}
BENCHMARK(BM_StaticLayout_DynamicMesh);

// One dimension over ('data', 'model'), static mesh.
void BM_StaticLayout_TwoAxes_StaticMesh(benchmark::State& state) {
  using Layout = kdist::TensorLayout<StaticMesh, kdist::axes<"data", "model">, replicated>;
  std::array<std::size_t, 2> shape = kKernel;
  auto coords = kCoords;
  for (auto _ : state) {
    opaque(shape);
    opaque(coords);
    for (const auto& c : coords) {
      use(Layout::static_block(0, shape[0], c));
      use(Layout::static_block(1, shape[1], c));
    }
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * kBlocksPerIteration));
}
BENCHMARK(BM_StaticLayout_TwoAxes_StaticMesh);

// ---- run-time layout -----------------------------------------------------------------------------

void BM_RuntimeLayout(benchmark::State& state) {
  const kdist::RuntimeTensorLayout kernel({replicated, "model"},
                                          kdist::RuntimeDeviceMesh({2, 4}, {"data", "model"}, 8));
  std::array<std::size_t, 2> shape = kKernel;
  auto coords = kCoords;
  for (auto _ : state) {
    opaque(shape);
    opaque(coords);
    for (const auto& c : coords) {
      use(kernel.block(0, shape[0], c));
      use(kernel.block(1, shape[1], c));
    }
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * kBlocksPerIteration));
}
BENCHMARK(BM_RuntimeLayout);

void BM_RuntimeLayout_TwoAxes(benchmark::State& state) {
  const kdist::RuntimeTensorLayout layout({kdist::DimAxes{"data", "model"}, replicated},
                                          kdist::RuntimeDeviceMesh({2, 4}, {"data", "model"}, 8));
  std::array<std::size_t, 2> shape = kKernel;
  auto coords = kCoords;
  for (auto _ : state) {
    opaque(shape);
    opaque(coords);
    for (const auto& c : coords) {
      use(layout.block(0, shape[0], c));
      use(layout.block(1, shape[1], c));
    }
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * kBlocksPerIteration));
}
BENCHMARK(BM_RuntimeLayout_TwoAxes);

// ---- per device: local extents and offsets from the device index (what a tensor does once) -------

void BM_PerDevice_HandWritten(benchmark::State& state) {
  std::array<std::size_t, 2> shape = kKernel;
  std::size_t devices = kDevices;
  for (auto _ : state) {
    opaque(shape);
    opaque(devices);
    for (std::size_t dev = 0; dev < devices; ++dev) {
      const std::size_t m = dev % 4;  // row-major (data, model)
      use(hand_block(shape[0], 1, 0));
      use(hand_block(shape[1], 4, m));
    }
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * kBlocksPerIteration));
}
BENCHMARK(BM_PerDevice_HandWritten);

void BM_PerDevice_StaticLayout(benchmark::State& state) {
  const kdist::TensorLayout<StaticMesh, replicated, "model"> kernel{StaticMesh()};
  std::array<std::size_t, 2> shape = kKernel;
  std::size_t devices = kDevices;
  for (auto _ : state) {
    opaque(shape);
    opaque(devices);
    for (std::size_t dev = 0; dev < devices; ++dev) {
      const auto off = kernel.offsets(shape, dev);
      const auto ext = kernel.local_extents(shape, dev);
      use({off[0], ext[0]});
      use({off[1], ext[1]});
    }
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * kBlocksPerIteration));
}
BENCHMARK(BM_PerDevice_StaticLayout);

// The same through coords_of once and block() per dimension (what offsets + local_extents do
// twice).
void BM_PerDevice_StaticLayout_CoordsBlock(benchmark::State& state) {
  const kdist::TensorLayout<StaticMesh, replicated, "model"> kernel{StaticMesh()};
  std::array<std::size_t, 2> shape = kKernel;
  std::size_t devices = kDevices;
  for (auto _ : state) {
    opaque(shape);
    opaque(devices);
    for (std::size_t dev = 0; dev < devices; ++dev) {
      const auto c = kernel.device_mesh().coords_of(dev);
      use(kernel.block(0, shape[0], c));
      use(kernel.block(1, shape[1], c));
    }
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * kBlocksPerIteration));
}
BENCHMARK(BM_PerDevice_StaticLayout_CoordsBlock);

void BM_PerDevice_RuntimeLayout(benchmark::State& state) {
  const kdist::RuntimeTensorLayout kernel({replicated, "model"},
                                          kdist::RuntimeDeviceMesh({2, 4}, {"data", "model"}, 8));
  std::array<std::size_t, 2> shape = kKernel;
  std::size_t devices = kDevices;
  for (auto _ : state) {
    opaque(shape);
    opaque(devices);
    for (std::size_t dev = 0; dev < devices; ++dev) {
      const auto off = kernel.offsets(shape, dev);  // std::vector results
      const auto ext = kernel.local_extents(shape, dev);
      use({off[0], ext[0]});
      use({off[1], ext[1]});
    }
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * kBlocksPerIteration));
}
BENCHMARK(BM_PerDevice_RuntimeLayout);

// ---- ratios ----------------------------------------------------------------------------------

//! The console table, then each benchmark's time per iteration over its hand-written baseline's
//! (CPU time; the median when repetitions are asked for, else the single run).
class RatioReporter : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    ConsoleReporter::ReportRuns(runs);
    for (const auto& r : runs) {
      if (r.error_occurred) continue;
      const bool aggregate = r.run_type == Run::RT_Aggregate;
      if (aggregate && r.aggregate_name != "median") continue;
      auto& slot = cpu_ns_[r.run_name.function_name];
      if (aggregate || !slot.second) slot = {r.GetAdjustedCPUTime(), aggregate};
    }
  }
  void Finalize() override {
    const std::vector<std::pair<std::string, std::string>> pairs{
        {"BM_StaticLayout_StaticBlock", "BM_HandWritten_StaticMesh"},
        {"BM_StaticLayout_StaticMesh", "BM_HandWritten_StaticMesh"},
        {"BM_StaticLayout_StaticMesh", "BM_HandWritten_DynamicMesh"},
        {"BM_StaticLayout_DynamicMesh", "BM_HandWritten_DynamicMesh"},
        {"BM_StaticLayout_TwoAxes_StaticMesh", "BM_HandWritten_TwoAxes_StaticMesh"},
        {"BM_RuntimeLayout", "BM_HandWritten_DynamicMesh"},
        {"BM_RuntimeLayout_TwoAxes", "BM_HandWritten_TwoAxes_DynamicMesh"},
        {"BM_PerDevice_StaticLayout", "BM_PerDevice_HandWritten"},
        {"BM_PerDevice_StaticLayout_CoordsBlock", "BM_PerDevice_HandWritten"},
        {"BM_PerDevice_RuntimeLayout", "BM_PerDevice_HandWritten"},
    };
    std::printf("\nratio to hand-written index math (CPU time per iteration):\n");
    for (const auto& [name, base] : pairs) {
      const auto a = cpu_ns_.find(name);
      const auto b = cpu_ns_.find(base);
      if (a == cpu_ns_.end() || b == cpu_ns_.end() || b->second.first <= 0) continue;
      std::printf("  %-38s / %-34s %6.2f\n", name.c_str(), base.c_str(),
                  a->second.first / b->second.first);
    }
    ConsoleReporter::Finalize();
  }

 private:
  std::map<std::string, std::pair<double, bool>> cpu_ns_;  // time, is-median
};

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  RatioReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::Shutdown();
  return 0;
}
