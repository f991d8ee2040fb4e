// kdist-mpi-ranks: 1 2 4 8
// Distributed tensors: round trips distribute -> full for every layout of a 2-D tensor on every
// mesh of the world's size, from a global array, from a root and from a function; redistribute
// between every pair of layouts equal to a fresh distribute_tensor of the target; partial sums;
// error paths raised alike on every rank.
#include <gtest/gtest.h>
#include <mpi.h>

#include <kdist/tensor/distribute_tensor.hpp>
#include <kdist/tensor/redistribute.hpp>
#include <kdist/tensor/tensor.hpp>
#include <kdist/tensor/visualize_sharding.hpp>

#include <numeric>
#include <string>
#include <vector>

#include "host_views.hpp"

namespace {

int world() {
  int s = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &s);
  return s;
}

std::vector<std::vector<std::size_t>> meshes_for(std::size_t n) {
  std::vector<std::vector<std::size_t>> all = {{1, 1}, {2, 1}, {1, 2}, {2, 2}, {2, 4},
                                               {4, 2}, {8, 1}, {1, 8}, {4, 1}, {1, 4}};
  std::vector<std::vector<std::size_t>> out;
  for (auto& s : all) {
    if (s[0] * s[1] == n) out.push_back(s);
  }
  return out;
}

std::vector<std::vector<kdist::DimAxes>> all_layouts_2d() {
  using kdist::DimAxes;
  const DimAxes none, data("data"), model("model"), dm({"data", "model"}), md({"model", "data"});
  return {{none, none},  {data, none}, {model, none}, {none, data}, {none, model}, {data, model},
          {model, data}, {dm, none},   {md, none},    {none, dm},   {none, md}};
}

double value_at(std::size_t i, std::size_t j) {
  return static_cast<double>(i * 1000 + j) + 0.5;
}

std::vector<double> global_data(std::size_t rows, std::size_t cols) {
  std::vector<double> g(rows * cols);
  for (std::size_t i = 0; i < rows; ++i)
    for (std::size_t j = 0; j < cols; ++j) g[i * cols + j] = value_at(i, j);
  return g;
}

template <class Host>
void expect_whole(const Host& full, std::size_t rows, std::size_t cols, const std::string& what) {
  ASSERT_EQ(full.extent(0), rows) << what;
  ASSERT_EQ(full.extent(1), cols) << what;
  for (std::size_t i = 0; i < rows; ++i)
    for (std::size_t j = 0; j < cols; ++j) ASSERT_EQ(full(i, j), value_at(i, j)) << what;
}

template <class T>
void expect_local_is_block(const T& t, const std::string& what) {
  auto h = kdist::test::local_on_host(t);
  for (std::size_t i = 0; i < h.extent(0); ++i)
    for (std::size_t j = 0; j < h.extent(1); ++j)
      ASSERT_EQ(h(i, j), value_at(i + t.offsets()[0], j + t.offsets()[1])) << what;
}

const std::vector<std::array<std::size_t, 2>> shapes = {{8, 12}, {7, 5}};  // divides, does not

// value_at as a device function (a functor: usable as kdist::on_device(...)).
struct ValueAt {
  KOKKOS_INLINE_FUNCTION double operator()(std::size_t i, std::size_t j) const {
    return static_cast<double>(i * 1000 + j) + 0.5;
  }
};

// A KOKKOS_LAMBDA source: in a free function, as nvcc wants (not in a GoogleTest body).
kdist::DistributedTensor<double**> from_device_lambda(const std::array<std::size_t, 2>& shape,
                                                      const kdist::RuntimeTensorLayout& layout) {
  return kdist::distribute_tensor<double**>(
      KOKKOS_LAMBDA(std::size_t i, std::size_t j) {
        return static_cast<double>(i * 1000 + j) + 0.5;
      },
      shape, layout);
}

}  // namespace

