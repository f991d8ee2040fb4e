// kdist-mpi-ranks: 1 2 4
// Distributed matmul: every pair of layouts of A and B (and transposes) on every mesh of the
// world's size equals the serial product; the pending sum appears exactly when the contraction
// is sharded.
#include <gtest/gtest.h>
#include <mpi.h>

#include <kdist/tensor/matmul.hpp>

#include <vector>

namespace {
int world() {
  int s = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &s);
  return s;
}
std::vector<std::vector<kdist::DimAxes>> layouts() {
  using kdist::DimAxes;
  const DimAxes none, data("data"), model("model");
  return {{none, none},  {data, none},  {model, none}, {none, data},
          {none, model}, {data, model}, {model, data}};
}
double a_at(std::size_t i, std::size_t j) {
  return double(i) * 0.5 - double(j) + 1.0;
}
double b_at(std::size_t i, std::size_t j) {
  return double(i + 2 * j % 3) * 0.25;
}
}  // namespace

TEST(DistributedMatmul, EveryLayoutPairMatchesSerial) {
  const auto n = static_cast<std::size_t>(world());
  std::vector<std::vector<std::size_t>> shapes = {{1, n}, {n, 1}};
  if (n == 4) shapes.push_back({2, 2});
  const std::size_t M = 6, K = 5, N = 7;
  for (const auto& ms : shapes) {
    kdist::RuntimeDeviceMesh mesh(ms, {"data", "model"}, n);
    for (int ta = 0; ta < 2; ++ta) {
      for (int tb = 0; tb < 2; ++tb) {
        const auto op_a = ta ? kdist::ops::Op::transpose : kdist::ops::Op::none;
        const auto op_b = tb ? kdist::ops::Op::transpose : kdist::ops::Op::none;
        std::array<std::size_t, 2> sa =
            ta ? std::array<std::size_t, 2>{K, M} : std::array<std::size_t, 2>{M, K};
        std::array<std::size_t, 2> sb =
            tb ? std::array<std::size_t, 2>{N, K} : std::array<std::size_t, 2>{K, N};
        for (const auto& la : layouts()) {
          auto A = kdist::distribute_tensor<double**>(
              [ta](std::size_t i, std::size_t j) { return ta ? a_at(j, i) : a_at(i, j); }, sa,
              kdist::RuntimeTensorLayout(la, mesh));
          for (const auto& lb : layouts()) {
            auto B = kdist::distribute_tensor<double**>(
                [tb](std::size_t i, std::size_t j) { return tb ? b_at(j, i) : b_at(i, j); }, sb,
                kdist::RuntimeTensorLayout(lb, mesh));
            auto C = kdist::matmul(A, B, op_a, op_b);
            auto full = kdist::full_tensor(C);
            const std::string what = mesh.to_string() + " A" + A.layout().axes_repr() +
                                     (ta ? "^T" : "") + " B" + B.layout().axes_repr() +
                                     (tb ? "^T" : "");
            ASSERT_EQ(full.extent(0), M) << what;
            ASSERT_EQ(full.extent(1), N) << what;
            for (std::size_t i = 0; i < M; ++i)
              for (std::size_t j = 0; j < N; ++j) {
                double ref = 0;
                for (std::size_t k = 0; k < K; ++k) ref += a_at(i, k) * b_at(k, j);
                ASSERT_NEAR(full(i, j), ref, 1e-12) << what << " at " << i << "," << j;
              }
          }
        }
      }
    }
  }
}

TEST(DistributedMatmul, ColumnAndRowParallelCommunicateAsMegatron) {
  const auto n = static_cast<std::size_t>(world());
  kdist::RuntimeDeviceMesh mesh({1, n}, {"data", "model"}, n);
  auto x = kdist::distribute_tensor<double**>(
      [](std::size_t i, std::size_t j) { return a_at(i, j); }, {4, 6},
      kdist::RuntimeTensorLayout({"data", kdist::replicated}, mesh));
  auto w1 = kdist::distribute_tensor<double**>(
      [](std::size_t i, std::size_t j) { return b_at(i, j); }, {6, 8},
      kdist::RuntimeTensorLayout({kdist::replicated, "model"}, mesh));
  auto h = kdist::matmul(x, w1);  // column-parallel: no pending sum, columns on "model"
  EXPECT_FALSE(h.is_partial());
  EXPECT_EQ(h.layout().axes_repr(), "('data', 'model')");
  auto w2 = kdist::distribute_tensor<double**>(
      [](std::size_t i, std::size_t j) { return b_at(j, i); }, {8, 3},
      kdist::RuntimeTensorLayout({kdist::replicated, kdist::replicated}, mesh));
  auto y = kdist::matmul(h, w2);  // row-parallel: pending sum over "model"
  EXPECT_EQ(y.is_partial(), n > 1);
  EXPECT_EQ(y.layout().axes_repr(), "('data', None)");
  auto bad = kdist::distribute_tensor<double**>(
      [](std::size_t, std::size_t) { return 0.0; }, {5, 3},
      kdist::RuntimeTensorLayout({kdist::replicated, kdist::replicated}, mesh));
  EXPECT_THROW((void)kdist::matmul(h, bad), kdist::ValueError);
}
