// kdist-mpi-ranks: 1 2 4
// bfloat16 (kdist/core/bfloat16.hpp) and kdist::all_reduce_in_bfloat16
// (kdist/parallel/bfloat16_all_reduce.hpp): the conversion rounds to nearest, ties to even, keeps
// NaN and infinity and overflows to infinity; the all-reduce gives exact sums where bfloat16 holds
// them, sums within the stated bound of the float64 sum otherwise, the same bits on every process,
// sizes that do not split evenly, means, device-memory Views (through the default space), and its
// errors.
#include <gtest/gtest.h>
#include <mpi.h>

#include <Kokkos_Core.hpp>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include <kdist/core/bfloat16.hpp>
#include <kdist/parallel/bfloat16_all_reduce.hpp>

#include "mpi_test_util.hpp"

namespace {

using kdist::from_bfloat16_bits;
using kdist::ReduceOp;
using kdist::to_bfloat16_bits;
using kdist::test::contains;
using kdist::test::world_rank;
using kdist::test::world_size;
using HostView = Kokkos::View<float*, Kokkos::LayoutRight, Kokkos::HostSpace>;

float round_trip(float x) {
  return from_bfloat16_bits(to_bfloat16_bits(x));
}

TEST(Bfloat16, RoundsToNearestTiesToEvenAndKeepsSpecialValues) {
  for (const float exact : {0.0F, -0.0F, 1.0F, -2.5F, 3.0F * std::ldexp(1.0F, -10), 65280.0F}) {
    EXPECT_EQ(round_trip(exact), exact);
  }
  // 8 significant bits: 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties to even (1)
  EXPECT_EQ(round_trip(1.0F + std::ldexp(1.0F, -8)), 1.0F);
  // 1 + 3 * 2^-8 is halfway between 1 + 2^-7 and 1 + 2^-6: ties to even (1 + 2^-6)
  EXPECT_EQ(round_trip(1.0F + 3 * std::ldexp(1.0F, -8)), 1.0F + std::ldexp(1.0F, -6));
  // just above a tie rounds up, just below rounds down
  EXPECT_EQ(round_trip(1.0F + std::ldexp(1.0F, -8) + std::ldexp(1.0F, -20)),
            1.0F + std::ldexp(1.0F, -7));
  EXPECT_EQ(round_trip(1.0F + std::ldexp(1.0F, -8) - std::ldexp(1.0F, -20)), 1.0F);
  EXPECT_EQ(to_bfloat16_bits(1.0F), 0x3f80);
  EXPECT_EQ(to_bfloat16_bits(-2.0F), 0xc000);
  EXPECT_TRUE(std::isnan(round_trip(std::numeric_limits<float>::quiet_NaN())));
  std::uint32_t signalling = 0x7f800001U;  // a NaN whose payload lies in the lower half only
  float snan = 0;
  std::memcpy(&snan, &signalling, sizeof snan);
  EXPECT_TRUE(std::isnan(round_trip(snan))) << "a NaN must not become infinity";
  EXPECT_EQ(round_trip(std::numeric_limits<float>::infinity()),
            std::numeric_limits<float>::infinity());
  EXPECT_EQ(round_trip(-std::numeric_limits<float>::infinity()),
            -std::numeric_limits<float>::infinity());
  EXPECT_EQ(round_trip(std::numeric_limits<float>::max()), std::numeric_limits<float>::infinity());
  // the relative error of one conversion is at most 2^-8
  for (int i = 1; i < 2000; ++i) {
    const float x = 1.0F + static_cast<float>(i) * 0.000917F;
    EXPECT_LE(std::abs(round_trip(x) - x), std::ldexp(x, -8)) << x;
  }
}

// Value i of process p: an integer exact in bfloat16 whose sums over <= 4 processes are too.
float small_integer(int p, std::size_t i) {
  return static_cast<float>((p + 1) * (int(i % 7) - 3));
}
// Value i of process p: not representable in bfloat16.
float irregular(int p, std::size_t i) {
  return std::sin(0.37F * static_cast<float>(i) + 1.3F * static_cast<float>(p)) * 10.0F + 0.001F;
}

TEST(AllReduceInBfloat16, SumsExactWhereBfloat16HoldsThemOnEverySizeAndEveryProcessAlike) {
  const int p = world_rank(), size = world_size();
  for (const std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{1000}}) {
    HostView v("v", n);
    for (std::size_t i = 0; i < n; ++i) v(i) = small_integer(p, i);
    kdist::all_reduce_in_bfloat16(Kokkos::DefaultHostExecutionSpace(), v, ReduceOp::sum,
                                  MPI_COMM_WORLD);
    for (std::size_t i = 0; i < n; ++i) {
      float want = 0;
      for (int q = 0; q < size; ++q) want += small_integer(q, i);
      ASSERT_EQ(v(i), want) << "n " << n << " element " << i;
    }
  }
  // host memory: the calls borrow the thread's scratch, which the largest call above sized
  const long growths = kdist::detail::host_scratch_growths().load();
  HostView again("again", 1000);
  kdist::all_reduce_in_bfloat16(Kokkos::DefaultHostExecutionSpace(), again, ReduceOp::sum,
                                MPI_COMM_WORLD);
  EXPECT_EQ(kdist::detail::host_scratch_growths().load(), growths);
}

