// In-situ training on the simulation's own decomposition (issue 38): no field leaves its owner.
//
// Every process integrates its block of the 2-D heat equation u' = u + alpha * laplacian(u) on an
// N x N grid (zeros outside), the grid split over a (ph x pw) process grid in kdist's chunk blocks.
// Its halo cells come from its neighbours by kdist's halo exchange (kdist::layers::SpatialHalos,
// what a spatially sharded Conv2D uses). After each step the same processes train a surrogate that
// predicts u' from u - a Conv2D(1, 3x3, "same", linear, no bias) on the field sharded as the
// simulation holds it: `kdist::from_local_blocks` makes the input from the simulation's own
// memory (no copy), the target is the block of u', the convolution exchanges the halos itself and
// the loss is summed over the blocks. The surrogate can learn the 5-point stencil exactly, so its
// error on the held-out episodes goes to rounding; it is reported against persistence (u' = u),
// with the most View memory any process held (kdist::AllocationCounters), which falls as 1/P.
//
//   mpiexec -n 4 build/examples/in_situ_heat_blocks                   # a 2 x 2 process grid
//   mpiexec -n 2 build/examples/in_situ_heat_blocks --grid 256 --episodes 3
#include <CLI/CLI.hpp>
#include <Kokkos_Core.hpp>
#include <cmath>
#include <cstdio>
#include <kdist/kdist.hpp>
#include <memory>
#include <string>
#include <vector>

