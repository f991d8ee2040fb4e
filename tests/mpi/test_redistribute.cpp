// kdist-mpi-ranks: 1 2 4
// kdist/tensor/redistribute.hpp: the plan a tensor's redistribution runs
// (kdist::plan_redistribute(t, target), for run-time and typed tensors and targets), and the
// reduce-scatter step through kdist's checked collective, over blocks the shards divide evenly and
// unevenly, along dimension 0 (straight from the summand) and 1 (packed), and every step into a
// call site's kept Views (kdist::ReusableViews). The plans themselves are tested without MPI in
// tests/test_redistribute_plan.cpp.
#include <gtest/gtest.h>

#include <kdist/tensor/distribute_tensor.hpp>
#include <kdist/tensor/matmul.hpp>
#include <kdist/tensor/redistribute.hpp>
#include <kdist/tensor/reusable_views.hpp>
#include <kdist/tensor/tensor.hpp>

#include "count_allocations.hpp"
#include "tensor_test_support.hpp"

#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <type_traits>
#include <vector>

namespace {

using kdist_test::expect_value_error;
using kdist_test::matrix_a;
using kdist_test::matrix_c;
using kdist_test::world;
using Kind = kdist::RedistributeStep::Kind;
using Tensor = kdist::DistributedTensor<double**>;

Kind only_kind(const kdist::RedistributePlan& plan) {
  EXPECT_EQ(plan.steps.size(), 1u) << plan.to_string();
  return plan.steps.empty() ? Kind::nothing : plan.steps.front().kind;
}

TEST(Redistribute, ATensorsPlanIsTheLayoutsPlan) {
  const std::size_t n = world();
  kdist::RuntimeDeviceMesh mesh({n}, {"x"}, n);
  kdist::RuntimeTensorLayout rows({"x", kdist::replicated}, mesh);
  kdist::RuntimeTensorLayout whole({kdist::replicated, kdist::replicated}, mesh);
  auto t = kdist::distribute_tensor<double**>(matrix_a, {8, 6}, rows);
  // One device holds every block already: the layouts differ, the blocks do not.
  EXPECT_EQ(only_kind(kdist::plan_redistribute(t, whole)),
            n > 1 ? Kind::all_gather : Kind::local_copy);
  EXPECT_EQ(kdist::plan_redistribute(t, whole).to_string(),
            n > 1 ? "<RedistributePlan ('x', None) -> (None, None): all_gather>"
                  : "<RedistributePlan ('x', None) -> (None, None): local_copy>");
  EXPECT_EQ(only_kind(kdist::plan_redistribute(t, rows)), Kind::nothing);
  // A target without a mesh takes the tensor's, as redistribute does.
  EXPECT_EQ(
      only_kind(kdist::plan_redistribute(t, kdist::RuntimeTensorLayout({kdist::replicated, "x"}))),
      n > 1 ? Kind::all_to_all : Kind::local_copy);
  kdist::RuntimeDeviceMesh other({n}, {"y"}, n);
  expect_value_error(
      [&] {
        (void)kdist::plan_redistribute(t,
                                       kdist::RuntimeTensorLayout({"y", kdist::replicated}, other));
      },
      {"kdist::redistribute", "another mesh"});
}

// Each device holds rank + 1 everywhere: the sum over "x" is n (n + 1) / 2.
void expect_reduce_scatter(const std::array<std::size_t, 2>& shape, std::size_t dim) {
  const std::size_t n = world();
  kdist::RuntimeDeviceMesh mesh({n}, {"x"}, n);
  kdist::RuntimeTensorLayout whole({kdist::replicated, kdist::replicated}, mesh);
  std::vector<kdist::DimAxes> axes(2);
  axes[dim] = kdist::DimAxes("x");
  kdist::RuntimeTensorLayout target(axes, mesh);
  Tensor::view_type mine("mine", shape[0], shape[1]);
  Kokkos::deep_copy(mine, double(kdist::process_id() + 1));
  auto pending = Tensor::from_local(mine, shape, whole, {"x"});
  const auto plan = kdist::plan_redistribute(pending, target);
  if (n > 1) {
    EXPECT_EQ(plan.steps.front(), (kdist::RedistributeStep{Kind::reduce_scatter, {"x"}, dim}))
        << plan.to_string();
  }
  auto out = kdist::redistribute(pending, target);
  EXPECT_FALSE(out.is_partial());
  const double want = double(n * (n + 1) / 2);
  auto local = kdist_test::local_on_host(out);
  for (std::size_t i = 0; i < local.extent(0); ++i) {
    for (std::size_t j = 0; j < local.extent(1); ++j) {
      ASSERT_EQ(local(i, j), want) << "shape (" << shape[0] << ", " << shape[1] << "), dim " << dim
                                   << ", at (" << i << ", " << j << ")";
    }
  }
  // Into an existing block, as a training step does.
  auto into = Tensor::zeros(shape, target);
  kdist::redistribute_into(pending, into);
  auto l2 = kdist_test::local_on_host(into);
  for (std::size_t i = 0; i < l2.extent(0); ++i) {
    for (std::size_t j = 0; j < l2.extent(1); ++j) ASSERT_EQ(l2(i, j), want);
  }
  // Into kept Views, twice: the same sums, the second time in the first call's View.
  kdist::ReusableViews<Tensor::view_type> views;
  const double* first = nullptr;
  for (int call = 0; call < 2; ++call) {
    auto kept = kdist::redistribute(pending, target, views);
    if (call == 0) first = kept.local().data();
    if (call == 1 && kept.local().size() > 0) {
      EXPECT_EQ(kept.local().data(), first);
    }
    auto l3 = kdist_test::local_on_host(kept);
    for (std::size_t i = 0; i < l3.extent(0); ++i) {
      for (std::size_t j = 0; j < l3.extent(1); ++j) ASSERT_EQ(l3(i, j), want);
    }
  }
}

TEST(Redistribute, ReduceScatterAlongEitherDimensionEvenAndUneven) {
  const std::size_t n = world();
  expect_reduce_scatter({4 * n, 3}, 0);      // even: straight from the summand
  expect_reduce_scatter({4 * n + 1, 3}, 0);  // uneven: packed, padded slots
  expect_reduce_scatter({3, 4 * n}, 1);      // even, packed
  expect_reduce_scatter({3, 4 * n + 1}, 1);  // uneven, packed
  expect_reduce_scatter({1, 2}, 0);          // blocks of no rows on some devices
}

// kdist::redistribute(t, target, views): every kind of step writes the values the allocating
// form writes, into a kept View once its shape is seen; a result still held is never written over
// (the next call takes the other slot); an unchanged layout shares t's block and keeps nothing.
TEST(Redistribute, IntoKeptViewsEveryKindOfStep) {
  const std::size_t n = world();
  kdist::RuntimeDeviceMesh mesh({n}, {"x"}, n);
  using kdist::replicated;
  const kdist::RuntimeTensorLayout rows({"x", replicated}, mesh), cols({replicated, "x"}, mesh),
      whole({replicated, replicated}, mesh);
  const auto t = kdist::distribute_tensor<double**>(matrix_a, {4 * n, 4 * n + 1}, rows);
  auto summand = Tensor::view_type("summand", 4 * n, 4 * n + 1);
  Kokkos::deep_copy(summand, 0.5);
  const auto pending = Tensor::from_local(summand, {4 * n, 4 * n + 1}, whole, {"x"});
  struct Case {
    const Tensor& from;
    kdist::RuntimeTensorLayout to;
  };
  for (const Case& c : {Case{t, whole}, Case{t, cols}, Case{pending, whole}, Case{pending, rows}}) {
    const auto plan = kdist::plan_redistribute(c.from, c.to);
    if (only_kind(plan) == Kind::nothing) continue;  // one process: nothing to move (below)
    const std::string what = plan.to_string();
    const auto want = kdist_test::local_on_host(kdist::redistribute(c.from, c.to));
    kdist::ReusableViews<Tensor::view_type> views;
    const auto first = kdist::redistribute(c.from, c.to, views);  // held: not written over
    auto second = kdist::redistribute(c.from, c.to, views);
    EXPECT_NE(second.local().data(), first.local().data()) << what;
    const double* slot = second.local().data();
    second = Tensor();  // released: the next call reuses its View
    Tensor third;
    {  // and allocates nothing: no View, no host copy (device blocks), no packing buffer grown
      const kdist::test::CountAllocations count;
      third = kdist::redistribute(c.from, c.to, views);
      EXPECT_EQ(count.seen(), "") << what;
    }
    EXPECT_EQ(third.local().data(), slot) << what;
    EXPECT_EQ(views.kept(), 2u) << what;
    for (const Tensor* got : std::initializer_list<const Tensor*>{&first, &third}) {
      const auto g = kdist_test::local_on_host(*got);
      ASSERT_EQ(g.extent(0), want.extent(0)) << what;
      ASSERT_EQ(g.extent(1), want.extent(1)) << what;
      for (std::size_t i = 0; i < g.extent(0); ++i) {
        for (std::size_t j = 0; j < g.extent(1); ++j) ASSERT_EQ(g(i, j), want(i, j)) << what;
      }
    }
  }
  kdist::ReusableViews<Tensor::view_type> views;
  EXPECT_EQ(kdist::redistribute(t, rows, views).local().data(), t.local().data());
  EXPECT_EQ(views.kept(), 0u);
}

// The exchange that a GPU-aware MPI gets (kdist::detail::DeviceMover: Kokkos kernels pack and
// place the boxes, the packed messages in device scratch, MPI handed the blocks' memory) moves
// what the host exchange moves, for every exchange step: copies, gathers, all-to-alls, pending
// sums resolved on the way, boxes that are contiguous runs and boxes that are not, ranks 1 to 3.
// Here it runs on the host's execution space (on a GPU build on the device's, with
// KDIST_MPI_GPU_AWARE=1); no byte is counted as staged on host memory.
template <class DataType>
void expect_device_exchange_as_host(const kdist::DistributedTensor<DataType>& from,
                                    const kdist::RuntimeTensorLayout& to, int& exchanges,
                                    int& summed) {
  using T = kdist::DistributedTensor<DataType>;
  const auto plan = kdist::plan_redistribute(from, to);
  const Kind kind = only_kind(plan);
  if (kind != Kind::local_copy && kind != Kind::all_gather && kind != Kind::all_to_all) return;
  ++exchanges;
  if (from.is_partial()) ++summed;
  const std::string what = plan.to_string();
  const auto want = kdist_test::local_on_host(kdist::redistribute(from, to));
  T out = T::zeros(from.shape(), to);
  const std::uint64_t staged = kdist::host_staged_bytes();
  kdist::detail::run_exchange_with(
      kdist::detail::DeviceMover<Kokkos::DefaultExecutionSpace>{Kokkos::DefaultExecutionSpace()},
      from, out);
  Kokkos::fence();
  if constexpr (std::is_same_v<typename T::memory_space, Kokkos::HostSpace>) {
    EXPECT_EQ(kdist::host_staged_bytes(), staged) << what;
  }
  const auto got = kdist_test::local_on_host(out);
  ASSERT_EQ(got.size(), want.size()) << what;
  for (std::size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(got.data()[i], want.data()[i]) << what << " at element " << i;
  }
}

TEST(Redistribute, TheDeviceExchangeMovesWhatTheHostExchangeMoves) {
  const std::size_t n = world();
  using kdist::replicated;
  int exchanges = 0, summed = 0;
  {  // rank 2 on a 1-D mesh: rows, columns, whole
    kdist::RuntimeDeviceMesh mesh({n}, {"x"}, n);
    const kdist::RuntimeTensorLayout rows({"x", replicated}, mesh), cols({replicated, "x"}, mesh),
        whole({replicated, replicated}, mesh);
    const std::array<std::size_t, 2> shape{3 * n + 1, 2 * n + 3};
    const auto by_rows = kdist::distribute_tensor<double**>(matrix_a, shape, rows);
    const auto by_cols = kdist::distribute_tensor<double**>(matrix_a, shape, cols);
    for (const auto& layout : {rows, cols, whole}) {
      expect_device_exchange_as_host(by_rows, layout, exchanges, summed);
      expect_device_exchange_as_host(by_cols, layout, exchanges, summed);
    }
  }
  if (n % 2 == 0) {  // rank 3 on a 2-D mesh, and a pending sum over one axis moving along the other
    const std::size_t a = n / 2;
    kdist::RuntimeDeviceMesh mesh({a, 2}, {"a", "b"}, n);
    using T3 = kdist::DistributedTensor<float***>;
    const std::array<std::size_t, 3> shape{2 * a + 1, 5, 3};
    const auto f = [](std::size_t i, std::size_t j, std::size_t k) {
      return static_cast<float>(100 * i + 10 * j + k);
    };
    const kdist::RuntimeTensorLayout l_a({"a", replicated, replicated}, mesh),
        l_ab({"a", "b", replicated}, mesh), l_b3({replicated, replicated, "b"}, mesh),
        l_none({replicated, replicated, replicated}, mesh);
    const auto t_a = kdist::distribute_tensor<float***>(f, shape, l_a);
    const auto t_ab = kdist::distribute_tensor<float***>(f, shape, l_ab);
    for (const auto& layout : {l_a, l_ab, l_b3, l_none}) {
      expect_device_exchange_as_host(t_a, layout, exchanges, summed);
      expect_device_exchange_as_host(t_ab, layout, exchanges, summed);
    }
    // pending over "b", sharded over "a": each of the two "b" processes holds half the value
    T3::view_type half("half", t_a.local().extent(0), shape[1], shape[2]);
    Kokkos::deep_copy(half, t_a.local());
    const auto pending = T3::from_local(half, shape, l_a, {"b"});
    for (const auto& layout : {l_ab, l_b3, l_none}) {
      expect_device_exchange_as_host(pending, layout, exchanges, summed);
    }
  }
  EXPECT_GT(exchanges, 0);
  if (n % 2 == 0) EXPECT_GT(summed, 0) << "no pending sum went through an exchange";
}

using Mesh = kdist::DeviceMesh<kdist::axis<"data">, kdist::axis<"model">>;
using kdist::replicated;

TEST(Redistribute, ATypedTensorsPlan) {
  const std::size_t n = world();
  const std::size_t model = n % 2 == 0 ? 2 : 1;  // an odd world: a (n, 1) mesh
  const Mesh mesh({n / model, model}, n);
  auto h = kdist::distribute_tensor<double**>(matrix_a, {8, 6},
                                              kdist::TensorLayout<Mesh, "data", "model">(mesh));
  auto w = kdist::distribute_tensor<double**>(matrix_c, {6, 4},
                                              kdist::TensorLayout<Mesh, "model", replicated>(mesh));
  auto y = kdist::matmul(h, w);  // row parallel: a pending sum over 'model' in its type
  // To a static target and to a run-time one.
  const auto plan = kdist::plan_redistribute(y, y.layout());
  const auto same = kdist::plan_redistribute(y, y.layout().to_runtime());
  EXPECT_EQ(plan.to_string(), same.to_string());
  if (model > 1) {
    EXPECT_EQ(plan.to_string(),
              "<RedistributePlan ('data', None) partial=['model'] -> ('data', None): "
              "all_reduce(sum) over ['model']>");
  } else {
    EXPECT_EQ(only_kind(plan), Kind::nothing);
  }
  // A complete typed tensor to a static layout.
  const auto gather =
      kdist::plan_redistribute(h, kdist::TensorLayout<Mesh, "data", replicated>(mesh));
  EXPECT_EQ(only_kind(gather), model > 1 ? Kind::all_gather : Kind::local_copy);
}

}  // namespace