// Which callables are evaluated where: host memory always in place; a plain lambda and
// kdist::on_host(f) are host callables, kdist::on_device(f) a device one.
TEST(DistributedTensor, FunctionFormsSayWhereTheyRun) {
  auto host_lambda = [](std::size_t i, std::size_t j) { return value_at(i, j); };
  using HostLambda = decltype(host_lambda);
  static_assert(!kdist::detail::is_device_callable_v<HostLambda>);
  static_assert(!kdist::detail::is_device_callable_v<kdist::HostFunction<ValueAt>>);
  static_assert(kdist::detail::is_device_callable_v<kdist::DeviceFunction<ValueAt>>);
  static_assert(kdist::evaluates_on_device_v<HostLambda, Kokkos::HostSpace>);
  static_assert(kdist::evaluates_on_device_v<kdist::HostFunction<ValueAt>, Kokkos::HostSpace>);
  if constexpr (!Kokkos::SpaceAccessibility<
                    Kokkos::HostSpace, Kokkos::DefaultExecutionSpace::memory_space>::accessible) {
    // A GPU: a plain lambda runs on the host and is copied, a device function in place.
    EXPECT_FALSE(kdist::evaluates_on_device_v<HostLambda>);
    EXPECT_TRUE(kdist::evaluates_on_device_v<kdist::DeviceFunction<ValueAt>>);
  }
}

// Every function form gives the same shards as the global array: a plain (host) lambda, the same
// wrapped in kdist::on_host, a functor wrapped in kdist::on_device, a KOKKOS_LAMBDA; and the
// host-evaluation path itself, forced on whatever memory the default space has.
TEST(DistributedTensor, FunctionFormsAgree) {
  const auto n = static_cast<std::size_t>(world());
  for (const auto& mesh_shape : meshes_for(n)) {
    kdist::RuntimeDeviceMesh mesh(mesh_shape, {"data", "model"}, n);
    const kdist::RuntimeTensorLayout layout({kdist::DimAxes("data"), kdist::DimAxes("model")},
                                            mesh);
    for (auto shape : shapes) {
      const std::string what =
          mesh.to_string() + " " + std::to_string(shape[0]) + "x" + std::to_string(shape[1]);
      auto host_lambda = [](std::size_t i, std::size_t j) { return value_at(i, j); };
      expect_local_is_block(kdist::distribute_tensor<double**>(host_lambda, shape, layout),
                            what + " host lambda");
      expect_local_is_block(
          kdist::distribute_tensor<double**>(kdist::on_host(host_lambda), shape, layout),
          what + " on_host");
      expect_local_is_block(
          kdist::distribute_tensor<double**>(kdist::on_device(ValueAt{}), shape, layout),
          what + " on_device");
      expect_local_is_block(from_device_lambda(shape, layout), what + " KOKKOS_LAMBDA");
      auto t = kdist::DistributedTensor<double**>::uninitialized(shape, layout);
      kdist::detail::fill_from_function<false>(t.local(), t.offsets(), host_lambda);
      expect_local_is_block(t, what + " host path");
    }
  }
}

TEST(DistributedTensor, RoundTripEveryLayoutEveryMesh) {
  const auto n = static_cast<std::size_t>(world());
  for (const auto& ms : meshes_for(n)) {
    kdist::RuntimeDeviceMesh mesh(ms, {"data", "model"}, n);
    for (const auto& axes : all_layouts_2d()) {
      kdist::RuntimeTensorLayout layout(axes, mesh);
      for (auto shape : shapes) {
        const std::string what = mesh.to_string() + " " + layout.axes_repr() + " shape " +
                                 std::to_string(shape[0]) + "x" + std::to_string(shape[1]);
        auto g = global_data(shape[0], shape[1]);
        auto a = kdist::distribute_tensor<double**>(g.data(), shape, layout);
        expect_local_is_block(a, what + " from global");
        auto c = kdist::distribute_tensor<double**>(
            [](std::size_t i, std::size_t j) { return value_at(i, j); }, shape, layout);
        expect_local_is_block(c, what + " from fn");
        expect_whole(kdist::full_tensor(c), shape[0], shape[1], what + " full");
        if (n <= 4) {  // keep the collective count low at 8 ranks
          const int root = static_cast<int>(n - 1);
          auto b = kdist::distribute_tensor_from_root<double**>(
              a.device() == static_cast<std::size_t>(root) ? g.data() : nullptr, shape, layout,
              root);
          expect_local_is_block(b, what + " from root");
          auto f = kdist::full_tensor(b, 0);
          if (b.device() == 0)
            expect_whole(f, shape[0], shape[1], what + " full to root");
          else
            EXPECT_EQ(f.size(), 0u);
        }
      }
    }
  }
}

