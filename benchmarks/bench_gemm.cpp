// Host GEMM (issue 21): kdist::ops::matmul's default host path (the optimised CBLAS kdist was
// built with, OpenBLAS from Debian) against the same call forced through Eigen's GEMM
// (backend::eigen, the path before issue 21), on the three products of a Dense layer at the
// shapes of the MLP (784-4096-10, batch 128) and of the GPT trainer's default model
// (batch 16 x sequence 128 = 2048 rows, d_model 128, MLP 512, vocabulary ~100).
//
//   taskset -c 0 build/benchmarks/bench_gemm --benchmark_min_time=0.3
//
// Ratio = BM_gemm/eigen / BM_gemm/auto of the same arguments, from one run. Arguments: m, n, k,
// trans_a, trans_b: C[m, n] = op(A) * op(B) with the inner dimension k.
#include <benchmark/benchmark.h>

#include <Kokkos_Core.hpp>
#include <cstdint>
#include <kdist/ops/matmul.hpp>
#include <kdist/ops/random.hpp>

namespace {

using View = Kokkos::View<float**, Kokkos::LayoutRight, Kokkos::HostSpace>;
using kdist::ops::Op;

void fill(const View& v, const char* name) {
  const auto key = kdist::random_key(1, kdist::stream_id(name));
  for (std::size_t i = 0; i < v.size(); ++i) v.data()[i] = kdist::uniform01(key, i) - 0.5f;
}

template <class Backend>
void BM_gemm(benchmark::State& state, Backend backend) {
  const auto m = static_cast<std::size_t>(state.range(0));
  const auto n = static_cast<std::size_t>(state.range(1));
  const auto k = static_cast<std::size_t>(state.range(2));
  const Op op_a = state.range(3) != 0 ? Op::transpose : Op::none;
  const Op op_b = state.range(4) != 0 ? Op::transpose : Op::none;
  View a("a", op_a == Op::none ? m : k, op_a == Op::none ? k : m);
  View b("b", op_b == Op::none ? k : n, op_b == Op::none ? n : k);
  View c("c", m, n);
  fill(a, "a");
  fill(b, "b");
  for (auto _ : state) {
    kdist::ops::matmul(a, b, c, op_a, op_b, 1.0f, 0.0f, backend);
    benchmark::DoNotOptimize(c.data());
    benchmark::ClobberMemory();
  }
  state.counters["GFLOP/s"] =
      benchmark::Counter(2.0 * double(m * n * k), benchmark::Counter::kIsIterationInvariantRate,
                         benchmark::Counter::kIs1000);
  state.SetLabel(std::is_same_v<Backend, kdist::ops::EigenBackend>
                     ? std::string("Eigen")
                     : kdist::ops::host_gemm_library());
}

void shapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"m", "n", "k", "ta", "tb"});
  b->Args({128, 4096, 784, 0, 0});  // MLP forward X * W1
  b->Args({784, 4096, 128, 1, 0});  // dW1 = X^T * dY
  b->Args({128, 784, 4096, 0, 1});  // dX = dY * W1^T
  b->Args({128, 10, 4096, 0, 0});   // the 10-unit head
  b->Args({2048, 384, 128, 0, 0});  // GPT: q, k, v projections together
  b->Args({2048, 512, 128, 0, 0});  // GPT: MLP up
  b->Args({2048, 128, 512, 0, 0});  // GPT: MLP down
  b->Args({512, 128, 2048, 1, 0});  // GPT: dW of MLP down
  b->Args({2048, 96, 128, 0, 0});   // GPT: logits over a 96-character vocabulary
}

BENCHMARK_CAPTURE(BM_gemm, auto, kdist::ops::backend::automatic) -> Apply(shapes)
    -> Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_gemm, eigen, kdist::ops::backend::eigen)
    ->Apply(shapes)
    ->Unit(benchmark::kMicrosecond);

}  // namespace

int main(int argc, char** argv) {
  Kokkos::ScopeGuard kokkos(argc, argv);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
