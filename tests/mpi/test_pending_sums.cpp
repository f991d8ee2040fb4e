// kdist-mpi-ranks: 1 2 4
// Pending sums cannot be used as values by mistake (issue 10): the local block of a partial
// tensor is reachable only as `local_summand()`, and `kdist::apply_gradient` refuses a gradient
// that is a pending sum or laid out unlike its variable, on every process alike. The case the
// issue measured: a data-parallel kernel gradient (x^T dy over a batch sharded on "data") stepped
// without its all-reduce used to let the replicas drift apart silently.
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
#include <vector>

namespace {

using kdist_test::expect_value_error;
using kdist_test::matrix_a;
using kdist_test::matrix_b;
using kdist_test::matrix_c;
using kdist_test::world;

using Matrix = kdist::DistributedTensor<double**>;

// A data-parallel step of y = x W on a batch of 8 rows sharded over "data": x, dy row-sharded,
// W replicated. dW = x^T dy is a pending sum over "data" when the data axis has several devices.
struct DataParallelStep {
  kdist::RuntimeDeviceMesh mesh{{world(), 1}, {"data", "model"}, world()};
  kdist::RuntimeTensorLayout rows{{"data", kdist::replicated}, mesh};
  kdist::RuntimeTensorLayout replicated{{kdist::replicated, kdist::replicated}, mesh};
  Matrix x = kdist::distribute_tensor<double**>(matrix_a, {8, 4}, rows);
  Matrix dy = kdist::distribute_tensor<double**>(matrix_b, {8, 3}, rows);
  Matrix w = kdist::distribute_tensor<double**>(matrix_c, {4, 3}, replicated);
  Matrix dw = kdist::matmul(x, dy, kdist::ops::Op::transpose, kdist::ops::Op::none);
};

TEST(PendingSums, LocalOfAPendingSumIsAnErrorNamingTheAxes) {
  DataParallelStep s;
  ASSERT_EQ(s.dw.is_partial(), world() > 1);
  if (!s.dw.is_partial()) {
    EXPECT_EQ(s.dw.local().data(), s.dw.local_summand().data());  // complete: both are the values
    return;
  }
  expect_value_error(
      [&] { (void)s.dw.local(); },
      {"kdist::DistributedTensor::local: <DistributedTensor shape=(4, 3)",
       "is a pending sum over ['data']", "kdist::redistribute(t, t.layout())", "local_summand()"});
  const Matrix& as_const = s.dw;
  expect_value_error([&] { (void)as_const.local(); }, {"is a pending sum over ['data']"});
  EXPECT_EQ(s.dw.local_summand().extent(0), 4u);
  // Resolving the sum gives a tensor whose values are readable again.
  auto summed = kdist::redistribute(s.dw, s.dw.layout());
  EXPECT_FALSE(summed.is_partial());
  EXPECT_EQ(summed.local().extent(0), 4u);
}

TEST(PendingSums, ApplyGradientRefusesAPendingSumAndLeavesTheVariable) {
  DataParallelStep s;
  const kdist::SGD sgd(0.5);
  if (world() > 1) {
    expect_value_error([&] { kdist::apply_gradient(sgd, s.w, s.dw); },
                       {"kdist::apply_gradient: the gradient <DistributedTensor shape=(4, 3)",
                        "is a pending sum over ['data']", "drift apart",
                        "kdist::redistribute(gradient, variable.layout())"});
    auto w = kdist::full_tensor(s.w);
    for (std::size_t i = 0; i < 4; ++i)
      for (std::size_t j = 0; j < 3; ++j) ASSERT_EQ(w(i, j), matrix_c(i, j)) << "changed at " << i;
  }
  // Summed, the step is the single-device step on the whole batch, identical on every replica.
  kdist::apply_gradient(sgd, s.w, kdist::redistribute(s.dw, s.w.layout()));
  auto w = kdist::full_tensor(s.w);
  for (std::size_t i = 0; i < 4; ++i) {
    for (std::size_t j = 0; j < 3; ++j) {
      double g = 0;
      for (std::size_t r = 0; r < 8; ++r) g += matrix_a(r, i) * matrix_b(r, j);
      ASSERT_NEAR(w(i, j), matrix_c(i, j) - 0.5 * g, 1e-12) << i << "," << j;
      double lo = w(i, j), hi = w(i, j);  // every replica holds the same value, bit for bit
      MPI_Allreduce(MPI_IN_PLACE, &lo, 1, MPI_DOUBLE, MPI_MIN, MPI_COMM_WORLD);
      MPI_Allreduce(MPI_IN_PLACE, &hi, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
      ASSERT_EQ(lo, hi);
    }
  }
}

TEST(PendingSums, ApplyGradientChecksShapeAndLayout) {
  DataParallelStep s;
  const kdist::SGD sgd(0.1);
  auto g = kdist::redistribute(s.dw, s.w.layout());
  // another layout: the blocks would not match (only visible with several devices)
  if (world() > 1) {
    auto sharded = kdist::redistribute(g, s.rows);
    expect_value_error([&] { kdist::apply_gradient(sgd, s.w, sharded); },
                       {"is laid out otherwise than the variable",
                        "kdist::redistribute(gradient, variable.layout())"});
  }
  // another shape
  auto other = kdist::distribute_tensor<double**>(matrix_c, {3, 4}, s.replicated);
  expect_value_error([&] { kdist::apply_gradient(sgd, s.w, other); },
                     {"the gradient <DistributedTensor shape=(3, 4)",
                      "does not have the shape of the variable <DistributedTensor shape=(4, 3)"});
  // the optimizer's own checks still apply: SGD with momentum needs its velocity
  const kdist::SGD momentum(0.1, 0.9);
  expect_value_error([&] { kdist::apply_gradient(momentum, s.w, g); },
                     {"this SGD has momentum 0.900000; pass a velocity View"});
}

TEST(PendingSums, ApplyGradientWithAdamIsTheLocalUpdate) {
  DataParallelStep s;
  const kdist::Adam adam(0.01);
  auto g = kdist::redistribute(s.dw, s.w.layout());
  auto m = kdist::make_slot(s.w.local(), "m");
  auto v = kdist::make_slot(s.w.local(), "v");
  // the same step on plain Views
  auto w2 = kdist::distribute_tensor<double**>(matrix_c, {4, 3}, s.replicated);
  auto m2 = kdist::make_slot(w2.local(), "m2");
  auto v2 = kdist::make_slot(w2.local(), "v2");
  for (int step = 0; step < 3; ++step) {
    kdist::apply_gradient(adam, s.w, g, m, v);
    adam.update(w2.local(), g.local(), m2, v2);
  }
  auto a = kdist::full_tensor(s.w);
  auto b = kdist::full_tensor(w2);
  for (std::size_t i = 0; i < 4; ++i)
    for (std::size_t j = 0; j < 3; ++j) ASSERT_EQ(a(i, j), b(i, j));
}

}  // namespace