TEST(DistributedTensor, RedistributeEveryPairEqualsFreshDistribute) {
  const auto n = static_cast<std::size_t>(world());
  if (n != 4) GTEST_SKIP() << "runs on a 2x2 mesh (mpiexec -n 4)";
  kdist::RuntimeDeviceMesh mesh({2, 2}, {"data", "model"}, n);
  auto fn = [](std::size_t i, std::size_t j) { return value_at(i, j); };
  for (auto shape : shapes) {
    for (const auto& from : all_layouts_2d()) {
      auto src =
          kdist::distribute_tensor<double**>(fn, shape, kdist::RuntimeTensorLayout(from, mesh));
      for (const auto& to : all_layouts_2d()) {
        kdist::RuntimeTensorLayout target(to, mesh);
        auto moved = kdist::redistribute(src, target);
        EXPECT_EQ(moved.layout(), target);
        expect_local_is_block(moved, src.layout().axes_repr() + " -> " + target.axes_repr());
      }
    }
  }
}

TEST(DistributedTensor, PartialSumResolvesByAllReduceAndReduceScatter) {
  const auto n = static_cast<std::size_t>(world());
  for (const auto& ms : meshes_for(n)) {
    kdist::RuntimeDeviceMesh mesh(ms, {"data", "model"}, n);
    const std::array<std::size_t, 2> shape{6, 5};
    // Every device of a "model" row holds (value / model extent + model coord - mean) so that the
    // pending sum over "model" is value.
    kdist::RuntimeTensorLayout rows_on_data({"data", kdist::replicated}, mesh);
    auto base = kdist::distribute_tensor<double**>(
        [](std::size_t i, std::size_t j) { return value_at(i, j); }, shape, rows_on_data);
    const auto coords = mesh.coords_of(base.device());
    const double m = static_cast<double>(ms[1]);
    const double shift = static_cast<double>(coords[1]) - (m - 1) / 2;
    auto local = kdist::test::local_on_host(base);
    Kokkos::View<double**, Kokkos::LayoutRight> part("part", local.extent(0), local.extent(1));
    kdist::test::edit_on_host(part, [&](const auto& h) {
      for (std::size_t i = 0; i < local.extent(0); ++i)
        for (std::size_t j = 0; j < local.extent(1); ++j) h(i, j) = local(i, j) / m + shift;
    });
    auto p = kdist::DistributedTensor<double**>::from_local(part, shape, rows_on_data, {"model"});
    EXPECT_EQ(p.is_partial(), ms[1] > 1);  // a sum over one device is complete
    expect_whole(kdist::full_tensor(p), shape[0], shape[1], "partial full");
    auto rep = kdist::redistribute(
        p, kdist::RuntimeTensorLayout({kdist::replicated, kdist::replicated}, mesh));
    EXPECT_FALSE(rep.is_partial());
    expect_local_is_block(rep, "partial -> replicated");
    auto sh = kdist::redistribute(p, kdist::RuntimeTensorLayout({"data", "model"}, mesh));
    expect_local_is_block(sh, "partial -> sharded");
    // the same pending sum with rows replicated: reduce-scatter along dimension 0 (contiguous)
    // and along dimension 1 (packed), over one axis and over both axes in either order
    auto full = kdist::full_tensor(base);
    const auto& c = coords;
    auto pending = [&](const kdist::RuntimeTensorLayout& layout, std::vector<std::string> over) {
      // each device holds value / (product of the partial extents) + a shift that sums to zero
      // over the partial axes (the sum of the centred coordinates)
      double parts = 1, shift2 = 0;
      for (const auto& a : over) {
        const std::size_t i = mesh.axis_index(a);
        parts *= static_cast<double>(ms[i]);
        shift2 += static_cast<double>(c[i]) - (static_cast<double>(ms[i]) - 1) / 2;
      }
      auto t0 = kdist::DistributedTensor<double**>::zeros(shape, layout);
      auto l = t0.local();
      kdist::test::edit_on_host(l, [&](const auto& h) {
        for (std::size_t i = 0; i < h.extent(0); ++i)
          for (std::size_t j = 0; j < h.extent(1); ++j)
            h(i, j) = full(i + t0.offsets()[0], j + t0.offsets()[1]) / parts + shift2;
      });
      return kdist::DistributedTensor<double**>::from_local(l, shape, layout, over);
    };
    kdist::RuntimeTensorLayout replicated({kdist::replicated, kdist::replicated}, mesh);
    auto q = pending(replicated, {"model"});
    expect_local_is_block(
        kdist::redistribute(q, kdist::RuntimeTensorLayout({"model", kdist::replicated}, mesh)),
        "partial(model) -> (model, None)");
    expect_local_is_block(
        kdist::redistribute(q, kdist::RuntimeTensorLayout({kdist::replicated, "model"}, mesh)),
        "partial(model) -> (None, model)");
    auto both = pending(replicated, {"data", "model"});
    expect_local_is_block(
        kdist::redistribute(
            both, kdist::RuntimeTensorLayout({kdist::DimAxes({"model", "data"}), kdist::replicated},
                                             mesh)),
        "partial(data, model) -> ((model, data), None)");
    expect_local_is_block(
        kdist::redistribute(
            both, kdist::RuntimeTensorLayout({kdist::replicated, kdist::DimAxes({"data", "model"})},
                                             mesh)),
        "partial(data, model) -> (None, (data, model))");
    expect_whole(kdist::full_tensor(both), shape[0], shape[1], "partial(data, model) full");
  }
}

