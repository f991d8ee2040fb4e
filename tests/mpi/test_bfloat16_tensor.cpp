// kdist-mpi-ranks: 1 2 4
// kdist::bfloat16 as a scalar type (issue 37): Views and distributed tensors of it, moved between
// layouts exactly (its bits), cast to and from float32 (kdist::cast), and never summed by MPI (a
// pending sum of bfloat16 is a clear error; kdist sums in float32). That mixing it with float32
// does not compile is checked by tests/compile_fail/ (bfloat16_*).
#include <gtest/gtest.h>
#include <mpi.h>

#include <Kokkos_Core.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include <kdist/core/bfloat16.hpp>
#include <kdist/parallel/devices.hpp>
#include <kdist/tensor/cast.hpp>
#include <kdist/tensor/distribute_tensor.hpp>
#include <kdist/tensor/redistribute.hpp>

#include "mpi_test_util.hpp"

namespace {

using kdist::bfloat16;
using kdist::test::contains;
using kdist::test::world_size;
using Matrix16 = kdist::DistributedTensor<bfloat16**>;

TEST(Bfloat16Scalar, ConvertsExplicitlyAndComparesValues) {
  const bfloat16 one(1.0F);
  EXPECT_EQ(one.bits, 0x3f80);
  EXPECT_EQ(static_cast<float>(one), 1.0F);
  EXPECT_EQ(static_cast<double>(bfloat16(-2.5F)), -2.5);
  EXPECT_EQ(bfloat16(1.0F + 1.0F / 256), one);  // a tie rounds to even
  EXPECT_EQ(bfloat16(0.0F), bfloat16(-0.0F));   // values, not bits
  EXPECT_FALSE(bfloat16(std::numeric_limits<float>::quiet_NaN()) ==
               bfloat16(std::numeric_limits<float>::quiet_NaN()));
  EXPECT_EQ(bfloat16::from_bits(0xc000), bfloat16(-2.0F));
  EXPECT_EQ(kdist::mpi::datatype<bfloat16>(), MPI_UINT16_T);
  Kokkos::View<bfloat16*> v("v", 4);  // device memory under Kokkos CUDA
  Kokkos::deep_copy(v, bfloat16(3.0F));
  auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), v);
  for (std::size_t i = 0; i < 4; ++i) EXPECT_EQ(static_cast<float>(h(i)), 3.0F);
}

// (i, j) -> a value exact in bfloat16, distinct for every element of a 12 x 10 tensor.
float exact(std::size_t i, std::size_t j) {
  return static_cast<float>(i * 16 + j) - 60.0F;
}

TEST(Bfloat16Tensor, MovesBetweenLayoutsExactlyAndCastsToAndFromFloat) {
  const auto n = static_cast<std::size_t>(world_size());
  kdist::RuntimeDeviceMesh mesh({n, 1}, {"data", "model"}, kdist::list_devices());
  const std::array<std::size_t, 2> shape{12, 10};
  std::vector<bfloat16> global(12 * 10);
  for (std::size_t i = 0; i < 12; ++i) {
    for (std::size_t j = 0; j < 10; ++j) global[i * 10 + j] = bfloat16(exact(i, j));
  }
  const kdist::RuntimeTensorLayout rows({"data", std::nullopt}, mesh);
  const kdist::RuntimeTensorLayout cols({std::nullopt, "data"}, mesh);
  const kdist::RuntimeTensorLayout replicated({std::nullopt, std::nullopt}, mesh);
  const Matrix16 t = kdist::distribute_tensor<bfloat16**>(global.data(), shape, rows);
  for (const auto& target : {cols, replicated, rows}) {
    const Matrix16 moved = kdist::redistribute(t, target);
    EXPECT_EQ(moved.layout(), target);
    const auto full = kdist::full_tensor(moved);
    for (std::size_t i = 0; i < 12; ++i) {
      for (std::size_t j = 0; j < 10; ++j) {
        ASSERT_EQ(full(i, j).bits, global[i * 10 + j].bits) << target.axes_repr() << i << j;
      }
    }
  }
  // to float: exact, the layout kept
  const kdist::DistributedTensor<float**> f = kdist::cast<float>(t);
  EXPECT_EQ(f.layout(), rows);
  const auto ff = kdist::full_tensor(f);
  for (std::size_t i = 0; i < 12; ++i) {
    for (std::size_t j = 0; j < 10; ++j) EXPECT_EQ(ff(i, j), exact(i, j));
  }
  // from float: rounded to nearest, ties to even, as to_bfloat16_bits
  const auto irregular = kdist::distribute_tensor<float**>(
      [](std::size_t i, std::size_t j) { return 1.0F + 0.00137F * static_cast<float>(i * 10 + j); },
      shape, cols);
  const Matrix16 rounded = kdist::cast<bfloat16>(irregular);
  const auto want = kdist::full_tensor(irregular);
  const auto got = kdist::full_tensor(rounded);
  for (std::size_t i = 0; i < 12; ++i) {
    for (std::size_t j = 0; j < 10; ++j) {
      EXPECT_EQ(got(i, j).bits, kdist::to_bfloat16_bits(want(i, j)));
    }
  }
}

TEST(Bfloat16Tensor, APendingSumIsAnErrorThatSaysKdistSumsInFloat32) {
  if (world_size() == 1) GTEST_SKIP() << "a sum over one process is no pending sum";
  const auto n = static_cast<std::size_t>(world_size());
  kdist::RuntimeDeviceMesh mesh({n}, {"data"}, kdist::list_devices());
  const kdist::RuntimeTensorLayout replicated({std::nullopt, std::nullopt}, mesh);
  const auto zero = Matrix16::zeros({4, 4}, replicated);
  const auto partial = Matrix16::from_local(zero.local(), {4, 4}, replicated, {"data"});
  const std::string moved = kdist::test::message_of<kdist::ValueError>(
      [&] { (void)kdist::redistribute(partial, replicated); });
  EXPECT_TRUE(
      contains(moved, "pending sum of 16-bit values (bfloat16, float16); kdist sums in float32"))
      << moved;
  const auto as_float = kdist::DistributedTensor<float**>::from_local(
      kdist::cast<float>(zero).local(), {4, 4}, replicated, {"data"});
  const std::string cast =
      kdist::test::message_of<kdist::ValueError>([&] { (void)kdist::cast<bfloat16>(as_float); });
  EXPECT_TRUE(contains(cast, "resolve it first")) << cast;
  // to float, a pending sum stays one (bfloat16 -> float is exact)
  EXPECT_TRUE(kdist::cast<float>(partial).is_partial());
}

}  // namespace
