// Device GEMM (issue 8): kdist::ops::matmul on CUDA device Views against cuBLAS sgemm called
// directly on the same buffers and stream, in one binary; and the portable Kokkos kernel that
// matmul used before (backend::kokkos) for scale. Built only with Kokkos CUDA.
//
//   mpiexec -n 1 build/benchmarks/bench_device_gemm        (or run it directly)
//
// Shapes: the seeds' Dense layers at batch 128 and 4096 (forward X*W, kernel gradient X^T*dY,
// input gradient dY*W^T) and 4096^3. Ratio = BM_gemm_kdist / BM_gemm_cublas of the same
// arguments (target: kdist within 10% of cuBLAS, i.e. ratio <= 1.11). Time per GEMM: 20 GEMMs
// per iteration, one fence, wall time (launch cost included on both sides).
#include <benchmark/benchmark.h>
#include <cublas_v2.h>

#include <Kokkos_Core.hpp>
#include <chrono>
#include <cstdint>
#include <kdist/ops/matmul.hpp>
#include <kdist/ops/random.hpp>

namespace {

using View = Kokkos::View<float**, Kokkos::LayoutRight, Kokkos::CudaSpace>;
using kdist::ops::Op;
constexpr int gemms_per_iteration = 20;

struct Operands {
  View a, b, c;
  Op op_a, op_b;
  std::int64_t m, n, k;
};

// Arguments: m, n, k, op_a, op_b (0 none, 1 transpose). C[m, n] = op(A) op(B).
Operands make_operands(const benchmark::State& state) {
  Operands o;
  o.m = state.range(0);
  o.n = state.range(1);
  o.k = state.range(2);
  o.op_a = state.range(3) ? Op::transpose : Op::none;
  o.op_b = state.range(4) ? Op::transpose : Op::none;
  const auto m = static_cast<std::size_t>(o.m), n = static_cast<std::size_t>(o.n),
             k = static_cast<std::size_t>(o.k);
  o.a = o.op_a == Op::none ? View("a", m, k) : View("a", k, m);
  o.b = o.op_b == Op::none ? View("b", k, n) : View("b", n, k);
  o.c = View("c", m, n);
  const auto key = kdist::random_key(1, kdist::stream_id("gemm"));
  auto a = o.a;
  auto b = o.b;
  Kokkos::parallel_for(
      "fill", Kokkos::RangePolicy<Kokkos::Cuda>(0, static_cast<std::int64_t>(a.size())),
      KOKKOS_LAMBDA(const std::int64_t i) { a.data()[i] = kdist::uniform01(key, i) - 0.5f; });
  Kokkos::parallel_for(
      "fill", Kokkos::RangePolicy<Kokkos::Cuda>(0, static_cast<std::int64_t>(b.size())),
      KOKKOS_LAMBDA(const std::int64_t i) { b.data()[i] = kdist::uniform01(key, i + 7) - 0.5f; });
  Kokkos::fence();
  return o;
}

template <class F>
void time_gemms(benchmark::State& state, const Operands& o, F gemm) {
  gemm();  // warm-up (handle creation, first-launch costs)
  Kokkos::fence();
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int r = 0; r < gemms_per_iteration; ++r) gemm();
    Kokkos::fence();
    const std::chrono::duration<double> dt = std::chrono::steady_clock::now() - t0;
    state.SetIterationTime(dt.count() / gemms_per_iteration);
  }
  state.counters["TFLOP/s"] =
      benchmark::Counter(2.0 * double(o.m) * double(o.n) * double(o.k) / 1e12,
                         benchmark::Counter::kIsIterationInvariantRate);
}

void BM_gemm_kdist(benchmark::State& state) {
  const auto o = make_operands(state);
  time_gemms(state, o, [&] { kdist::ops::matmul(o.a, o.b, o.c, o.op_a, o.op_b); });
}

void BM_gemm_cublas(benchmark::State& state) {
  const auto o = make_operands(state);
  cublasHandle_t h = nullptr;
  cublasCreate(&h);
  cublasSetStream(h, Kokkos::Cuda().cuda_stream());
  const float alpha = 1, beta = 0;
  // Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T.
  const auto ta = o.op_a == Op::transpose ? CUBLAS_OP_T : CUBLAS_OP_N;
  const auto tb = o.op_b == Op::transpose ? CUBLAS_OP_T : CUBLAS_OP_N;
  const int lda = static_cast<int>(o.a.extent(1)), ldb = static_cast<int>(o.b.extent(1)),
            ldc = static_cast<int>(o.c.extent(1));
  time_gemms(state, o, [&] {
    cublasSgemm(h, tb, ta, static_cast<int>(o.n), static_cast<int>(o.m), static_cast<int>(o.k),
                &alpha, o.b.data(), ldb, o.a.data(), lda, &beta, o.c.data(), ldc);
  });
  cublasDestroy(h);
}

void BM_gemm_kokkos_kernel(benchmark::State& state) {
  const auto o = make_operands(state);
  time_gemms(state, o, [&] {
    kdist::ops::matmul(o.a, o.b, o.c, o.op_a, o.op_b, 1.0f, 0.0f, kdist::ops::backend::kokkos);
  });
}

void shapes(benchmark::internal::Benchmark* b) {
  for (std::int64_t batch : {128, 4096}) {
    b->Args({batch, 200, 784, 0, 0});  // d1 forward: X[batch,784] * W[784,200]
    b->Args({784, 200, batch, 1, 0});  // d1 kernel gradient: X^T * dY
    b->Args({batch, 10, 200, 0, 0});   // d2 forward
    b->Args({batch, 200, 10, 0, 1});   // d2 input gradient: dY * W^T
  }
  b->Args({4096, 4096, 4096, 0, 0});
}

BENCHMARK(BM_gemm_cublas)->Apply(shapes)->UseManualTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_gemm_kdist)->Apply(shapes)->UseManualTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_gemm_kokkos_kernel)->Apply(shapes)->UseManualTime()->Unit(benchmark::kMicrosecond);

}  // namespace

int main(int argc, char** argv) {
  Kokkos::ScopeGuard kokkos(argc, argv);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
