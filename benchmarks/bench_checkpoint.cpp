// Checkpoint throughput (issue 11): kdist::save_checkpoint / load_checkpoint (and the Keras weights
// file: save_keras_weights / load_keras_weights) of a ~100 MB model
// (Dense 4096 -> 3072 -> 4096, no bias, SGD: two 48 MiB kernels, sharded (None, 'model') and
// ('model', None) over all processes) against the machine's sequential bandwidth for one file of
// the same size, in the same run: process 0 write()s the bytes to a file and fsync()s it, then
// read()s them back (a dd-style baseline; both reads come from the page cache alike). Calls
// alternate baseline / kdist and the medians are kept (benchmarks/mpi_benchmark_main.hpp).
//
//   mpiexec -n 1 build/benchmarks/bench_checkpoint      (and -n 2, -n 4)
//
// The counters: MB/s of the baseline and of kdist, and kdist / baseline (the target: >= 0.7).
// BM_*_without_checksums: the same with the files written as kdist wrote them before checksums
// (contiguous, no Fletcher32 filter; issue 21), the cost of the checksums in the same run.
#include <benchmark/benchmark.h>

#include <fcntl.h>
#include <mpi.h>
#include <unistd.h>

#include "mpi_benchmark_main.hpp"

#include <cstdio>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include <kdist/io/checkpoint.hpp>
#include <kdist/io/keras_weights.hpp>
#include <kdist/nn/model.hpp>
#include <kdist/strategy/layout_map.hpp>
#include <kdist/strategy/model_parallel.hpp>