TEST(AllReduceInBfloat16, SumsWithinTheStatedBoundAndTheSameBitsEverywhere) {
  const int p = world_rank(), size = world_size();
  const std::size_t n = 1001;
  HostView v("v", n);
  for (std::size_t i = 0; i < n; ++i) v(i) = irregular(p, i);
  kdist::all_reduce_in_bfloat16(Kokkos::DefaultHostExecutionSpace(), v, ReduceOp::sum,
                                MPI_COMM_WORLD);
  double worst = 0;
  for (std::size_t i = 0; i < n; ++i) {
    double exact = 0, magnitude = 0;
    for (int q = 0; q < size; ++q) {
      exact += irregular(q, i);
      magnitude += std::abs(double(irregular(q, i)));
    }
    const double bound = std::ldexp(magnitude, -8) + std::ldexp(std::abs(exact), -8) * 1.004 +
                         size * std::ldexp(magnitude, -24);
    EXPECT_LE(std::abs(v(i) - exact), bound) << "element " << i;
    worst = std::max(worst, std::abs(v(i) - exact) / magnitude);
  }
  EXPECT_GT(worst, 0.0) << "irregular values must round";
  // every process holds the same bits: process 0's, broadcast
  std::vector<float> zero(v.data(), v.data() + n);
  MPI_Bcast(zero.data(), static_cast<int>(n), MPI_FLOAT, 0, MPI_COMM_WORLD);
  EXPECT_EQ(std::memcmp(zero.data(), v.data(), n * sizeof(float)), 0);
}

TEST(AllReduceInBfloat16, MeanAndDeviceMemoryThroughTheDefaultSpace) {
  const int p = world_rank(), size = world_size();
  const std::size_t n = 37;
  Kokkos::View<float*> device("device", n);  // a GPU's memory under Kokkos CUDA
  auto host = Kokkos::create_mirror_view(device);
  for (std::size_t i = 0; i < n; ++i) host(i) = small_integer(p, i) * static_cast<float>(size);
  Kokkos::deep_copy(device, host);
  kdist::all_reduce_in_bfloat16(Kokkos::DefaultExecutionSpace(), device, ReduceOp::mean,
                                MPI_COMM_WORLD);
  Kokkos::deep_copy(host, device);
  for (std::size_t i = 0; i < n; ++i) {
    float want = 0;
    for (int q = 0; q < size; ++q) want += small_integer(q, i);
    EXPECT_EQ(host(i), want) << "element " << i;  // the mean of size * values
  }
}

