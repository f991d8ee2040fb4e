// Streaming training data (kdist/parallel/stream_channel.hpp, kdist/nn/streaming_dataset.hpp)
// against files: a producer (rank 1) hands N snapshots (an n x n field and its n x n target) to
// a trainer (rank 0), whose reservoir holds them all when the iteration ends.
//  - stream: kdist::StreamProducer::send per snapshot until all are delivered; the trainer's
//    StreamingDataset::drain() takes them into its reservoir (of N examples: made and filled
//    once, then each iteration's arrivals evict, as in a long run).
//  - hdf5 (the baseline): the producer writes the snapshots to HDF5 (serial HDF5) and tells the
//    trainer, which opens the files and reads them back into its memory. `per_snapshot` 0: one
//    file, a snapshot per row of its dataset (the file most favourable to reading back); 1: a
//    file per snapshot, as simulations write their output per time step. With `synced` 1 the
//    producer also fsyncs each file before it tells (the snapshots on the disk, as a file another
//    job reads must be).
// Both in one run, alternating (kdist::bench::paired_medians); each call's time is the slower
// rank's. Counters: stream_MBps and hdf5_MBps (snapshot bytes per second), examples_per_s
// (streaming), and ratio = hdf5 time / stream time (issue 38's target: 5 or more).
//   mpiexec -n 2 build/benchmarks/bench_streaming
#include <benchmark/benchmark.h>
#include <hdf5.h>
#include <mpi.h>

#include <fcntl.h>
#include <unistd.h>
#include <cstdio>
#include <kdist/nn/streaming_dataset.hpp>
#include <kdist/parallel/stream_channel.hpp>
#include <optional>
#include <string>
#include <vector>

#include "mpi_benchmark_main.hpp"

namespace {

int bench_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

// One benchmark of N snapshots of n x n values (and n x n targets).
struct Snapshots {
  std::size_t n, count;
  std::vector<float> values;  // count x 2 n^2: the field, then its target
  bool per_snapshot, synced;
  std::string file;

  Snapshots(std::size_t side, std::size_t examples, bool per_file, bool sync)
      : n(side),
        count(examples),
        values(examples * 2 * side * side),
        per_snapshot(per_file),
        synced(sync),
        file(file_name()) {
    for (std::size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i % 1000) / 7;
  }
  //! /tmp/kdist_bench_streaming_PID.h5, PID the writer's (rank 1's) process id, alike on both.
  static std::string file_name() {
    int pid = static_cast<int>(getpid());
    MPI_Bcast(&pid, 1, MPI_INT, 1, MPI_COMM_WORLD);
    return "/tmp/kdist_bench_streaming_" + std::to_string(pid) + ".h5";
  }
  std::size_t row() const { return 2 * n * n; }
  double bytes() const { return static_cast<double>(values.size() * sizeof(float)); }

  //! The stream's two ends, made once: a trainer's reservoir of `count` examples (the first
  //! iteration fills it, the next ones evict) and the producer.
  struct Ends {
    std::optional<kdist::StreamProducer<float>> out;
    std::optional<kdist::StreamingDataset<float>> in;
  };
  Ends ends() const {
    Ends e;
    if (bench_rank() == 1)
      e.out.emplace(MPI_COMM_WORLD, 0, std::vector<std::size_t>{n, n}, n * n,
                    kdist::StreamProducer<float>::Options{.max_in_flight = 8});
    if (bench_rank() == 0) {
      e.in.emplace(MPI_COMM_WORLD, std::vector<int>{1}, std::vector<std::size_t>{n, n}, n * n,
                   kdist::StreamingOptions{.capacity = count});
    }
    return e;
  }

  //! Every snapshot, from the producer into the trainer's reservoir.
  void stream(Ends& e) const {
    if (e.out) {
      for (std::size_t i = 0; i < count; ++i) {
        const float* r = values.data() + i * row();
        e.out->send(std::span<const float>(r, n * n), std::span<const float>(r + n * n, n * n));
      }
      e.out->flush();
    }
    if (e.in) {
      const std::size_t target = e.in->reservoir().statistics().received + count;
      while (e.in->reservoir().statistics().received < target) e.in->drain();
    }
  }

  std::string file_of(std::size_t i) const {
    return per_snapshot ? file + "." + std::to_string(i) : file;
  }
  //! fsyncs the file (the producer's writes on the disk) when `synced`.
  void sync(const std::string& name) const {
    if (!synced) return;
    const int fd = open(name.c_str(), O_RDONLY);
    if (fd < 0 || fsync(fd) != 0) std::fprintf(stderr, "bench: fsync failed\n");
    if (fd >= 0) close(fd);
  }