TEST(DistributedTensor, VisualizeSharding) {
  const auto n = static_cast<std::size_t>(world());
  if (n != 4) GTEST_SKIP() << "picture checked on 4 processes";
  kdist::RuntimeDeviceMesh mesh({2, 2}, {"data", "model"}, kdist::detail::numbered_devices(4));
  auto t = kdist::DistributedTensor<float**>::zeros(
      {8, 4}, kdist::RuntimeTensorLayout({"data", kdist::replicated}, mesh));
  const std::string pic = kdist::visualize_sharding(t);
  EXPECT_EQ(pic,
            "shape=(8, 4) layout=('data', None)\n"
            "┌────────────┐\n"
            "│ device:0,1 │\n"
            "├────────────┤\n"
            "│ device:2,3 │\n"
            "└────────────┘\n");
  auto u = kdist::DistributedTensor<float**>::zeros(
      {8, 4}, kdist::RuntimeTensorLayout({"data", "model"}, mesh));
  EXPECT_NE(kdist::visualize_sharding(u).find("│ device:0 │ device:1 │"), std::string::npos)
      << kdist::visualize_sharding(u);
}

TEST(DistributedTensor, ErrorsAreRaisedOnEveryRank) {
  const auto n = static_cast<std::size_t>(world());
  kdist::RuntimeDeviceMesh wrong({n + 1}, {"data"}, n + 1);
  kdist::RuntimeDeviceMesh mesh({n}, {"data"}, n);
  // mesh of another size than the world
  EXPECT_THROW(
      (kdist::DistributedTensor<float*>::zeros({4}, kdist::RuntimeTensorLayout({"data"}, wrong))),
      kdist::ValueError);
  // rank mismatch
  EXPECT_THROW((kdist::DistributedTensor<float*>::zeros(
                   {4}, kdist::RuntimeTensorLayout({"data", kdist::replicated}, mesh))),
               kdist::ValueError);
  // layout without mesh
  EXPECT_THROW((kdist::DistributedTensor<float*>::zeros({4}, kdist::RuntimeTensorLayout({"data"}))),
               kdist::ValueError);
  // even division demanded
  if (n > 1) {
    try {
      (void)kdist::DistributedTensor<float*>::zeros(
          {n + 1}, kdist::RuntimeTensorLayout({"data"}, mesh, kdist::Division::even));
      ADD_FAILURE() << "expected a ValueError";
    } catch (const kdist::ValueError& e) {
      EXPECT_NE(std::string(e.what()).find("cannot divide evenly"), std::string::npos) << e.what();
    }
  }
  // redistribute to a layout on another mesh
  auto t = kdist::DistributedTensor<float*>::zeros({4}, kdist::RuntimeTensorLayout({"data"}, mesh));
  kdist::RuntimeDeviceMesh other({n}, {"batch"}, n);
  EXPECT_THROW((void)kdist::redistribute(t, kdist::RuntimeTensorLayout({"batch"}, other)),
               kdist::ValueError);
  // from_local with wrong extents
  Kokkos::View<float*, Kokkos::LayoutRight> bad("bad", 99);
  EXPECT_THROW((void)kdist::DistributedTensor<float*>::from_local(
                   bad, {4}, kdist::RuntimeTensorLayout({"data"}, mesh)),
               kdist::ValueError);
  // unknown partial axis
  Kokkos::View<float*, Kokkos::LayoutRight> ok("ok", t.local().extent(0));
  EXPECT_THROW((void)kdist::DistributedTensor<float*>::from_local(
                   ok, {4}, kdist::RuntimeTensorLayout({"data"}, mesh), {"modle"}),
               kdist::ValueError);
  // root out of range
  EXPECT_THROW((void)kdist::distribute_tensor_from_root<float*>(
                   nullptr, {4}, kdist::RuntimeTensorLayout({"data"}, mesh), static_cast<int>(n)),
               kdist::ValueError);
  // the world is still in step: one more collective completes
  int one = 1, sum = 0;
  MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  EXPECT_EQ(sum, static_cast<int>(n));
}

