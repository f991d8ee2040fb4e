// In-situ training beside a simulation (issues 22 and 38), with MPI alone: no files, no database.
//
// One MPI job, two groups of processes (MPI_Comm_split of the world):
//  - the simulation group (--sim-ranks processes) integrates the 2-D heat equation
//    u' = u + alpha * laplacian(u) on an N x N grid (zero outside), with Kokkos, the grid's rows
//    split over its processes and their halo rows exchanged every step (MPI_Sendrecv on the
//    group's communicator). Every --steps-per-episode steps it starts a new episode from a new
//    random field. Each step's pair (u, u') is gathered on the simulation process whose turn it
//    is (step k: process k % S), which streams it at once, without waiting, to training process
//    k % T (kdist::StreamProducer on MPI_COMM_WORLD); the pairs of the last --held-out episodes
//    go to every training process, on a second stream;
//  - the training group (the other processes) runs kdist on its own communicator
//    (kdist::run(argc, argv, comm, ...)). Each training process keeps the pairs it is sent in a
//    reservoir of --capacity pairs (kdist::StreamingDataset: when full, an arrival evicts one of
//    the pairs trained on most) and trains, while the simulation runs, a surrogate that predicts u'
//    from u with DataParallel: each step takes 8 pairs from every process's reservoir. Training
//    ends when a process's streams have ended and it has trained on each pair it holds --passes
//    times. The surrogate is a Conv2D(1, 3x3, linear, no bias) over u with a border of zeros
//    (the cells outside the grid), flattened: it can learn the 5-point stencil exactly, so its
//    error on new fields goes to rounding. The held-out episodes are never trained on: the
//    surrogate's error on them is reported against persistence (predicting u' = u), then the
//    surrogate is checkpointed to --checkpoint-dir and read back.
//
//   mpiexec -n 4 build/examples/in_situ_heat_surrogate                 # 2 simulate, 2 train
//   mpiexec -n 6 build/examples/in_situ_heat_surrogate --sim-ranks 4 --grid 32
#include <mpi.h>

#include <CLI/CLI.hpp>
#include <Kokkos_Core.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <kdist/io/checkpoint.hpp>
#include <kdist/kdist.hpp>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace {

struct Options {
  int sim_ranks = 0;  // 0: half of the processes
  std::size_t grid = 8;
  std::size_t episodes = 16;
  std::size_t steps_per_episode = 10;
  std::size_t held_out = 2;
  std::size_t capacity = 256;
  std::size_t passes = 30;
  double learning_rate = 0.05;
  std::string checkpoint_dir = "in_situ_checkpoint";
  float alpha = 0.2f;
};

constexpr int pair_tag = 7;             // the pairs trained on
constexpr int held_out_tag = 8;         // the held-out pairs
constexpr std::size_t local_batch = 8;  // pairs per training process per step

//! The first grid row of simulation process s of S, for an N-row grid (the first N % S processes
//! hold one row more).
std::size_t first_row(std::size_t n, std::size_t s, std::size_t count) {
  return s * (n / count) + std::min(s, n % count);
}

// ---- the simulation group ----------------------------------------------------------------------

using Grid = Kokkos::View<float**>;  // (rows + 2 halo rows, N), in Kokkos' default memory space

//! Fills the interior of `u` with episode `e`'s random field (the same field whatever the split).
void initial_field(const Grid& u, std::size_t row0, std::size_t n, std::size_t episode) {
  const auto key = kdist::random_key(2026, 11, episode);
  const std::size_t rows = u.extent(0) - 2;
  Kokkos::parallel_for(
      "heat::initial", Kokkos::MDRangePolicy<Kokkos::Rank<2>>({0, 0}, {rows, n}),
      KOKKOS_LAMBDA(const std::size_t i, const std::size_t j) {
        u(i + 1, j) = kdist::uniform01(key, (row0 + i) * n + j);
      });
}