  //! One file: a dataset of `count` rows, written a row per time step; per snapshot: a file of
  //! one row each.
  void hdf5(std::vector<float>& read_back) const {
    const std::size_t files = per_snapshot ? count : 1, rows = per_snapshot ? 1 : count;
    const hsize_t dims[2] = {rows, row()};
    if (bench_rank() == 1) {
      const hsize_t one[2] = {1, row()};
      const hid_t memory = H5Screate_simple(2, one, nullptr);
      const hid_t space = H5Screate_simple(2, dims, nullptr);
      for (std::size_t k = 0; k < files; ++k) {
        const hid_t f = H5Fcreate(file_of(k).c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
        const hid_t d = H5Dcreate2(f, "snapshots", H5T_NATIVE_FLOAT, space, H5P_DEFAULT,
                                   H5P_DEFAULT, H5P_DEFAULT);
        for (std::size_t i = 0; i < rows; ++i) {  // a row per time step, as a simulation writes
          const hsize_t start[2] = {i, 0};
          H5Sselect_hyperslab(space, H5S_SELECT_SET, start, nullptr, one, nullptr);
          H5Dwrite(d, H5T_NATIVE_FLOAT, memory, space, H5P_DEFAULT,
                   values.data() + (k * rows + i) * row());
        }
        H5Dclose(d);
        H5Fclose(f);
        sync(file_of(k));
      }
      H5Sclose(space);
      H5Sclose(memory);
      int done = 1;
      MPI_Send(&done, 1, MPI_INT, 0, 99, MPI_COMM_WORLD);
    } else if (bench_rank() == 0) {
      int done = 0;
      MPI_Recv(&done, 1, MPI_INT, 1, 99, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      read_back.resize(count * row());
      for (std::size_t k = 0; k < files; ++k) {
        const hid_t f = H5Fopen(file_of(k).c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
        const hid_t d = H5Dopen2(f, "snapshots", H5P_DEFAULT);
        H5Dread(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT,
                read_back.data() + k * rows * row());
        H5Dclose(d);
        H5Fclose(f);
      }
      if (read_back[(count - 1) * row() + 1] != values[(count - 1) * row() + 1]) {
        std::fprintf(stderr, "bench: bad read\n");
      }
    }
  }
  void remove_files() const {
    if (bench_rank() != 1) return;
    for (std::size_t k = 0; k < (per_snapshot ? count : 1); ++k) std::remove(file_of(k).c_str());
  }
};

void BM_stream_vs_hdf5(benchmark::State& state) {
  const Snapshots s(static_cast<std::size_t>(state.range(0)),
                    static_cast<std::size_t>(state.range(1)), state.range(2) != 0,
                    state.range(3) != 0);
  std::vector<float> read_back;
  auto ends = s.ends();
  const auto m = kdist::bench::paired_medians(
      state, [&] { s.hdf5(read_back); }, [&] { s.stream(ends); });
  if (ends.out) ends.out->close();
  if (ends.in) ends.in->wait_for_end();
  s.remove_files();
  state.counters["stream_MBps"] = s.bytes() / m.lib / 1e6;
  state.counters["hdf5_MBps"] = s.bytes() / m.base / 1e6;
  state.counters["examples_per_s"] = static_cast<double>(s.count) / m.lib;
  state.counters["ratio"] = m.base / m.lib;
}

void register_all() {
  // (side, snapshots): 32 MB of fields and targets each; 64 x 64 snapshots go as MPI's eager
  // messages, 256 x 256 ones (512 KB) by rendezvous.
  for (const auto& [side, count] : {std::pair{64, 1024}, std::pair{256, 64}}) {
    for (const auto& [per_snapshot, synced] : {std::pair{0, 0}, {0, 1}, {1, 0}, {1, 1}}) {
      benchmark::RegisterBenchmark("BM_stream_vs_hdf5", BM_stream_vs_hdf5)
          ->Args({side, count, per_snapshot, synced})
          ->ArgNames({"side", "snapshots", "per_snapshot", "synced"})
          ->UseManualTime()
          ->Unit(benchmark::kMillisecond)
          ->Iterations(20);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  return kdist::bench::mpi_benchmark_main<benchmark::ConsoleReporter>(argc, argv, register_all);
}
