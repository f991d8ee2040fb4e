// kdist-mpi-ranks: 1 2 4
// kdist::from_local_blocks (issue 38): each process's own block of a field - a managed View, an
// unmanaged View of a simulation's interior rows, a strided subview that skips halo columns - makes
// the distributed field without a gather (the same memory when it can, a copy when it cannot) on
// every 2-D process grid of the world's size; a block of the wrong extents is a ValueError on every
// process; a field surrogate trained on the blocks (input and target blocks, train_step(x, y))
// follows the same losses and weights as one trained on whole fields on every process.
#include <gtest/gtest.h>
#include "model_test_support.hpp"

#include <array>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include <kdist/nn/layers/convolution.hpp>
#include <kdist/strategy/layout_map.hpp>
#include <kdist/strategy/model_parallel.hpp>
#include <kdist/tensor/allocation_counters.hpp>
#include <kdist/tensor/distribute_tensor.hpp>
#include <kdist/tensor/from_local_blocks.hpp>

namespace {

using kdist::test::message_of;
using kdist::test::world_size;
using Field = kdist::DistributedTensor<float****>;
//! Whether the tensors live in host memory: on a device build a host block is copied, not shared.
constexpr bool host_tensors = std::is_same_v<Field::memory_space, Kokkos::HostSpace>;
constexpr std::size_t H = 9, W = 7;  // uneven blocks on 2 and 4 processes

// Process grids ("data", "h", "w") = (1, ph, pw) of the world's size.
std::vector<std::array<std::size_t, 3>> grids() {
  const auto n = static_cast<std::size_t>(world_size());
  std::vector<std::array<std::size_t, 3>> out;
  for (std::size_t h = 1; h <= n; ++h) {
    if (n % h == 0) out.push_back({1, h, n / h});
  }
  return out;
}
std::string grid_name(const std::array<std::size_t, 3>& g) {
  return "grid " + std::to_string(g[1]) + " x " + std::to_string(g[2]);
}
kdist::RuntimeDeviceMesh mesh_of(const std::array<std::size_t, 3>& g) {
  return kdist::RuntimeDeviceMesh(std::vector<std::size_t>(g.begin(), g.end()), {"data", "h", "w"},
                                  kdist::list_devices());
}
// The field's value at (i, j): what every process can compute for its own positions.
float value(std::size_t i, std::size_t j, int t = 0) {
  return std::sin(0.7f * float(i) + 0.3f * float(j) + 0.5f * float(t)) + 0.1f * float(i % 3);
}
// This process's block of a (1, H, W, 1) field under (None, "h", "w", None): rows, columns.
struct Block {
  std::size_t i0, rows, j0, cols;
};
Block my_block(const kdist::RuntimeDeviceMesh& mesh) {
  const auto c = mesh.coords_of(static_cast<std::size_t>(kdist::process_id()));
  const auto rows = kdist::detail::chunk_block(H, mesh.extent(1), c[1]);
  const auto cols = kdist::detail::chunk_block(W, mesh.extent(2), c[2]);
  return {rows.offset, rows.extent, cols.offset, cols.extent};
}
std::vector<float> whole(int t = 0) {
  std::vector<float> v(H * W);
  for (std::size_t i = 0; i < H; ++i)
    for (std::size_t j = 0; j < W; ++j) v[i * W + j] = value(i, j, t);
  return v;
}
std::vector<float> gathered(const Field& f) {
  const auto h = kdist::full_tensor(f);
  return std::vector<float>(h.data(), h.data() + h.size());
}

TEST(FromLocalBlocks, ASimulationsBlocksMakeTheFieldWithoutACopyWhenTheyCan) {
  for (const auto& g : grids()) {
    const auto mesh = mesh_of(g);
    const kdist::RuntimeTensorLayout layout({kdist::replicated, "h", "w", kdist::replicated}, mesh);
    const auto b = my_block(mesh);
    // (a) a managed LayoutRight View of the block: the tensor shares it
    Kokkos::View<float****, Kokkos::LayoutRight, Kokkos::HostSpace> own("own", 1, b.rows, b.cols,
                                                                        1);
    for (std::size_t i = 0; i < b.rows; ++i)
      for (std::size_t j = 0; j < b.cols; ++j) own(0, i, j, 0) = value(b.i0 + i, b.j0 + j);
    const auto a = kdist::from_local_blocks<float****>(own, {1, H, W, 1}, layout);
    EXPECT_EQ(a.local().data() == own.data(), host_tensors) << grid_name(g) << ": the same memory";
    EXPECT_EQ(gathered(a), whole()) << grid_name(g);
    // (b) the interior rows of a simulation's (rows + 2, cols) block with a halo row each side,
    // viewed as (1, rows, cols, 1) without owning it: still the same memory
    Kokkos::View<float**, Kokkos::LayoutRight, Kokkos::HostSpace> u("u", b.rows + 2, b.cols);
    for (std::size_t i = 0; i < b.rows; ++i)
      for (std::size_t j = 0; j < b.cols; ++j) u(i + 1, j) = value(b.i0 + i, b.j0 + j);
    Kokkos::View<float****, Kokkos::LayoutRight, Kokkos::HostSpace,
                 Kokkos::MemoryTraits<Kokkos::Unmanaged>>
        interior(&u(1, 0), 1, b.rows, b.cols, 1);
    const auto bt = kdist::from_local_blocks<float****>(interior, {1, H, W, 1}, layout);
    EXPECT_EQ(bt.local().data() == &u(1, 0), host_tensors)
        << grid_name(g) << ": the simulation's memory";
    EXPECT_EQ(gathered(bt), whole()) << grid_name(g);
    // (c) a block with halo cells all round: its interior is strided, so it is copied
    Kokkos::View<float****, Kokkos::LayoutRight, Kokkos::HostSpace> halo("halo", 1, b.rows + 2,
                                                                         b.cols + 2, 1);
    for (std::size_t i = 0; i < b.rows; ++i)
      for (std::size_t j = 0; j < b.cols; ++j) halo(0, i + 1, j + 1, 0) = value(b.i0 + i, b.j0 + j);
    const auto inner = Kokkos::subview(halo, Kokkos::ALL, std::pair(std::size_t{1}, b.rows + 1),
                                       std::pair(std::size_t{1}, b.cols + 1), Kokkos::ALL);
    const auto c = kdist::from_local_blocks<float****>(inner, {1, H, W, 1}, layout);
    EXPECT_NE(c.local().data(), inner.data()) << grid_name(g) << ": a copy";
    EXPECT_EQ(gathered(c), whole()) << grid_name(g);
  }
}

TEST(FromLocalBlocks, ABlockOfTheWrongExtentsIsAValueErrorOnEveryProcess) {
  const auto g = grids().back();  // the most columns
  const auto mesh = mesh_of(g);
  const kdist::RuntimeTensorLayout layout({kdist::replicated, "h", "w", kdist::replicated}, mesh);
  const auto b = my_block(mesh);
  // the last process gives one column too many
  const bool last = kdist::process_id() + 1 == world_size();
  Kokkos::View<float****, Kokkos::LayoutRight, Kokkos::HostSpace> v("v", 1, b.rows,
                                                                    b.cols + (last ? 1 : 0), 1);
  const auto msg = message_of<kdist::ValueError>([&] {
    (void)kdist::from_local_blocks<float****>(v, {1, H, W, 1}, layout);
  });
  const auto lb = [&] {  // the last process's block, as every process can compute it
    const auto c = mesh.coords_of(static_cast<std::size_t>(world_size() - 1));
    const auto r = kdist::detail::chunk_block(H, g[1], c[1]);
    const auto col = kdist::detail::chunk_block(W, g[2], c[2]);
    return Block{r.offset, r.extent, col.offset, col.extent};
  }();
  EXPECT_EQ(msg, "kdist::from_local_blocks: process " + std::to_string(world_size() - 1) +
                     " gave a block of extents (1, " + std::to_string(lb.rows) + ", " +
                     std::to_string(lb.cols + 1) + ", 1) but layout " + layout.axes_repr() +
                     " gives it the block of extents (1, " + std::to_string(lb.rows) + ", " +
                     std::to_string(lb.cols) + ", 1) at (0, " + std::to_string(lb.i0) + ", " +
                     std::to_string(lb.j0) +
                     ", 0) of shape (1, 9, 7, 1) (chunk blocks: ceil(extent / parts) positions "
                     "each, the last ones shorter or empty); split the field so, or give the "
                     "layout that matches");
}

kdist::Sequential stencil_model() {
  using namespace kdist::layers;
  std::vector<kdist::Sequential::Layer> l;
  l.emplace_back(Conv2D(1, {3, 3}, Activation::linear, false, "conv", {.padding = Padding::same}));
  return kdist::Sequential({H, W, 1}, std::move(l));
}

TEST(FromLocalBlocks, ASurrogateTrainedOnTheBlocksFollowsOneTrainedOnWholeFields) {
  for (const auto& g : grids()) {
    const auto mesh = mesh_of(g);
    const auto dist = std::make_shared<kdist::ModelParallel>(kdist::LayoutMap(mesh), "data");
    const kdist::RuntimeTensorLayout layout({kdist::replicated, "h", "w", kdist::replicated}, mesh);
    const auto b = my_block(mesh);
    auto on_blocks = stencil_model(), on_wholes = stencil_model();
    on_blocks.compile(dist, kdist::Loss::mean_squared_error, kdist::SGD(0.05), 3);
    on_wholes.compile(dist, kdist::Loss::mean_squared_error, kdist::SGD(0.05), 3);
    for (int t = 0; t < 3; ++t) {
      // the pair (u_t, u_{t+1}): blocks on each process, whole fields on each for the reference
      Kokkos::View<float****, Kokkos::LayoutRight, Kokkos::HostSpace> u("u", 1, b.rows, b.cols, 1),
          next("next", 1, b.rows, b.cols, 1);
      for (std::size_t i = 0; i < b.rows; ++i)
        for (std::size_t j = 0; j < b.cols; ++j) {
          u(0, i, j, 0) = value(b.i0 + i, b.j0 + j, t);
          next(0, i, j, 0) = value(b.i0 + i, b.j0 + j, t + 1);
        }
      const auto x = kdist::from_local_blocks<float****>(u, {1, H, W, 1}, layout);
      const auto got = on_blocks.train_step(x, next);
      auto xs = whole(t), ys = whole(t + 1);
      const Kokkos::View<float****, Kokkos::HostSpace> xw(xs.data(), 1, H, W, 1);
      const Kokkos::View<float**, Kokkos::HostSpace> yw(ys.data(), 1, H * W);
      const auto want = on_wholes.train_step(xw, yw, 1);
      EXPECT_NEAR(got.loss, want.loss, 1e-6 * (1 + want.loss)) << grid_name(g) << " step " << t;
    }
    const auto kb = kdist::test::local_weights(on_blocks),
               kw = kdist::test::local_weights(on_wholes);
    ASSERT_EQ(kb.size(), kw.size());
    for (std::size_t i = 0; i < kb.size(); ++i) EXPECT_NEAR(kb[i], kw[i], 1e-6) << grid_name(g);
    // The output of the blocks stays in blocks.
    const auto y = std::get<Field>(on_blocks.predict_step(kdist::from_local_blocks<float****>(
        Kokkos::View<float****, Kokkos::HostSpace>("z", 1, b.rows, b.cols, 1), {1, H, W, 1},
        layout)));
    EXPECT_EQ(y.layout(), layout) << grid_name(g);
    // A block of targets of other extents is an error naming both.
    Kokkos::View<float****, Kokkos::HostSpace> wrong("wrong", 1, b.rows + 1, b.cols, 1);
    const auto x = kdist::from_local_blocks<float****>(
        Kokkos::View<float****, Kokkos::HostSpace>("x", 1, b.rows, b.cols, 1), {1, H, W, 1},
        layout);
    if (world_size() == 1) {
      EXPECT_EQ(message_of<kdist::ValueError>([&] { on_blocks.train_step(x, wrong); }),
                "kdist::Sequential: a block of targets of extents (1, 10, 7, 1) for the output's "
                "block (1, 9, 7, 1) on this process (layout (None, 'h', 'w', None)); give each "
                "process its block");
    }
  }
}

TEST(FromLocalBlocks, MemoryPerProcessFollowsItsBlockOfTheField) {
  // A training step of two Conv2D 'same' 3x3 (1 -> 8 -> 1 channels) on a 128 x 128 field in
  // blocks: the most View memory a process holds (kdist::AllocationCounters, from before the
  // model is built) is a bounded multiple of its block - the field is never whole anywhere, so
  // memory per process falls as 1/P.
  constexpr std::size_t n = 128;
  const auto g = grids().back();
  const auto mesh = mesh_of(g);
  const kdist::RuntimeTensorLayout layout({kdist::replicated, "h", "w", kdist::replicated}, mesh);
  const auto c = mesh.coords_of(static_cast<std::size_t>(kdist::process_id()));
  const auto rows = kdist::detail::chunk_block(n, g[1], c[1]);
  const auto cols = kdist::detail::chunk_block(n, g[2], c[2]);
  kdist::AllocationCounters memory;
  {
    using namespace kdist::layers;
    std::vector<kdist::Sequential::Layer> l;
    l.emplace_back(Conv2D(8, {3, 3}, Activation::relu, true, "conv", {.padding = Padding::same}));
    l.emplace_back(
        Conv2D(1, {3, 3}, Activation::linear, true, "conv_1", {.padding = Padding::same}));
    kdist::Sequential model({n, n, 1}, std::move(l));
    model.compile(std::make_shared<kdist::ModelParallel>(kdist::LayoutMap(mesh), "data"),
                  kdist::Loss::mean_squared_error, kdist::Adam(1e-3), 1);
    Kokkos::View<float****, Kokkos::LayoutRight> u("u", 1, rows.extent, cols.extent, 1),
        next("next", 1, rows.extent, cols.extent, 1);
    const auto x = kdist::from_local_blocks<float****>(u, {1, n, n, 1}, layout);
    for (int s = 0; s < 2; ++s) (void)model.train_step(x, next);
  }
  const double block = double(rows.extent * cols.extent) * sizeof(float);
  const double per_block = double(memory.peak_bytes()) / block;
  // 8-channel activations and their gradients, the second convolution's patch matrix (72 columns)
  // and the kept halo buffers: 164-167 x the block at 1, 2 and 4 processes.
  EXPECT_LT(per_block, 200.0) << grid_name(g) << ": peak " << memory.peak_bytes()
                              << " bytes for a block of " << block << " bytes";
  if (kdist::process_id() == 0) {
    std::printf("[ FromLocalBlocks ] %s: peak %zu bytes = %.1f x the block\n", grid_name(g).c_str(),
                memory.peak_bytes(), per_block);
  }
}

}  // namespace