//! Halo rows from the neighbours above and below (MPI_PROC_NULL at the grid's edges: zero rows).
void exchange_halos(const Grid& u, MPI_Comm sim, std::vector<float>& buffer) {
  int rank = 0;
  int size = 0;
  MPI_Comm_rank(sim, &rank);
  MPI_Comm_size(sim, &size);
  const std::size_t rows = u.extent(0) - 2;
  const std::size_t n = u.extent(1);
  const int up = rank > 0 ? rank - 1 : MPI_PROC_NULL;
  const int down = rank + 1 < size ? rank + 1 : MPI_PROC_NULL;
  auto host = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), u);
  buffer.assign(2 * n, 0.0f);  // halo rows received: above, below
  MPI_Sendrecv(&host(1, 0), int(n), MPI_FLOAT, up, 1, &buffer[n], int(n), MPI_FLOAT, down, 1, sim,
               MPI_STATUS_IGNORE);
  MPI_Sendrecv(&host(rows, 0), int(n), MPI_FLOAT, down, 2, &buffer[0], int(n), MPI_FLOAT, up, 2,
               sim, MPI_STATUS_IGNORE);
  for (std::size_t j = 0; j < n; ++j) {
    host(0, j) = buffer[j];
    host(rows + 1, j) = buffer[n + j];
  }
  Kokkos::deep_copy(u, host);
}

//! One explicit step of the heat equation: next = u + alpha * (5-point laplacian of u).
void heat_step(const Grid& u, const Grid& next, float alpha) {
  const std::size_t rows = u.extent(0) - 2;
  const std::size_t n = u.extent(1);
  Kokkos::parallel_for(
      "heat::step", Kokkos::MDRangePolicy<Kokkos::Rank<2>>({1, 0}, {rows + 1, n}),
      KOKKOS_LAMBDA(const std::size_t i, const std::size_t j) {
        const float left = j > 0 ? u(i, j - 1) : 0.0f;
        const float right = j + 1 < n ? u(i, j + 1) : 0.0f;
        next(i, j) = u(i, j) + alpha * (u(i - 1, j) + u(i + 1, j) + left + right - 4 * u(i, j));
      });
}

//! The pair (u, u') of this process' rows, gathered on simulation process `root` as a bordered
//! u ((N + 2) x (N + 2), zeros outside) in `x` and u' (N x N) in `y`.
void gather_pair(const Grid& u, const Grid& next, MPI_Comm sim, int root, std::size_t n,
                 std::vector<float>& block, std::vector<float>& all, std::vector<float>& x,
                 std::vector<float>& y) {
  int rank = 0;
  int size = 0;
  MPI_Comm_rank(sim, &rank);
  MPI_Comm_size(sim, &size);
  const std::size_t rows = u.extent(0) - 2;
  const auto inner = Kokkos::make_pair<std::size_t>(1, rows + 1);
  const auto hu = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(),
                                                      Kokkos::subview(u, inner, Kokkos::ALL));
  const auto hn = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(),
                                                      Kokkos::subview(next, inner, Kokkos::ALL));
  block.resize(2 * rows * n);
  for (std::size_t i = 0; i < rows; ++i) {
    for (std::size_t j = 0; j < n; ++j) {
      block[i * n + j] = hu(i, j);
      block[rows * n + i * n + j] = hn(i, j);
    }
  }
  const auto parts = static_cast<std::size_t>(size);
  std::vector<int> counts(parts), displs(parts);
  for (std::size_t s = 0; s < std::size_t(size); ++s) {
    const std::size_t r0 = first_row(n, s, std::size_t(size));
    counts[s] = int(2 * (first_row(n, s + 1, std::size_t(size)) - r0) * n);
    displs[s] = int(2 * r0 * n);
  }
  all.resize(2 * n * n);
  MPI_Gatherv(block.data(), int(block.size()), MPI_FLOAT, all.data(), counts.data(), displs.data(),
              MPI_FLOAT, root, sim);
  if (rank != root) return;
  x.assign((n + 2) * (n + 2), 0.0f);
  y.resize(n * n);
  for (std::size_t s = 0; s < std::size_t(size); ++s) {
    const std::size_t r0 = first_row(n, s, std::size_t(size));
    const std::size_t rs = first_row(n, s + 1, std::size_t(size)) - r0;
    const float* b = all.data() + displs[s];
    for (std::size_t i = 0; i < rs; ++i) {
      std::copy_n(b + i * n, n, x.begin() + std::ptrdiff_t((r0 + i + 1) * (n + 2) + 1));
    }
    std::copy_n(b + rs * n, rs * n, y.begin() + std::ptrdiff_t(r0 * n));
  }
}

