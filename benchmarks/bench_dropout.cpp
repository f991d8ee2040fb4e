// Dropout (issue 21): the mask drawn once in the forward pass by the vectorised Philox generator
// (64 elements per call, all four words used) and kept for the backward pass, against the old
// approach in the same binary: one full Philox evaluation per element (one word of four used),
// drawn again in the backward pass.
//
//   build/benchmarks/bench_dropout --benchmark_min_time=0.5s
//
// BM_dropout_old/R/C:        old: forward + backward, each draws every element (scalar Philox)
// BM_dropout_redraw/R/C:     new generator, mask drawn again in the backward (no mask kept)
// BM_dropout_kept_mask/R/C:  new: forward draws and keeps a byte mask, backward reads it
// BM_dropout_paired/R/C:     old and new alternating call by call: medians, old_ms, new_ms, ratio
// BM_mlp_step_paired/B:      a 784-4096-10 MLP (Dense relu, Dropout(0.4), Dense softmax; Adam,
//                            cross-entropy) training step with the old dropout layer and with
//                            kdist::layers::Dropout, alternating step by step: old_ms, new_ms
#include <benchmark/benchmark.h>

#include <mpi.h>
#include "mpi_benchmark_main.hpp"

#include <Kokkos_Core.hpp>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include <kdist/kdist.hpp>

namespace {

using View = Kokkos::View<float**, Kokkos::LayoutRight, Kokkos::HostSpace>;
using MaskView = Kokkos::View<std::uint8_t*, Kokkos::LayoutRight, Kokkos::HostSpace>;

void fill(const View& v, const char* name) {
  const auto key = kdist::random_key(1, kdist::stream_id(name));
  for (std::size_t i = 0; i < v.size(); ++i) v.data()[i] = kdist::uniform01(key, i) - 0.5f;
}

//! The old kernel (kdist before issue 21): element (i, j) kept iff word 0 of Philox4x32-10 of
//! counter {lo(index), hi(index), lo(step), hi(step)}, as a uniform float, is below 1 - rate.
//! The host loop is the one that was measured; device views (a Kokkos CUDA build) get the same
//! rule as one Kokkos loop over the elements.
template <class V>
void old_dropout(const V& x, const V& y, const kdist::ops::DropoutParams& p) {
  const kdist::RandomKey key = kdist::random_key(p.seed, p.stream, p.step);
  const auto rate = static_cast<float>(p.rate);
  const float keep_prob = 1.0f - static_cast<float>(p.rate);
  const std::uint64_t gc = p.global_cols == 0 ? x.extent(1) : p.global_cols;
  const std::uint64_t row0 = p.row_offset, col0 = p.col_offset;
  if constexpr (Kokkos::SpaceAccessibility<Kokkos::HostSpace,
                                           typename V::memory_space>::accessible) {
    for (std::size_t i = 0; i < x.extent(0); ++i) {
      const std::uint64_t base = (row0 + i) * gc + col0;
      for (std::size_t j = 0; j < x.extent(1); ++j) {
        y(i, j) = kdist::uniform01(key, base + j) < 1.0f - rate ? x(i, j) / keep_prob : 0.0f;
      }
    }
  } else {
    const std::size_t cols = x.extent(1);
    Kokkos::parallel_for(
        "old_dropout", Kokkos::RangePolicy<typename V::execution_space>(0, x.size()),
        KOKKOS_LAMBDA(std::size_t k) {
          const std::size_t i = k / cols, j = k % cols;
          const std::uint64_t index = (row0 + i) * gc + col0 + j;
          y(i, j) = kdist::uniform01(key, index) < 1.0f - rate ? x(i, j) / keep_prob : 0.0f;
        });
  }
}

struct DropoutData {
  View x, y, dy, dx;
  MaskView mask;
  kdist::ops::DropoutParams params;
  DropoutData(std::size_t rows, std::size_t cols)
      : x("x", rows, cols),
        y("y", rows, cols),
        dy("dy", rows, cols),
        dx("dx", rows, cols),
        mask("mask", rows * cols) {
    fill(x, "x");
    fill(dy, "dy");
    params.seed = 1337;
    params.stream = kdist::stream_id("dropout");
    params.rate = 0.4;
  }
  void old_step() {
    old_dropout(x, y, params);
    old_dropout(dy, dx, params);
    ++params.step;
  }
  void redraw_step() {
    kdist::ops::dropout(x, y, params);
    kdist::ops::dropout_backward(dy, dx, params);
    ++params.step;
  }
  void kept_step() {
    kdist::ops::dropout(x, y, mask, params);
    kdist::ops::dropout_backward(dy, dx, mask, params.rate);
    ++params.step;
  }
};

template <void (DropoutData::*Step)()>
void BM_dropout(benchmark::State& state) {
  DropoutData d(static_cast<std::size_t>(state.range(0)), static_cast<std::size_t>(state.range(1)));
  for (auto _ : state) {
    (d.*Step)();
    benchmark::DoNotOptimize(d.dx.data());
    benchmark::ClobberMemory();
  }
  state.counters["elements/s"] =
      benchmark::Counter(double(d.x.size()), benchmark::Counter::kIsIterationInvariantRate);
}

void BM_dropout_paired(benchmark::State& state) {
  DropoutData d(static_cast<std::size_t>(state.range(0)), static_cast<std::size_t>(state.range(1)));
  const auto m = kdist::bench::paired_medians(
      state, [&] { d.old_step(); }, [&] { d.kept_step(); });
  state.counters["old_ms"] = m.base * 1e3;
  state.counters["new_ms"] = m.lib * 1e3;
  state.counters["speedup"] = m.base / m.lib;
}

// ---- a 784-4096-10 MLP training step with the old dropout layer and with the new one ----------

//! kdist::layers::Dropout as it was before issue 21 (matrices only): the old kernel forward, and
//! again in the backward pass.
class OldDropout {
 public:
  using Matrix = kdist::DistributedTensor<float**>;
  using LocalView = std::remove_cvref_t<decltype(std::declval<const Matrix&>().local())>;
  OldDropout(double rate, std::string name) : rate_(rate), name_(std::move(name)) {}
  const std::string& name() const { return name_; }
  kdist::Shape build(const kdist::Shape& s, const kdist::Distribution&, std::uint64_t) { return s; }
  kdist::LayerTensor<float> forward(const kdist::LayerTensor<float>& x,
                                    const kdist::StepContext& c) {
    active_ = c.training;
    if (!active_) return x;
    const auto& t = std::get<Matrix>(x);
    params_ = kdist::ops::DropoutParams{c.seed,         kdist::stream_id(name_), c.step,      rate_,
                                        t.offsets()[0], t.offsets()[1],          t.shape()[1]};
    LocalView y(Kokkos::view_alloc(Kokkos::WithoutInitializing, name_), t.local().extent(0),
                t.local().extent(1));
    old_dropout(t.local(), y, params_);
    return Matrix::from_local(y, t.shape(), t.layout());
  }
  std::optional<kdist::LayerTensor<float>> backward(const kdist::LayerTensor<float>& dy, bool,
                                                    kdist::Gradients<float>&) {
    if (!active_) return dy;
    const auto& t = std::get<Matrix>(dy);
    LocalView dx(Kokkos::view_alloc(Kokkos::WithoutInitializing, name_ + "/grad"),
                 t.local().extent(0), t.local().extent(1));
    old_dropout(t.local(), dx, params_);
    return Matrix::from_local(dx, t.shape(), t.layout());
  }
  std::vector<kdist::VariableRef<float>> variables() { return {}; }