namespace {

struct Options {
  std::size_t grid = 32;
  std::size_t episodes = 3;
  std::size_t steps_per_episode = 8;
  std::size_t held_out = 1;
  std::size_t passes = 15;  // training steps on each pair as it is made
  double learning_rate = 0.05;
  float alpha = 0.2f;
};

using Field = Kokkos::View<float****, Kokkos::LayoutRight>;  // (1, rows, cols, 1): this block

//! The process grid (ph, pw): the most square split of P processes, ph <= pw.
std::array<std::size_t, 2> process_grid(std::size_t p) {
  std::size_t ph = 1;
  for (std::size_t h = 1; h * h <= p; ++h) {
    if (p % h == 0) ph = h;
  }
  return {ph, p / ph};
}

//! Episode `e`'s random field on this block at (i0, j0) of an n x n grid: the same field whatever
//! the split.
void initial_field(const Field& u, std::size_t i0, std::size_t j0, std::size_t n,
                   std::size_t episode) {
  const auto key = kdist::random_key(2026, 38, episode);
  Kokkos::parallel_for(
      "heat::initial", Kokkos::MDRangePolicy<Kokkos::Rank<2>>({0, 0}, {u.extent(1), u.extent(2)}),
      KOKKOS_LAMBDA(const std::size_t i, const std::size_t j) {
        u(0, i, j, 0) = kdist::uniform01(key, (i0 + i) * n + j0 + j);
      });
}

//! next = u + alpha * laplacian(u) on this block, from `ue`: the block with its halo cells.
void heat_step(const Field& ue, const Field& next, float alpha) {
  Kokkos::parallel_for(
      "heat::step",
      Kokkos::MDRangePolicy<Kokkos::Rank<2>>({0, 0}, {next.extent(1), next.extent(2)}),
      KOKKOS_LAMBDA(const std::size_t i, const std::size_t j) {
        const float c = ue(0, i + 1, j + 1, 0);
        next(0, i, j, 0) = c + alpha * (ue(0, i, j + 1, 0) + ue(0, i + 2, j + 1, 0) +
                                        ue(0, i + 1, j, 0) + ue(0, i + 1, j + 2, 0) - 4 * c);
      });
}

//! sum over the whole field of (a - b)^2, over every process.
double squared_difference(const Field& a, const Field& b) {
  double s = 0;
  Kokkos::parallel_reduce(
      "heat::squared_difference",
      Kokkos::MDRangePolicy<Kokkos::Rank<2>>({0, 0}, {a.extent(1), a.extent(2)}),
      KOKKOS_LAMBDA(const std::size_t i, const std::size_t j, double& acc) {
        const double d = double(a(0, i, j, 0)) - double(b(0, i, j, 0));
        acc += d * d;
      },
      s);
  const Kokkos::View<double*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>> v(&s, 1);
  kdist::all_reduce(Kokkos::DefaultHostExecutionSpace(), v, kdist::ReduceOp::sum,
                    kdist::communicator());
  return s;
}

int train(const Options& o) {
  const std::size_t p = static_cast<std::size_t>(kdist::process_count());
  const auto [ph, pw] = process_grid(p);
  const std::size_t n = o.grid;
  if (ph > n || pw > n) {
    throw kdist::ValueError("--grid " + std::to_string(n) + " is smaller than the process grid " +
                            std::to_string(ph) + " x " + std::to_string(pw) +
                            "; give each process at least one cell");
  }
  if (o.held_out >= o.episodes) {
    throw kdist::ValueError("--held-out " + std::to_string(o.held_out) + " leaves no episode of " +
                            std::to_string(o.episodes) + " to train on");
  }
  kdist::AllocationCounters memory;  // every View from here on: the field's, the model's
  const kdist::RuntimeDeviceMesh mesh({1, ph, pw}, {"data", "h", "w"}, kdist::list_devices());
  const kdist::RuntimeTensorLayout blocks({kdist::replicated, "h", "w", kdist::replicated}, mesh);
  const auto coords = mesh.coords_of(static_cast<std::size_t>(kdist::process_id()));
  const auto rows = kdist::detail::chunk_block(n, ph, coords[1]);
  const auto cols = kdist::detail::chunk_block(n, pw, coords[2]);

  // The simulation's state: this block, and the next step's.
  Field u("heat::u", 1, rows.extent, cols.extent, 1),
      next("heat::next", 1, rows.extent, cols.extent, 1);
  // Its halo exchange: a 3 x 3 stencil with zeros outside the grid.
  kdist::layers::SpatialHalos<Field, 2> halos;
  const std::array<kdist::layers::WindowAxis, 2> stencil{
      kdist::layers::WindowAxis{n, 3, 1, 1, kdist::layers::Padding::same},
      kdist::layers::WindowAxis{n, 3, 1, 1, kdist::layers::Padding::same}};
  halos.plan({1, n, n, 1}, blocks, stencil);

  using namespace kdist::layers;
  kdist::Sequential surrogate({n, n, 1}, {Conv2D(1, {3, 3}, Activation::linear, false, "stencil",
                                                 {.padding = Padding::same})});
  surrogate.compile(std::make_shared<kdist::ModelParallel>(kdist::LayoutMap(mesh), "data"),
                    kdist::Loss::mean_squared_error, kdist::Adam(o.learning_rate), 2026);

  double train_loss = 0, surrogate_error = 0, persistence_error = 0;
  std::size_t held_pairs = 0;
  for (std::size_t e = 0; e < o.episodes; ++e) {
    const bool held = e + o.held_out >= o.episodes;
    initial_field(u, rows.offset, cols.offset, n, e);
    for (std::size_t s = 0; s < o.steps_per_episode; ++s) {
      heat_step(halos.gather(u), next, o.alpha);
      // The pair (u, u') as the simulation holds it: u is the model's input without a copy.
      const auto x = kdist::from_local_blocks<float****>(u, {1, n, n, 1}, blocks);
      if (held) {
        surrogate_error += surrogate.evaluate_batch(x, next).loss;
        persistence_error += squared_difference(u, next) / double(n * n);
        ++held_pairs;
      } else {
        for (std::size_t k = 0; k < o.passes; ++k) train_loss = surrogate.train_step(x, next).loss;
      }
      Kokkos::deep_copy(u, next);
    }
  }
  surrogate_error /= double(held_pairs);
  persistence_error /= double(held_pairs);
  const double block_bytes = double(rows.extent * cols.extent) * sizeof(float);
  double peak[1] = {double(memory.peak_bytes())};
  const Kokkos::View<double*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>> pv(peak,
                                                                                             1);
  kdist::all_reduce(Kokkos::DefaultHostExecutionSpace(), pv, kdist::ReduceOp::max,
                    kdist::communicator());
  if (kdist::process_id() == 0) {
    std::printf(
        "heat %zu x %zu on a %zu x %zu process grid: each process simulates and trains on "
        "its own block (%zu x %zu at most)\n",
        n, n, ph, pw, kdist::detail::chunk_size(n, ph), kdist::detail::chunk_size(n, pw));
    std::printf("last training step: MSE %.3e\n", train_loss);
    std::printf("held-out (%zu pairs of %zu episodes): surrogate MSE %.3e, persistence MSE %.3e\n",
                held_pairs, o.held_out, surrogate_error, persistence_error);
    std::printf("surrogate beats persistence 100x: %s\n",
                surrogate_error * 100 < persistence_error ? "yes" : "no");
    std::printf(
        "most View memory on a process: %.0f bytes = %.1f x its block of the field "
        "(%.0f bytes; the whole field is %.0f)\n",
        peak[0], peak[0] / block_bytes, block_bytes, double(n * n) * sizeof(float));
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return kdist::run(argc, argv, [](int argc, char** argv) {
    Options o;
    CLI::App app(
        "In-situ training on the simulation's blocks: each process simulates and trains "
        "on its own part of the field");
    app.add_option("--grid", o.grid, "grid side N (N x N cells)")->check(CLI::Range(2, 1 << 14));
    app.add_option("--episodes", o.episodes, "episodes (each from a new random field)")
        ->check(CLI::Range(2, 100000));
    app.add_option("--steps-per-episode", o.steps_per_episode, "steps per episode")
        ->check(CLI::Range(1, 100000));
    app.add_option("--held-out", o.held_out, "last episodes never trained on")
        ->check(CLI::Range(1, 100000));
    app.add_option("--passes", o.passes, "training steps on each pair as it is made")
        ->check(CLI::Range(1, 100000));
    app.add_option("--learning-rate", o.learning_rate, "Adam's learning rate")
        ->check(CLI::Range(1e-6, 1.0));
    app.add_option("--alpha", o.alpha, "diffusion number (stable below 0.25)")
        ->check(CLI::Range(0.0f, 0.25f));
    try {
      app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
      return kdist::process_id() == 0 ? app.exit(e) : (e.get_exit_code() == 0 ? 0 : 2);
    }
    return train(o);
  });
}