TEST(DistributedTensor, StaticLayoutAndHigherRanks) {
  const auto n = static_cast<std::size_t>(world());
  using Mesh = kdist::DeviceMesh<kdist::axis<"data">, kdist::axis<"model", 1>>;
  Mesh mesh(n);
  kdist::TensorLayout<Mesh, "data", kdist::replicated, kdist::replicated> layout(mesh);
  auto t = kdist::distribute_tensor<int***>(
      [](std::size_t i, std::size_t j, std::size_t k) {
        return static_cast<int>(i * 100 + j * 10 + k);
      },
      {5, 3, 2}, layout);
  auto f = kdist::full_tensor(t);
  for (std::size_t i = 0; i < 5; ++i)
    for (std::size_t j = 0; j < 3; ++j)
      for (std::size_t k = 0; k < 2; ++k)
        ASSERT_EQ(f(i, j, k), static_cast<int>(i * 100 + j * 10 + k));
  auto r4 = kdist::distribute_tensor<float****>(
      [](std::size_t a, std::size_t b, std::size_t c, std::size_t d) {
        return float(a + b + c + d);
      },
      {3, 2, 2, 2},
      kdist::RuntimeTensorLayout({"data", kdist::replicated, kdist::replicated, kdist::replicated},
                                 Mesh(n).to_runtime()));
  auto f4 = kdist::full_tensor(r4);
  EXPECT_EQ(f4(2, 1, 1, 1), 5.0f);
}