namespace {

constexpr std::size_t kIn = 4096, kHidden = 3072;

kdist::Sequential big_model() {
  const std::size_t n = kdist::list_devices().size();
  kdist::RuntimeDeviceMesh mesh({1, n}, {"data", "model"}, kdist::list_devices());
  kdist::LayoutMap map(mesh);
  map["d1/kernel"] = {kdist::replicated, "model"};
  map["d2/kernel"] = {"model", kdist::replicated};
  using namespace kdist::layers;
  std::vector<kdist::Sequential::Layer> l;
  l.emplace_back(Dense(kHidden, Activation::linear, false, "d1"));
  l.emplace_back(Dense(kIn, Activation::linear, false, "d2"));
  kdist::Sequential m(kIn, std::move(l));
  m.compile(std::make_shared<kdist::ModelParallel>(std::move(map), "data"),
            kdist::Loss::mean_squared_error, kdist::SGD(0.01), 1);
  return m;
}

std::string scratch(const char* name) {
  const char* dir = std::getenv("KDIST_BENCH_DIR");
  return (std::filesystem::path(dir ? dir : "/tmp") / name).string();
}

// Process 0 writes `bytes` sequentially and makes them durable, as a save does.
void sequential_write(const std::vector<char>& bytes, const std::string& path) {
  if (kdist::process_id() == 0) {
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    std::size_t done = 0;
    while (done < bytes.size()) {
      const auto w = ::write(fd, bytes.data() + done, bytes.size() - done);
      if (w <= 0) break;
      done += static_cast<std::size_t>(w);
    }
    ::fsync(fd);
    ::close(fd);
  }
  MPI_Barrier(MPI_COMM_WORLD);
}
void sequential_read(std::vector<char>& bytes, const std::string& path) {
  if (kdist::process_id() == 0) {
    const int fd = ::open(path.c_str(), O_RDONLY);
    std::size_t done = 0;
    while (done < bytes.size()) {
      const auto r = ::read(fd, bytes.data() + done, bytes.size() - done);
      if (r <= 0) break;
      done += static_cast<std::size_t>(r);
    }
    ::close(fd);
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

void report(benchmark::State& state, const kdist::bench::PairedMedians& m, double bytes) {
  state.counters["baseline_MBps"] = bytes / m.base / 1e6;
  state.counters["kdist_MBps"] = bytes / m.lib / 1e6;
  state.counters["kdist/baseline"] = m.base / m.lib;
}

// Save: `save(model, path)` against process 0 writing the same bytes.
template <class Save>
void save_vs_sequential(benchmark::State& state, const char* file, Save save) {
  auto model = big_model();
  const double bytes = 2.0 * kIn * kHidden * sizeof(float);
  std::vector<char> raw(static_cast<std::size_t>(bytes), 1);
  const auto path = scratch(file);
  const auto base = scratch("kdist-bench-sequential.bin");
  const auto m = kdist::bench::paired_medians(
      state, [&] { sequential_write(raw, base); }, [&] { save(model, path); });
  report(state, m, bytes);
}

// Load: `load(model, path)` of what `save` wrote against process 0 reading the same bytes.
template <class Save, class Load>
void load_vs_sequential(benchmark::State& state, const char* file, Save save, Load load) {
  auto model = big_model();
  const double bytes = 2.0 * kIn * kHidden * sizeof(float);
  std::vector<char> raw(static_cast<std::size_t>(bytes), 1);
  const auto path = scratch(file);
  const auto base = scratch("kdist-bench-sequential.bin");
  save(model, path);
  sequential_write(raw, base);
  const auto m = kdist::bench::paired_medians(
      state, [&] { sequential_read(raw, base); }, [&] { load(model, path); });
  report(state, m, bytes);
}

const auto save_ckpt = [](kdist::Sequential& m, const std::string& p) {
  kdist::save_checkpoint(m, p, {.epoch = 1});
};
const auto load_ckpt = [](kdist::Sequential& m, const std::string& p) {
  (void)kdist::load_checkpoint(m, p);
};
const auto save_keras = [](kdist::Sequential& m, const std::string& p) {
  kdist::save_keras_weights(m, p);
};
const auto load_keras = [](kdist::Sequential& m, const std::string& p) {
  (void)kdist::load_keras_weights(m, p);
};

void BM_save(benchmark::State& state) {
  save_vs_sequential(state, "kdist-bench-checkpoint.h5", save_ckpt);
}
void BM_load(benchmark::State& state) {
  load_vs_sequential(state, "kdist-bench-checkpoint.h5", save_ckpt, load_ckpt);
}
void BM_save_keras_weights(benchmark::State& state) {
  save_vs_sequential(state, "kdist-bench.weights.h5", save_keras);
}
void BM_load_keras_weights(benchmark::State& state) {
  load_vs_sequential(state, "kdist-bench.weights.h5", save_keras, load_keras);
}

// Files without checksums (kdist::detail::checkpoint::write_checksums off while alive).
struct WithoutChecksums {
  WithoutChecksums() { kdist::detail::checkpoint::write_checksums = false; }
  ~WithoutChecksums() { kdist::detail::checkpoint::write_checksums = true; }
};
void BM_save_without_checksums(benchmark::State& state) {
  WithoutChecksums off;
  save_vs_sequential(state, "kdist-bench-checkpoint-plain.h5", save_ckpt);
}
void BM_load_without_checksums(benchmark::State& state) {
  WithoutChecksums off;
  load_vs_sequential(state, "kdist-bench-checkpoint-plain.h5", save_ckpt, load_ckpt);
}

void register_all() {
  using Fn = void (*)(benchmark::State&);
  for (auto [name, fn] :
       {std::pair<const char*, Fn>{"BM_save", BM_save},
        std::pair<const char*, Fn>{"BM_save_without_checksums", BM_save_without_checksums},
        std::pair<const char*, Fn>{"BM_load", BM_load},
        std::pair<const char*, Fn>{"BM_load_without_checksums", BM_load_without_checksums},
        std::pair<const char*, Fn>{"BM_save_keras_weights", BM_save_keras_weights},
        std::pair<const char*, Fn>{"BM_load_keras_weights", BM_load_keras_weights}}) {
    benchmark::RegisterBenchmark(name, fn)->UseManualTime()->Iterations(8)->Unit(
        benchmark::kMillisecond);
  }
}

}  // namespace

int main(int argc, char** argv) {
  return kdist::bench::mpi_benchmark_main<benchmark::ConsoleReporter>(argc, argv, register_all);
}