void simulate(const Options& o, MPI_Comm sim, const std::vector<int>& trainers) {
  int rank = 0;
  int size = 0;
  MPI_Comm_rank(sim, &rank);
  MPI_Comm_size(sim, &size);
  const std::size_t n = o.grid;
  const std::size_t row0 = first_row(n, std::size_t(rank), std::size_t(size));
  const std::size_t rows = first_row(n, std::size_t(rank) + 1, std::size_t(size)) - row0;
  Grid u("u", rows + 2, n);
  Grid next("next", rows + 2, n);
  std::vector<float> halo, block, all, x, y;
  // One stream per training process for the pairs trained on, one for the held-out pairs.
  const std::vector<std::size_t> shape{n + 2, n + 2, 1};
  std::vector<kdist::StreamProducer<float>> train_streams, held_streams;
  for (const int t : trainers) {
    train_streams.emplace_back(
        MPI_COMM_WORLD, t, shape, n * n,
        kdist::StreamProducer<float>::Options{.max_in_flight = 8, .tag = pair_tag});
    held_streams.emplace_back(MPI_COMM_WORLD, t, shape, n * n,
                              kdist::StreamProducer<float>::Options{.tag = held_out_tag});
  }
  const std::size_t trained_episodes = o.episodes - o.held_out;
  std::size_t k = 0;  // the step's number in the whole run
  for (std::size_t e = 0; e < o.episodes; ++e) {
    if (e == trained_episodes) {
      for (auto& s : train_streams) s.close();  // the trainers may finish while we go on
    }
    initial_field(u, row0, n, e);
    for (std::size_t s = 0; s < o.steps_per_episode; ++s, ++k) {
      exchange_halos(u, sim, halo);
      heat_step(u, next, o.alpha);
      // The pair (u, next), on the process whose turn it is, streamed as it is produced.
      const int root = int(k % std::size_t(size));
      gather_pair(u, next, sim, root, n, block, all, x, y);
      if (rank == root) {
        if (e < trained_episodes) {
          train_streams[k % trainers.size()].send(x, y);
        } else {
          for (auto& h : held_streams) h.send(x, y);
        }
      }
      std::swap(u, next);
    }
  }
  for (auto& h : held_streams) h.close();
}

// ---- the training group ------------------------------------------------------------------------

//! u (N x N, with a border of zeros: (N + 2) x (N + 2) x 1) -> Conv2D 3x3 'valid' -> u' (N * N).
kdist::Sequential surrogate(std::size_t n, double learning_rate) {
  using namespace kdist::layers;
  std::vector<kdist::Sequential::Layer> layers;
  layers.emplace_back(Conv2D(1, {3, 3}, Activation::linear, false, "surrogate"));
  layers.emplace_back(Flatten());
  kdist::Sequential model(kdist::Shape{n + 2, n + 2, 1}, std::move(layers));
  model.compile(std::make_shared<kdist::DataParallel>(), kdist::Loss::mean_squared_error,
                kdist::Adam(learning_rate), 1);
  return model;
}

//! The held-out pairs, whole, in the same order on every training process (sorted by value:
//! they arrive from several simulation processes in any order), as a dataset.
struct HeldOut {
  std::vector<float> x, y;
  std::size_t count = 0;
};
HeldOut sorted_pairs(const kdist::Reservoir<float>& r) {
  std::vector<std::size_t> order(r.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    const auto xa = r.example(a), xb = r.example(b);
    return std::lexicographical_compare(xa.begin(), xa.end(), xb.begin(), xb.end());
  });
  HeldOut h;
  for (const std::size_t i : order) {
    h.x.insert(h.x.end(), r.example(i).begin(), r.example(i).end());
    h.y.insert(h.y.end(), r.target(i).begin(), r.target(i).end());
  }
  h.count = order.size();
  return h;
}