 private:
  double rate_;
  std::string name_;
  kdist::ops::DropoutParams params_{};
  bool active_ = false;
};

struct MlpStep {
  kdist::Sequential model;
  Kokkos::View<float**, Kokkos::LayoutRight> x;
  Kokkos::View<std::int32_t*, Kokkos::LayoutRight> y;
  std::size_t batch;
  template <class DropoutLayer>
  static kdist::Sequential make() {
    using namespace kdist::layers;
    std::vector<kdist::Sequential::Layer> l;
    l.emplace_back(Dense(4096, Activation::relu, true, "d1"));
    l.emplace_back(DropoutLayer(0.4, "dropout"));
    l.emplace_back(Dense(10, Activation::softmax, true, "d2"));
    return kdist::Sequential(kdist::Shape{784}, std::move(l));
  }
  MlpStep(kdist::Sequential m, std::size_t b)
      : model(std::move(m)), x("x", b, 784), y("y", b), batch(b) {
    model.compile(std::make_shared<kdist::DataParallel>(
                      kdist::RuntimeDeviceMesh({1}, {"batch"}, kdist::list_devices())),
                  kdist::Loss::categorical_crossentropy, kdist::Adam(0.001), 1337);
    for (std::size_t r = 0; r < b; ++r) {
      for (std::size_t c = 0; c < 784; ++c) x(r, c) = float((r * 131 + c * 7) % 256) / 255.0f;
      y(r) = static_cast<std::int32_t>(r % 10);
    }
  }
  void operator()() { benchmark::DoNotOptimize(model.train_step(x, y, batch)); }
};

void BM_mlp_step_paired(benchmark::State& state) {
  const auto b = static_cast<std::size_t>(state.range(0));
  MlpStep old_step(MlpStep::make<OldDropout>(), b);
  MlpStep new_step(MlpStep::make<kdist::layers::Dropout>(), b);
  const auto m = kdist::bench::paired_medians(state, old_step, new_step);
  state.counters["old_ms"] = m.base * 1e3;
  state.counters["new_ms"] = m.lib * 1e3;
  state.counters["speedup"] = m.base / m.lib;
}

void register_all() {
  for (auto* b :
       {benchmark::RegisterBenchmark("BM_dropout_old", BM_dropout<&DropoutData::old_step>),
        benchmark::RegisterBenchmark("BM_dropout_redraw", BM_dropout<&DropoutData::redraw_step>),
        benchmark::RegisterBenchmark("BM_dropout_kept_mask",
                                     BM_dropout<&DropoutData::kept_step>)}) {
    b->Args({128, 4096})->Unit(benchmark::kMillisecond);
  }
  benchmark::RegisterBenchmark("BM_dropout_paired", BM_dropout_paired)
      ->Args({128, 4096})
      ->UseManualTime()
      ->Iterations(200)
      ->Unit(benchmark::kMillisecond);
  benchmark::RegisterBenchmark("BM_mlp_step_paired", BM_mlp_step_paired)
      ->Arg(128)
      ->UseManualTime()
      ->Iterations(40)
      ->Unit(benchmark::kMillisecond);
}

}  // namespace

int main(int argc, char** argv) {
  return kdist::bench::mpi_benchmark_main<benchmark::ConsoleReporter>(argc, argv, register_all);
}
