// Static local extents (issue 10): the same per-device kernels on a typed tensor's local block,
// once through its static-extent View (`DistributedTensor<float*[10], ...>::view_type`, i.e.
// `View<float*[10]>`) and once through the run-time View of the same block
// (`t.runtime().local()`, `View<float**>`), in one binary, alternating call by call:
//
//  - softmax over the rows of a logits block (B x 10: the seeds' model's output layer);
//  - bias + ReLU over a hidden block (B x 200: its first Dense layer);
//
// B = 4096 and 32768 rows. Run with 1 process (the kernels are local; no collective):
//
//   mpiexec -n 1 build/benchmarks/bench_static_extents
//
// Each benchmark reports the median time per call of both and `static/dynamic`, their ratio.
#include <benchmark/benchmark.h>

#include <mpi.h>
#include "mpi_benchmark_main.hpp"

#include <Kokkos_Core.hpp>
#include <cmath>
#include <cstddef>

#include <kdist/ops/detail/kokkos_math.hpp>
#include <kdist/parallel/initialize.hpp>
#include <kdist/tensor/distribute_tensor.hpp>

namespace {

// A static 'model' axis of 1, so the type knows every block's columns; rows over run-time 'data'.
using Mesh = kdist::DeviceMesh<kdist::axis<"data">, kdist::axis<"model", 1>>;
using Rows = kdist::TensorLayout<Mesh, "data", kdist::replicated>;
using Cols = kdist::TensorLayout<Mesh, kdist::replicated, "model">;

template <class V>
void softmax_rows(const V& logits, const V& out) {
  const int cols = static_cast<int>(logits.extent(1));  // a constant for View<float*[10]>
  Kokkos::parallel_for(
      "softmax_rows", Kokkos::RangePolicy<>(0, logits.extent(0)), KOKKOS_LAMBDA(const int i) {
        float m = logits(i, 0);
        for (int j = 1; j < cols; ++j) m = logits(i, j) > m ? logits(i, j) : m;
        float sum = 0;
        for (int j = 0; j < cols; ++j) {
          out(i, j) = kdist::detail::kmath::exp(logits(i, j) - m);
          sum += out(i, j);
        }
        for (int j = 0; j < cols; ++j) out(i, j) /= sum;
      });
  Kokkos::fence();
}

template <class V, class B>
void bias_relu(const V& h, const B& bias) {
  const int cols = static_cast<int>(h.extent(1));
  Kokkos::parallel_for(
      "bias_relu", Kokkos::RangePolicy<>(0, h.extent(0)), KOKKOS_LAMBDA(const int i) {
        for (int j = 0; j < cols; ++j) {
          const float v = h(i, j) + bias(0, j);
          h(i, j) = v > 0 ? v : 0;
        }
      });
  Kokkos::fence();
}

float value(std::size_t i, std::size_t j) {
  return static_cast<float>((i * 7 + j * 13) % 17) / 17.0f - 0.5f;
}

void report(benchmark::State& state, const kdist::bench::PairedMedians& m) {
  state.counters["dynamic_us"] = m.base * 1e6;
  state.counters["static_us"] = m.lib * 1e6;
  state.counters["static/dynamic"] = m.base > 0 ? m.lib / m.base : 0;
}

void BM_SoftmaxRows(benchmark::State& state) {
  const auto b = static_cast<std::size_t>(state.range(0));
  const Mesh mesh(static_cast<std::size_t>(kdist::process_count()));
  const Rows rows(mesh);
  auto logits = kdist::distribute_tensor<float* [10]>(value, {b, 10}, rows);
  auto out = kdist::DistributedTensor<float* [10], Rows>::zeros({b, 10}, rows);
  static_assert(std::is_same_v<decltype(logits.local())::data_type, float* [10]>);
  const auto m = kdist::bench::paired_medians(
      state, [&] { softmax_rows(logits.runtime().local(), out.runtime().local()); },
      [&] { softmax_rows(logits.local(), out.local()); });
  report(state, m);
}

void BM_BiasRelu(benchmark::State& state) {
  const auto b = static_cast<std::size_t>(state.range(0));
  const Mesh mesh(static_cast<std::size_t>(kdist::process_count()));
  auto h = kdist::distribute_tensor<float* [200]>(value, {b, 200}, Rows(mesh));
  auto bias = kdist::distribute_tensor<float[1][200]>(value, Cols(mesh));
  static_assert(std::is_same_v<decltype(h.local())::data_type, float* [200]>);
  const auto m = kdist::bench::paired_medians(
      state, [&] { bias_relu(h.runtime().local(), bias.runtime().local()); },
      [&] { bias_relu(h.local(), bias.local()); });
  report(state, m);
}

BENCHMARK(BM_SoftmaxRows)->Arg(4096)->Arg(32768)->UseManualTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_BiasRelu)->Arg(4096)->Arg(32768)->UseManualTime()->Unit(benchmark::kMicrosecond);

}  // namespace

int main(int argc, char** argv) {
  return kdist::bench::mpi_benchmark_main<benchmark::ConsoleReporter>(argc, argv, [] {});
}