int train(const Options& o, const std::vector<int>& simulators) {
  const bool root = kdist::process_id() == 0;
  const std::size_t n = o.grid;
  const std::size_t trainers = std::size_t(kdist::process_count());
  auto model = surrogate(n, o.learning_rate);
  if (root) {
    std::printf("training on %d processes (%s), %zu simulating; kdist on its own communicator\n",
                kdist::process_count(), model.distribution().name().c_str(), simulators.size());
  }
  // This process's reservoir, fed by every simulation process (each streams every S-th pair).
  const std::vector<std::size_t> shape{n + 2, n + 2, 1};
  kdist::StreamingDataset<float> data(MPI_COMM_WORLD, simulators, shape, n * n,
                                      {.capacity = o.capacity,
                                       .seed = 2026 + std::uint64_t(kdist::process_id()),
                                       .passes = o.passes,
                                       .tag = pair_tag});
  const std::size_t held_count = o.held_out * o.steps_per_episode;
  kdist::StreamingDataset<float> held_stream(MPI_COMM_WORLD, simulators, shape, n * n,
                                             {.capacity = held_count, .tag = held_out_tag});
  Kokkos::View<float****, Kokkos::LayoutRight, Kokkos::HostSpace> x("x", local_batch, n + 2, n + 2,
                                                                    1);
  Kokkos::View<float**, Kokkos::LayoutRight, Kokkos::HostSpace> y("y", local_batch, n * n);
  std::size_t steps = 0;
  for (;;) {
    // A step while every process has a full batch (they never wait once training has started).
    int full = data.next_batch(x, y) == local_batch ? 1 : 0;
    MPI_Allreduce(MPI_IN_PLACE, &full, 1, MPI_INT, MPI_MIN, kdist::communicator());
    if (!full) break;
    const auto m = model.train_step(x, y, local_batch * trainers);
    ++steps;
    if (root && steps % 100 == 0) {
      std::printf("step %zu: %zu pairs received here, reservoir %zu, loss %.3e\n", steps,
                  data.statistics().received, data.reservoir().size(), m.loss);
    }
  }
  const auto st = data.statistics();
  if (root) {
    std::printf(
        "trained %zu steps: %zu pairs received here, %zu evicted, seen %llu to %llu times "
        "(mean %.1f), %zu waits\n",
        steps, st.received, st.evicted, static_cast<unsigned long long>(st.seen_min),
        static_cast<unsigned long long>(st.seen_max), st.seen_mean, st.waits);
  }
  // Held-out episodes: the surrogate's error against persistence (u' = u).
  held_stream.wait_for_end();
  const HeldOut held = sorted_pairs(held_stream.reservoir());
  const auto test = kdist::ArrayDataset<float>::borrow(held.x, {n + 2, n + 2, 1}, held.y, n * n);
  const double mse = model.evaluate(test, {.batch_size = 16, .verbose = 0}).loss;
  double persistence = 0;
  for (std::size_t p = 0; p < held.count; ++p) {
    for (std::size_t i = 0; i < n; ++i) {
      for (std::size_t j = 0; j < n; ++j) {
        const double d = double(held.y[(p * n + i) * n + j]) -
                         double(held.x[(p * (n + 2) + i + 1) * (n + 2) + j + 1]);
        persistence += d * d;
      }
    }
  }
  persistence /= double(held.y.size());
  const std::string file = o.checkpoint_dir + "/surrogate.h5";
  if (root) std::filesystem::create_directories(o.checkpoint_dir);
  MPI_Barrier(kdist::communicator());  // the directory exists before anyone opens the file
  kdist::save_checkpoint(model, file);
  auto reloaded = surrogate(n, o.learning_rate);
  kdist::load_checkpoint(reloaded, file);
  const double reloaded_mse = reloaded.evaluate(test, {.batch_size = 16, .verbose = 0}).loss;
  if (root) {
    std::printf(
        "held-out (%zu pairs of %zu episodes): surrogate MSE %.3e, persistence MSE %.3e, "
        "ratio %.4f\n",
        held.count, o.held_out, mse, persistence, mse / persistence);
    std::printf("surrogate beats persistence 100x: %s\n", mse * 100 < persistence ? "yes" : "no");
    std::printf("checkpoint %s reloads: held-out MSE %.3e (%s)\n", file.c_str(), reloaded_mse,
                reloaded_mse == mse ? "the same" : "DIFFERENT");
  }
  return mse * 100 < persistence && reloaded_mse == mse ? 0 : 1;
}