// The non-blocking form (the gradient sync's): the same bits as the blocking one, whether it is
// driven to the end by test() after start_gather() (work between the calls overlaps it) or by
// wait() alone; two in flight at once, each with its own scratch; test() never starts the
// all-gather itself (the caller decides where, for the collectives' order).
TEST(StartAllReduceInBfloat16, GivesTheBlockingFormsBitsThroughTestOrWaitWithTwoInFlight) {
  const int p = world_rank(), size = world_size();
  for (const std::size_t n : {std::size_t{0}, std::size_t{5}, std::size_t{1001}}) {
    HostView want("want", n), a("a", n), b("b", n);
    for (std::size_t i = 0; i < n; ++i) want(i) = a(i) = b(i) = irregular(p, i);
    kdist::all_reduce_in_bfloat16(Kokkos::DefaultHostExecutionSpace(), want, ReduceOp::sum,
                                  MPI_COMM_WORLD);
    std::vector<std::uint16_t> sa(kdist::bfloat16_all_reduce_scratch(n, size));
    std::vector<std::uint16_t> sb(kdist::bfloat16_all_reduce_scratch(n, size));
    auto ra = kdist::start_all_reduce_in_bfloat16(a, ReduceOp::sum, MPI_COMM_WORLD,
                                                  std::span<std::uint16_t>(sa));
    auto rb = kdist::start_all_reduce_in_bfloat16(b, ReduceOp::sum, MPI_COMM_WORLD,
                                                  std::span<std::uint16_t>(sb));
    for (int i = 0; i < 100; ++i) EXPECT_FALSE(ra.test()) << "the all-gather started by itself";
    EXPECT_FALSE(ra.gathering());
    ra.start_gather();
    EXPECT_TRUE(ra.gathering());
    while (!ra.test()) {
    }
    rb.wait();
    EXPECT_EQ(std::memcmp(a.data(), want.data(), n * sizeof(float)), 0) << n;
    EXPECT_EQ(std::memcmp(b.data(), want.data(), n * sizeof(float)), 0) << n;
  }
  HostView m("m", 9);
  for (std::size_t i = 0; i < 9; ++i) m(i) = small_integer(p, i) * static_cast<float>(size);
  std::vector<std::uint16_t> s(kdist::bfloat16_all_reduce_scratch(9, size));
  kdist::start_all_reduce_in_bfloat16(m, ReduceOp::mean, MPI_COMM_WORLD,
                                      std::span<std::uint16_t>(s))
      .wait();
  for (std::size_t i = 0; i < 9; ++i) {
    float want = 0;
    for (int q = 0; q < size; ++q) want += small_integer(q, i);
    EXPECT_EQ(m(i), want) << "element " << i;
  }
}

TEST(StartAllReduceInBfloat16Errors, ASmallScratchAndMaxAreRefusedBeforeAnyCommunication) {
  HostView v("v", 100);
  std::vector<std::uint16_t> small(kdist::bfloat16_all_reduce_scratch(100, world_size()) - 1);
  const auto m = kdist::test::message_of<kdist::ValueError>([&] {
    (void)kdist::start_all_reduce_in_bfloat16(v, ReduceOp::sum, MPI_COMM_WORLD,
                                              std::span<std::uint16_t>(small));
  });
  EXPECT_TRUE(contains(m, "are needed (kdist::bfloat16_all_reduce_scratch)")) << m;
  small.resize(small.size() + 1);
  const auto op = kdist::test::message_of<kdist::ValueError>([&] {
    (void)kdist::start_all_reduce_in_bfloat16(v, ReduceOp::min, MPI_COMM_WORLD,
                                              std::span<std::uint16_t>(small));
  });
  EXPECT_TRUE(contains(op, "only ReduceOp::sum and ReduceOp::mean")) << op;
}

TEST(AllReduceInBfloat16Errors, MaxOrMinAndAStridedViewAreRefusedBeforeAnyCommunication) {
  HostView v("v", 8);
  const auto op = kdist::test::message_of<kdist::ValueError>([&] {
    kdist::all_reduce_in_bfloat16(Kokkos::DefaultHostExecutionSpace(), v, ReduceOp::max,
                                  MPI_COMM_WORLD);
  });
  EXPECT_TRUE(contains(op, "only ReduceOp::sum and ReduceOp::mean")) << op;
  Kokkos::View<float**, Kokkos::LayoutRight, Kokkos::HostSpace> m("m", 4, 4);
  const auto column = Kokkos::subview(m, Kokkos::ALL, 1);
  const auto strided = kdist::test::message_of<kdist::ValueError>([&] {
    kdist::all_reduce_in_bfloat16(Kokkos::DefaultHostExecutionSpace(), column, ReduceOp::sum,
                                  MPI_COMM_WORLD);
  });
  EXPECT_TRUE(contains(strided, "not contiguous")) << strided;
}

}  // namespace
