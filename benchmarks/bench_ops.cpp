// Local ops (issue 5): the kdist::ops::matmul wrapper against raw Eigen on the same shapes (the
// seeds' Dense layers at global batch 128 and 256), the portable Kokkos fallback for scale, and one
// training step of the Eigen reference model (the baseline the sharded trainers are compared with).
//
//   build-ops/benchmarks/bench_ops --benchmark_min_time=0.5
//
// Ratio = BM_matmul_kdist / BM_matmul_eigen of the same arguments, from one run.
#include <benchmark/benchmark.h>

#include <Eigen/Core>
#include <Kokkos_Core.hpp>
#include <cstdint>
#include <kdist/ops/activations.hpp>
#include <kdist/ops/matmul.hpp>
#include <kdist/ops/random.hpp>
#include <vector>

#include "reference_mlp.hpp"

namespace {

using RowMajor = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using View = Kokkos::View<float**, Kokkos::LayoutRight, Kokkos::HostSpace>;

void fill(float* data, std::size_t n, const char* name) {
  const auto key = kdist::random_key(1, kdist::stream_id(name));
  for (std::size_t i = 0; i < n; ++i) data[i] = kdist::uniform01(key, i) - 0.5f;
}

//! Arguments: batch, inputs, units. C[batch, units] = A[batch, inputs] * B[inputs, units].
void BM_matmul_eigen(benchmark::State& state) {
  const auto m = state.range(0), k = state.range(1), n = state.range(2);
  RowMajor a(m, k), b(k, n), c(m, n);
  fill(a.data(), static_cast<std::size_t>(a.size()), "a");
  fill(b.data(), static_cast<std::size_t>(b.size()), "b");
  for (auto _ : state) {
    c.noalias() = a * b;
    benchmark::DoNotOptimize(c.data());
    benchmark::ClobberMemory();
  }
  state.counters["GFLOP/s"] =
      benchmark::Counter(2.0 * double(m * k * n), benchmark::Counter::kIsIterationInvariantRate,
                         benchmark::Counter::kIs1000);
}

void BM_matmul_kdist(benchmark::State& state) {
  const auto m = static_cast<std::size_t>(state.range(0));
  const auto k = static_cast<std::size_t>(state.range(1));
  const auto n = static_cast<std::size_t>(state.range(2));
  View a("a", m, k), b("b", k, n), c("c", m, n);
  fill(a.data(), a.size(), "a");
  fill(b.data(), b.size(), "b");
  for (auto _ : state) {
    kdist::ops::matmul(a, b, c);
    benchmark::DoNotOptimize(c.data());
    benchmark::ClobberMemory();
  }
  state.counters["GFLOP/s"] =
      benchmark::Counter(2.0 * double(m * k * n), benchmark::Counter::kIsIterationInvariantRate,
                         benchmark::Counter::kIs1000);
}

//! The Dense kernel gradient dW[inputs, units] = X^T[inputs, batch] * dY[batch, units].
void BM_matmul_eigen_xt_dy(benchmark::State& state) {
  const auto m = state.range(0), k = state.range(1), n = state.range(2);
  RowMajor x(m, k), dy(m, n), dw(k, n);
  fill(x.data(), static_cast<std::size_t>(x.size()), "a");
  fill(dy.data(), static_cast<std::size_t>(dy.size()), "b");
  for (auto _ : state) {
    dw.noalias() = x.transpose() * dy;
    benchmark::DoNotOptimize(dw.data());
    benchmark::ClobberMemory();
  }
}

void BM_matmul_kdist_xt_dy(benchmark::State& state) {
  const auto m = static_cast<std::size_t>(state.range(0));
  const auto k = static_cast<std::size_t>(state.range(1));
  const auto n = static_cast<std::size_t>(state.range(2));
  View x("x", m, k), dy("dy", m, n), dw("dw", k, n);
  fill(x.data(), x.size(), "a");
  fill(dy.data(), dy.size(), "b");
  for (auto _ : state) {
    kdist::ops::matmul(x, dy, dw, kdist::ops::Op::transpose, kdist::ops::Op::none);
    benchmark::DoNotOptimize(dw.data());
    benchmark::ClobberMemory();
  }
}

//! The portable Kokkos kernel on host memory (what a device backend runs), for scale only.
void BM_matmul_kokkos_fallback(benchmark::State& state) {
  const auto m = static_cast<std::size_t>(state.range(0));
  const auto k = static_cast<std::size_t>(state.range(1));
  const auto n = static_cast<std::size_t>(state.range(2));
  View a("a", m, k), b("b", k, n), c("c", m, n);
  fill(a.data(), a.size(), "a");
  fill(b.data(), b.size(), "b");
  for (auto _ : state) {
    kdist::ops::matmul(a, b, c, kdist::ops::Op::none, kdist::ops::Op::none, 1.0f, 0.0f,
                       kdist::ops::backend::kokkos);
    Kokkos::fence();
    benchmark::DoNotOptimize(c.data());
  }
}

//! One training step (forward, loss, backward, Adam) of the reference model, float, batch arg.
void BM_reference_train_step(benchmark::State& state) {
  const auto batch = state.range(0);
  kdist::reference::ReferenceMlp<float> model;
  RowMajor x(batch, 784);
  fill(x.data(), static_cast<std::size_t>(x.size()), "x");
  x.array() += 0.5f;
  std::vector<std::uint8_t> labels(static_cast<std::size_t>(batch));
  for (std::size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<std::uint8_t>(i % 10);
  for (auto _ : state) {
    benchmark::DoNotOptimize(model.train_step(x, labels));
  }
  state.counters["examples/s"] =
      benchmark::Counter(static_cast<double>(batch), benchmark::Counter::kIsIterationInvariantRate);
}

void dense_shapes(benchmark::internal::Benchmark* b) {
  for (std::int64_t batch : {128, 256}) {
    b->Args({batch, 784, 200});
    b->Args({batch, 200, 10});
  }
}

//! Bias + ReLU on a Dense output [batch, units], forward and backward: the separate kernels
//! (bias_add, relu_inplace; relu_backward_inplace, bias_grad: four passes) against the fused ones
//! (bias_add_relu; relu_backward_bias_grad: two passes). Arguments: batch, units; arg 2: 1 fused.
void BM_bias_relu(benchmark::State& state) {
  const auto m = static_cast<std::size_t>(state.range(0));
  const auto n = static_cast<std::size_t>(state.range(1));
  const bool fused = state.range(2) != 0;
  View z0("z0", m, n), z("z", m, n), d0("d0", m, n), d("d", m, n);
  Kokkos::View<float*, Kokkos::HostSpace> b("b", n), db("db", n);
  fill(z0.data(), m * n, "z");
  fill(d0.data(), m * n, "d");
  fill(b.data(), n, "b");
  for (auto _ : state) {
    state.PauseTiming();
    Kokkos::deep_copy(z, z0);
    Kokkos::deep_copy(d, d0);
    state.ResumeTiming();
    if (fused) {
      kdist::ops::bias_add_relu(z, b);
      kdist::ops::relu_backward_bias_grad(z, d, db);
    } else {
      kdist::ops::bias_add(z, b);
      kdist::ops::relu_inplace(z);
      kdist::ops::relu_backward_inplace(z, d);
      kdist::ops::bias_grad(d, db);
    }
    benchmark::DoNotOptimize(db.data());
    benchmark::ClobberMemory();
  }
  state.counters["GB/s"] = benchmark::Counter(
      static_cast<double>(state.iterations()) * double(m * n) * sizeof(float) * (fused ? 5 : 8),
      benchmark::Counter::kIsRate);
}

BENCHMARK(BM_bias_relu)
    ->ArgNames({"batch", "units", "fused"})
    ->Args({128, 4096, 0})
    ->Args({128, 4096, 1})
    ->Args({128, 200, 0})
    ->Args({128, 200, 1})
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_matmul_eigen)->Apply(dense_shapes)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_matmul_kdist)->Apply(dense_shapes)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_matmul_eigen_xt_dy)
    ->Args({128, 784, 200})
    ->Args({256, 784, 200})
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_matmul_kdist_xt_dy)
    ->Args({128, 784, 200})
    ->Args({256, 784, 200})
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_matmul_kokkos_fallback)
    ->Args({128, 784, 200})
    ->Args({128, 200, 10})
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_reference_train_step)->Arg(128)->Arg(256)->Unit(benchmark::kMicrosecond);

}  // namespace

int main(int argc, char** argv) {
  Kokkos::ScopeGuard kokkos(argc, argv);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