//! Waits for every process of the job without spinning a core (MPICH busy-polls in MPI_Barrier:
//! the simulation group, done first, would slow the training group sharing its cores).
void quiet_barrier() {
  MPI_Request request = MPI_REQUEST_NULL;
  MPI_Ibarrier(MPI_COMM_WORLD, &request);
  for (int done = 0; !done;) {
    MPI_Test(&request, &done, MPI_STATUS_IGNORE);
    if (!done) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

}  // namespace

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);  // the program owns MPI
  int rank = 0;
  int size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);

  Options o;
  CLI::App app("In-situ training: a heat-equation simulation feeds a kdist surrogate in memory");
  app.add_option("--sim-ranks", o.sim_ranks, "simulation processes (default: half)")
      ->check(CLI::Range(0, 1 << 20));
  app.add_option("--grid", o.grid, "grid side N (N x N cells)")->check(CLI::Range(2, 256));
  app.add_option("--episodes", o.episodes, "episodes (each from a new random field)")
      ->check(CLI::Range(2, 100000));
  app.add_option("--steps-per-episode", o.steps_per_episode, "steps per episode")
      ->check(CLI::Range(1, 100000));
  app.add_option("--held-out", o.held_out, "last episodes never trained on")
      ->check(CLI::Range(1, 100000));
  app.add_option("--capacity", o.capacity, "pairs each training process keeps (its reservoir)")
      ->check(CLI::Range(8, 1 << 24));
  app.add_option("--passes", o.passes, "times each pair held is trained on after the streams end")
      ->check(CLI::Range(1, 100000));
  app.add_option("--learning-rate", o.learning_rate, "Adam's learning rate")
      ->check(CLI::Range(1e-6, 1.0));
  app.add_option("--checkpoint-dir", o.checkpoint_dir, "where the surrogate is saved");
  app.add_option("--alpha", o.alpha, "diffusion number (stable below 0.25)")
      ->check(CLI::Range(0.0f, 0.25f));
  std::string problem;
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // Every process parses the same command line: all stop alike, none is left waiting.
    const int status = rank == 0 ? app.exit(e) : (e.get_exit_code() == 0 ? 0 : 2);
    MPI_Finalize();
    return status;
  }
  if (o.sim_ranks == 0) o.sim_ranks = size / 2;
  if (o.sim_ranks < 1 || o.sim_ranks >= size || std::size_t(o.sim_ranks) > o.grid) {
    problem = "--sim-ranks is " + std::to_string(o.sim_ranks) + " of " + std::to_string(size) +
              " processes; give each group at least one process (mpiexec -n 2 or more) and at "
              "most one simulation process per grid row";
  } else if (o.held_out >= o.episodes) {
    problem = "--held-out " + std::to_string(o.held_out) + " leaves no episode of " +
              std::to_string(o.episodes) + " to train on";
  }
  if (!problem.empty()) {
    if (rank == 0) std::fprintf(stderr, "error: %s\n", problem.c_str());
    MPI_Finalize();
    return 2;
  }

  const bool simulating = rank < o.sim_ranks;
  MPI_Comm group = MPI_COMM_NULL;
  MPI_Comm_split(MPI_COMM_WORLD, simulating ? 0 : 1, rank, &group);
  std::vector<int> simulators;
  std::vector<int> trainers;
  for (int r = 0; r < size; ++r) (r < o.sim_ranks ? simulators : trainers).push_back(r);

  int status = 0;
  if (simulating) {
    Kokkos::ScopeGuard kokkos(argc, argv);
    simulate(o, group, trainers);
  } else {
    // kdist on the training group only; an error here ends the whole job (MPI_Abort).
    status = kdist::run(argc, argv, group, [&](int, char**) { return train(o, simulators); });
  }
  quiet_barrier();
  MPI_Comm_free(&group);
  MPI_Finalize();
  return status;
}
