// kdist-mpi-ranks: 1 2 4
// Typed tensors (issue 10): DistributedTensor<DataType, Layout> with a static TensorLayout carries
// the mesh type, the sharding and the pending-sum state in its type; distribute_tensor,
// matmul and redistribute on typed arguments return typed results whose values are those of the
// run-time path, and the conversions go to the run-time side freely and back only when checked.
// Static extents in the data type (float[8][6], float*[6]) give static extents to the local block
// where every device's block has the same extent.
// The compile errors are in tests/compile_fail/typed_tensor_*.cpp.
#include <gtest/gtest.h>
#include <mpi.h>

#include <kdist/nn/apply_gradient.hpp>
#include <kdist/ops/optimizers.hpp>
#include <kdist/tensor/distribute_tensor.hpp>
#include <kdist/tensor/matmul.hpp>
#include <kdist/tensor/redistribute.hpp>
#include <kdist/tensor/tensor.hpp>

#include "tensor_test_support.hpp"

#include <cmath>
#include <string>
#include <type_traits>
#include <vector>

namespace {

using kdist_test::expect_value_error;
using kdist_test::matrix_a;
using kdist_test::matrix_b;
using kdist_test::matrix_c;
using kdist_test::world;

using Mesh = kdist::DeviceMesh<kdist::axis<"data">, kdist::axis<"model">>;
// Layouts are spelled kdist::TensorLayout<Mesh, ...> in full: nvcc's front end cannot hand an
// alias template over DimSpecs (`template <DimSpec... D> using Layout = ...`), named as a
// template argument, to the host compiler (Kokkos CUDA builds compile this file).
template <class L>
using Matrix = kdist::DistributedTensor<double**, L>;
using kdist::replicated;

// (1, 1), (1, 2), (2, 2): every axis sharded somewhere in the runs of this test.
Mesh make_mesh() {
  const std::size_t n = world();
  const std::size_t model = n >= 2 ? 2 : 1;
  return Mesh({n / model, model}, n);
}

// Megatron's MLP block, y = (x W1) W2: column parallel (W1 sharded on its columns), then row
// parallel (W2 on its rows): the second product is a pending sum over 'model', in its type.
TEST(TypedTensor, MegatronBlockCarriesItsLayoutsAndThePendingSumInItsType) {
  const Mesh mesh = make_mesh();
  auto x = kdist::distribute_tensor<double**>(matrix_a, {8, 6},
                                              kdist::TensorLayout<Mesh, "data", replicated>(mesh));
  auto w1 = kdist::distribute_tensor<double**>(
      matrix_b, {6, 10}, kdist::TensorLayout<Mesh, replicated, "model">(mesh));
  auto w2 = kdist::distribute_tensor<double**>(
      matrix_c, {10, 4}, kdist::TensorLayout<Mesh, "model", replicated>(mesh));
  static_assert(std::is_same_v<decltype(x), Matrix<kdist::TensorLayout<Mesh, "data", replicated>>>);

  auto h = kdist::matmul(x, w1);
  static_assert(std::is_same_v<decltype(h), Matrix<kdist::TensorLayout<Mesh, "data", "model">>>);
  static_assert(!decltype(h)::is_pending_sum);
  EXPECT_FALSE(h.is_partial());

  auto y = kdist::matmul(h, w2);
  using Partial = kdist::PendingSum<kdist::TensorLayout<Mesh, "data", replicated>, "model">;
  static_assert(std::is_same_v<decltype(y), Matrix<Partial>>);
  static_assert(decltype(y)::is_pending_sum);
  EXPECT_EQ(y.is_partial(), mesh.extent(1) > 1);  // a sum over one device is complete at run time
  EXPECT_EQ(y.local_summand().extent(1), 4u);

  auto summed = kdist::redistribute(y, y.layout());
  static_assert(
      std::is_same_v<decltype(summed), Matrix<kdist::TensorLayout<Mesh, "data", replicated>>>);
  EXPECT_FALSE(summed.is_partial());
  auto full = kdist::full_tensor(summed);
  for (std::size_t i = 0; i < 8; ++i) {
    for (std::size_t j = 0; j < 4; ++j) {
      double want = 0;
      for (std::size_t k = 0; k < 10; ++k) {
        double hk = 0;
        for (std::size_t d = 0; d < 6; ++d) hk += matrix_a(i, d) * matrix_b(d, k);
        want += hk * matrix_c(k, j);
      }
      ASSERT_NEAR(full(i, j), want, 1e-12) << i << "," << j;
    }
  }
  // the same values as the run-time path, block for block
  auto runtime_y = kdist::matmul(kdist::matmul(x.runtime(), w1.runtime()), w2.runtime());
  static_assert(std::is_same_v<decltype(runtime_y), kdist::DistributedTensor<double**>>);
  auto runtime_full = kdist::full_tensor(runtime_y);
  for (std::size_t i = 0; i < 8; ++i)
    for (std::size_t j = 0; j < 4; ++j) ASSERT_EQ(runtime_full(i, j), full(i, j));
}

// The data-parallel kernel gradient x^T dy is a pending sum over 'data'; summed, it steps the
// variable, and the step is the same on every replica.
TEST(TypedTensor, DataParallelGradientIsSummedBeforeTheStep) {
  const Mesh mesh = make_mesh();
  const kdist::TensorLayout<Mesh, "data", replicated> rows(mesh);
  const kdist::TensorLayout<Mesh, replicated, replicated> whole(mesh);
  auto x = kdist::distribute_tensor<double**>(matrix_a, {8, 4}, rows);
  auto dy = kdist::distribute_tensor<double**>(matrix_b, {8, 3}, rows);
  auto w = kdist::distribute_tensor<double**>(matrix_c, {4, 3}, whole);
  auto dw = kdist::matmul<kdist::ops::Op::transpose>(x, dy);
  static_assert(
      std::is_same_v<
          decltype(dw),
          Matrix<kdist::PendingSum<kdist::TensorLayout<Mesh, replicated, replicated>, "data">>>);
  const kdist::SGD sgd(0.5);
  kdist::apply_gradient(sgd, w, kdist::redistribute(dw, w.layout()));
  auto got = kdist::full_tensor(w);
  for (std::size_t i = 0; i < 4; ++i) {
    for (std::size_t j = 0; j < 3; ++j) {
      double g = 0;
      for (std::size_t r = 0; r < 8; ++r) g += matrix_a(r, i) * matrix_b(r, j);
      ASSERT_NEAR(got(i, j), matrix_c(i, j) - 0.5 * g, 1e-12);
      double lo = got(i, j), hi = got(i, j);
      MPI_Allreduce(MPI_IN_PLACE, &lo, 1, MPI_DOUBLE, MPI_MIN, MPI_COMM_WORLD);
      MPI_Allreduce(MPI_IN_PLACE, &hi, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
      ASSERT_EQ(lo, hi);
    }
  }
}

// Typed to run-time is free (the base class); run-time to typed is explicit and checked.
TEST(TypedTensor, ConvertsToTheRunTimeTensorAndBackOnlyWhenChecked) {
  const Mesh mesh = make_mesh();
  const kdist::TensorLayout<Mesh, "data", replicated> rows(mesh);
  const kdist::TensorLayout<Mesh, replicated, "model"> cols(mesh);
  auto x = kdist::distribute_tensor<double**>(matrix_a, {8, 4}, rows);
  kdist::DistributedTensor<double**> erased = x;  // toward the dynamic side: implicit
  EXPECT_EQ(erased.layout(), rows.to_runtime());
  static_assert(!std::is_convertible_v<kdist::DistributedTensor<double**>,
                                       Matrix<kdist::TensorLayout<Mesh, "data", replicated>>>);
  Matrix<kdist::TensorLayout<Mesh, "data", replicated>> back(
      erased, rows);                                 // explicit, checked: the same layout
  EXPECT_EQ(back.local().data(), x.local().data());  // shares the block

  if (world() > 1) {  // on one device every layout is the same layout
    expect_value_error(
        [&] { Matrix<kdist::TensorLayout<Mesh, replicated, "model">> wrong(erased, cols); },
        {"kdist::DistributedTensor<..., <TensorLayout axes=(None, 'model')", "has another layout",
         "kdist::redistribute it to that layout first"});
  }
  // a pending sum must be one in the type, and the other way round
  auto dw = kdist::matmul<kdist::ops::Op::transpose>(x, x);  // pending over 'data'
  if (mesh.extent(0) > 1) {
    const kdist::TensorLayout<Mesh, replicated, replicated> whole(mesh);
    expect_value_error(
        [&] {
          Matrix<kdist::TensorLayout<Mesh, replicated, replicated>> wrong(dw.runtime(), whole);
        },
        {"is a pending sum over ['data'], the type says over []"});
  }
  // functions of run-time tensors take typed ones and give run-time results
  auto moved = kdist::redistribute(x, cols.to_runtime());
  static_assert(std::is_same_v<decltype(moved), kdist::DistributedTensor<double**>>);
  EXPECT_EQ(moved.layout(), cols.to_runtime());
}

TEST(TypedTensor, FactoriesAndFromLocal) {
  const Mesh mesh = make_mesh();
  const kdist::TensorLayout<Mesh, "data", "model"> both(mesh);
  auto z = Matrix<kdist::TensorLayout<Mesh, "data", "model">>::zeros({6, 5}, both);
  auto host = kdist::full_tensor(z);
  for (std::size_t i = 0; i < 6; ++i)
    for (std::size_t j = 0; j < 5; ++j) ASSERT_EQ(host(i, j), 0.0);
  using Summand = Matrix<kdist::PendingSum<kdist::TensorLayout<Mesh, "data", replicated>, "model">>;
  auto ones = Kokkos::View<double**, Kokkos::LayoutRight>(
      "ones",
      kdist::TensorLayout<Mesh, "data", replicated>(mesh).local_extents<2>({4, 3}, z.device())[0],
      3);
  Kokkos::deep_copy(ones, 1.0);
  auto s = Summand::from_local(ones, {4, 3}, kdist::TensorLayout<Mesh, "data", replicated>(mesh));
  auto total = kdist::full_tensor(kdist::redistribute(s, s.layout()));
  EXPECT_EQ(total(3, 2), double(mesh.extent(1)));  // one 1 from each process along 'model'
  expect_value_error([] { (void)Matrix<kdist::TensorLayout<Mesh, "data", "model">>().layout(); },
                     {"kdist::DistributedTensor::layout: the tensor is empty"});
}

// ---- static extents -------------------------------------------------------------------------

// 'model' static (2), 'data' run-time: the columns of a sharded kernel have a static local extent.
using StaticModelMesh = kdist::DeviceMesh<kdist::axis<"data">, kdist::axis<"model", 2>>;

TEST(TypedTensorStaticExtents, LocalBlocksHaveTheExtentsTheTypeDetermines) {
  if (world() % 2 != 0) GTEST_SKIP() << "the mesh has a static 'model' axis of 2";
  const StaticModelMesh mesh(world());
  const kdist::TensorLayout<StaticModelMesh, replicated, "model"> kernel(mesh);
  const kdist::TensorLayout<StaticModelMesh, "data", replicated> rows(mesh);

  // W: (6, 10) with its columns over 'model' of 2: every block is (6, 5), known to the compiler.
  auto w = kdist::distribute_tensor<double[6][10]>(matrix_b, kernel);
  using W = decltype(w);
  static_assert(
      std::is_same_v<
          W, kdist::DistributedTensor<double[6][10],
                                      kdist::TensorLayout<StaticModelMesh, replicated, "model">>>);
  static_assert(std::is_same_v<W::view_type::data_type, double[6][5]>);
  static_assert(std::is_same_v<W::runtime_type, kdist::DistributedTensor<double**>>);
  static_assert(W::static_extent(1) == 10 && W::static_local_extent(1) == 5);
  const auto wl = w.local();
  EXPECT_EQ(wl.extent(1), 5u);
  EXPECT_EQ(wl.data(), w.runtime().local().data());  // the same block, not a copy
  const auto wh = kdist_test::local_on_host(w);
  for (std::size_t i = 0; i < 6; ++i)
    for (std::size_t j = 0; j < 5; ++j) ASSERT_EQ(wh(i, j), matrix_b(i, w.offsets()[1] + j));

  // X: a run-time batch of 6 features; rows over the run-time 'data' axis stay run-time.
  auto x = kdist::distribute_tensor<double* [6]>(matrix_a, {8, 6}, rows);
  static_assert(std::is_same_v<decltype(x)::view_type::data_type, double* [6]>);
  static_assert(decltype(x)::static_local_extent(0) == kdist::dynamic_extent);

  // The product keeps what both operands know: (?, 10), columns (?, 5) per block.
  auto y = kdist::matmul(x, w);
  static_assert(std::is_same_v<decltype(y)::data_type, double* [10]>);
  static_assert(std::is_same_v<decltype(y)::view_type::data_type, double* [5]>);
  auto want = kdist::full_tensor(kdist::matmul(x.runtime(), w.runtime()));
  auto got = kdist::full_tensor(y);
  for (std::size_t i = 0; i < 8; ++i)
    for (std::size_t j = 0; j < 10; ++j) ASSERT_EQ(got(i, j), want(i, j));

  // dW = X^T dY is (6, 10), static, pending over 'data'; summed, it steps the static W.
  auto dw = kdist::matmul<kdist::ops::Op::transpose>(x, y);
  static_assert(std::is_same_v<decltype(dw)::data_type, double[6][10]>);
  static_assert(decltype(dw)::is_pending_sum);
  const kdist::SGD sgd(0.25);
  const auto before = kdist::full_tensor(w);
  const auto grad = kdist::full_tensor(kdist::redistribute(dw, w.layout()));
  kdist::apply_gradient(sgd, w, kdist::redistribute(dw, w.layout()));
  const auto after = kdist::full_tensor(w);
  for (std::size_t i = 0; i < 6; ++i)
    for (std::size_t j = 0; j < 10; ++j)
      ASSERT_DOUBLE_EQ(after(i, j), before(i, j) - 0.25 * grad(i, j));
}

TEST(TypedTensorStaticExtents, UnevenBlocksKeepARunTimeExtent) {
  const Mesh mesh = make_mesh();
  // 7 rows over the run-time 'data' axis; 6 replicated columns stay static.
  auto t = kdist::distribute_tensor<double[7][6]>(
      matrix_a, kdist::TensorLayout<Mesh, "data", replicated>(mesh));
  static_assert(std::is_same_v<decltype(t)::view_type::data_type, double* [6]>);
  EXPECT_EQ(t.local().extent(0), t.local_extents()[0]);
  EXPECT_EQ(t.local().extent(1), 6u);
  // 7 columns over a static 'model' of 2: blocks of 4 and 3, so the extent is run-time.
  static_assert(
      std::is_same_v<kdist::DistributedTensor<double[6][7],
                                              kdist::TensorLayout<StaticModelMesh, replicated,
                                                                  "model">>::view_type::data_type,
                     double**>);
}

TEST(TypedTensorStaticExtents, AShapeWithoutTheStaticExtentsIsAValueError) {
  const Mesh mesh = make_mesh();
  const kdist::TensorLayout<Mesh, "data", replicated> rows(mesh);
  using Static =
      kdist::DistributedTensor<double[8][6], kdist::TensorLayout<Mesh, "data", replicated>>;
  const std::vector<std::string> parts = {
      "shape (8, 5) differs from the type's static shape (8, 6)", "in dimension 1",
      "make that extent run-time (*)"};
  expect_value_error(
      [&] {
        (void)kdist::distribute_tensor<double[8][6]>(matrix_a, {8, 5}, rows);
      },
      parts);
  expect_value_error([&] { (void)Static::zeros({8, 5}, rows); }, parts);
  auto erased = kdist::distribute_tensor<double**>(matrix_a, {8, 5}, rows.to_runtime());
  expect_value_error([&] { Static wrong(erased, rows); }, parts);
  expect_value_error(
      [&] {
        (void)kdist::DistributedTensor<double* [6], kdist::TensorLayout<Mesh, "data", replicated>>::
            from_local(
                Kokkos::View<double* [6], Kokkos::LayoutRight>("b", 1), { 8, 7 }, rows);
      },
      {"shape (8, 7) differs from the type's static shape (?, 6) in dimension 1"});
  // a block of the wrong extents: a ValueError (from the run-time check), not Kokkos' abort of a
  // conversion to static extents
  expect_value_error(
      [&] {
        (void)kdist::DistributedTensor<double* [6], kdist::TensorLayout<Mesh, "data", replicated>>::
            from_local(Kokkos::View<double**, Kokkos::LayoutRight>("b", 1, 5), {8, 6}, rows);
      },
      {"kdist::DistributedTensor::from_local: local block extent"});
  // the right shape, given or not, makes the same tensor
  auto given = kdist::distribute_tensor<double[8][6]>(matrix_a, {8, 6}, rows);
  auto implied = kdist::distribute_tensor<double[8][6]>(matrix_a, rows);
  EXPECT_EQ(kdist::full_tensor(given)(7, 5), kdist::full_tensor(implied)(7, 5));
  EXPECT_EQ(Static::zeros(rows).shape(), (std::array<std::size_t, 2>{8, 6}));
  // an empty typed tensor has an empty block (its extents 0 do not convert to static ones)
  EXPECT_EQ(Static().local().data(), nullptr);
}

}  // namespace
