// kdist-mpi-ranks: 1 2 4
// kdist/parallel/halo_exchange.hpp: halo_gather fills each process's wanted range (own block,
// neighbours' rows, zeros or periodic images; uneven and empty blocks; ranges past a neighbour),
// started and waited with work between, through host copies too, on Views empty along the
// other axes; halo_scatter_add is its adjoint
// (<gather(b), e> = <b, scatter_add(e)> over all processes, and the sums against a serial
// reference); the argument errors, on every process alike.
#include <gtest/gtest.h>
#include <mpi.h>
#include "mpi_test_util.hpp"

#include <Kokkos_Core.hpp>
#include <cstdint>
#include <kdist/parallel/collectives.hpp>
#include <kdist/parallel/halo_exchange.hpp>
#include <kdist/parallel/world.hpp>
#include <string>
#include <utility>
#include <vector>

namespace {

using Space = Kokkos::DefaultHostExecutionSpace;
using View3 = Kokkos::View<double***, Kokkos::LayoutRight, Kokkos::HostSpace>;
using kdist::Boundary;
using kdist::HaloPlan;
using kdist::HaloRange;
using kdist::test::contains;
using kdist::test::message_of;

// A field of (outer, n, inner) positions: distinct exact values.
double field(std::size_t o, std::int64_t g, std::size_t i) {
  return static_cast<double>(o) * 1000 + static_cast<double>(g) * 10 + static_cast<double>(i);
}

kdist::mpi::Communicator world() {
  return kdist::mpi::Communicator::borrow(kdist::communicator());
}

std::vector<HaloRange> widened(std::size_t n, std::size_t parts, std::int64_t before,
                               std::int64_t after) {
  std::vector<HaloRange> out;
  for (std::size_t q = 0; q < parts; ++q) {
    const auto b = kdist::detail::chunk_block(n, parts, q);
    out.push_back(b.extent == 0
                      ? HaloRange{0, 0}
                      : HaloRange{static_cast<std::int64_t>(b.offset) - before,
                                  static_cast<std::int64_t>(b.offset + b.extent) + after});
  }
  return out;
}

struct Case {
  std::size_t n;
  std::int64_t before, after;
};
const Case cases[] = {{8, 1, 1}, {7, 2, 1}, {5, 1, 3}, {3, 2, 2}, {12, 0, 2}};

TEST(HaloExchange, GatherFillsTheWantedRangeWithNeighboursZerosOrPeriodicImages) {
  const auto comm = world();
  const auto parts = static_cast<std::size_t>(comm.size());
  const auto me = static_cast<std::size_t>(comm.rank());
  constexpr std::size_t outer = 2, inner = 3;
  for (const auto& c : cases) {
    for (auto boundary : {Boundary::zeros, Boundary::periodic}) {
      const HaloPlan plan(c.n, parts, me, widened(c.n, parts, c.before, c.after), boundary);
      const auto blk = plan.block();
      View3 block("block", outer, blk.extent, inner);
      for (std::size_t o = 0; o < outer; ++o)
        for (std::size_t g = 0; g < blk.extent; ++g)
          for (std::size_t i = 0; i < inner; ++i) {
            block(o, g, i) = field(o, static_cast<std::int64_t>(blk.offset + g), i);
          }
      View3 extended("extended", outer, plan.wanted().size(), inner);
      Kokkos::deep_copy(extended, -1.0);
      auto request = kdist::start_halo_gather(Space(), plan, 1, block, extended, comm);
      EXPECT_TRUE(request.active());
      request.wait();  // (work here would overlap the messages)
      EXPECT_FALSE(request.active());
      const auto n = static_cast<std::int64_t>(c.n);
      for (std::size_t o = 0; o < outer; ++o)
        for (std::size_t k = 0; k < extended.extent(1); ++k)
          for (std::size_t i = 0; i < inner; ++i) {
            const std::int64_t p = plan.wanted().begin + static_cast<std::int64_t>(k);
            const bool inside = p >= 0 && p < n;
            const double want = inside                        ? field(o, p, i)
                                : boundary == Boundary::zeros ? 0.0
                                                              : field(o, ((p % n) + n) % n, i);
            ASSERT_EQ(extended(o, k, i), want)
                << "n " << c.n << " position " << p << (inside ? "" : " (beyond the field)");
          }
    }
  }
}

// halo_scatter_add is the adjoint of halo_gather, and sums every image of a position.
TEST(HaloExchange, ScatterAddIsTheAdjointOfGather) {
  const auto comm = world();
  const auto parts = static_cast<std::size_t>(comm.size());
  const auto me = static_cast<std::size_t>(comm.rank());
  constexpr std::size_t outer = 3, inner = 2;
  for (const auto& c : cases) {
    for (auto boundary : {Boundary::zeros, Boundary::periodic}) {
      const auto wanted = widened(c.n, parts, c.before, c.after);
      const HaloPlan plan(c.n, parts, me, wanted, boundary);
      const auto blk = plan.block();
      // e_q(o, p, i) on every process q; the serial sum of the images of position g.
      auto e_value = [](std::size_t q, std::size_t o, std::int64_t p, std::size_t i) {
        return static_cast<double>(q + 1) * 0.5 + static_cast<double>(p) * 0.25 +
               static_cast<double>(o * 3 + i);
      };
      View3 extended("extended", outer, plan.wanted().size(), inner);
      for (std::size_t o = 0; o < outer; ++o)
        for (std::size_t k = 0; k < extended.extent(1); ++k)
          for (std::size_t i = 0; i < inner; ++i) {
            extended(o, k, i) = e_value(me, o, plan.wanted().begin + std::int64_t(k), i);
          }
      View3 block("block", outer, blk.extent, inner);
      Kokkos::deep_copy(block, 99.0);  // overwritten
      kdist::halo_scatter_add(Space(), plan, 1, extended, block, comm);
      const auto n = static_cast<std::int64_t>(c.n);
      for (std::size_t o = 0; o < outer; ++o)
        for (std::size_t g = 0; g < blk.extent; ++g)
          for (std::size_t i = 0; i < inner; ++i) {
            const auto global = static_cast<std::int64_t>(blk.offset + g);
            double want = 0;
            for (std::size_t q = 0; q < parts; ++q) {
              for (std::int64_t p = wanted[q].begin; p < wanted[q].end; ++p) {
                const bool inside = p >= 0 && p < n;
                if (!inside && boundary == Boundary::zeros) continue;
                if (((p % n) + n) % n == global) want += e_value(q, o, p, i);
              }
            }
            ASSERT_NEAR(block(o, g, i), want, 1e-12) << "n " << c.n << " position " << global;
          }
    }
  }
}

TEST(HaloExchange, RunsThroughHostCopiesAndOnRankFiveViews) {
  // A rank-5 field split on its dimension 2, gathered into device-default memory (host copies
  // when MPI cannot read it) and compared on the host.
  const auto comm = world();
  const auto parts = static_cast<std::size_t>(comm.size());
  const auto me = static_cast<std::size_t>(comm.rank());
  const std::size_t n = 6;
  const HaloPlan plan(n, parts, me, widened(n, parts, 1, 1), Boundary::periodic);
  const auto blk = plan.block();
  using V5 = Kokkos::View<float*****, Kokkos::LayoutRight>;
  V5 block("block", 2, 3, blk.extent, 2, 2), extended("extended", 2, 3, plan.wanted().size(), 2, 2);
  auto hb = Kokkos::create_mirror_view(block);
  for (std::size_t a = 0; a < 2; ++a)
    for (std::size_t b = 0; b < 3; ++b)
      for (std::size_t g = 0; g < blk.extent; ++g)
        for (std::size_t d = 0; d < 4; ++d) {
          hb(a, b, g, d / 2, d % 2) =
              static_cast<float>(field(a * 3 + b, std::int64_t(blk.offset + g), d));
        }
  Kokkos::deep_copy(block, hb);
  kdist::halo_gather(Kokkos::DefaultExecutionSpace(), plan, 2, block, extended, comm);
  auto he = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), extended);
  for (std::size_t a = 0; a < 2; ++a)
    for (std::size_t b = 0; b < 3; ++b)
      for (std::size_t k = 0; k < he.extent(2); ++k)
        for (std::size_t d = 0; d < 4; ++d) {
          const std::int64_t p = plan.wanted().begin + std::int64_t(k);
          const auto g = ((p % std::int64_t(n)) + std::int64_t(n)) % std::int64_t(n);
          ASSERT_EQ(he(a, b, k, d / 2, d % 2), static_cast<float>(field(a * 3 + b, g, d)));
        }
}

// A block with no rows along the other axes (a coarse level of a U-Net on more processes than
// rows: its outer or inner extent 0) exchanges empty slabs: nothing is read or written (the
// sanitizer job's UBSan checks no null pointer is offset), and the next exchange still gets its
// neighbours' rows (the empty messages matched theirs).
TEST(HaloExchange, EmptyOuterOrInnerExtentsExchangeNothingAndTheNextExchangeStillWorks) {
  const auto comm = world();
  const auto parts = static_cast<std::size_t>(comm.size());
  const auto me = static_cast<std::size_t>(comm.rank());
  const std::size_t n = 7;
  for (auto boundary : {Boundary::zeros, Boundary::periodic}) {
    const HaloPlan plan(n, parts, me, widened(n, parts, 2, 1), boundary);
    const auto blk = plan.block();
    for (const auto& [outer, inner] : {std::pair<std::size_t, std::size_t>{0, 3}, {2, 0}}) {
      View3 block("block", outer, blk.extent, inner);
      View3 extended("extended", outer, plan.wanted().size(), inner);
      kdist::halo_gather(Space(), plan, 1, block, extended, comm);
      kdist::halo_scatter_add(Space(), plan, 1, extended, block, comm);
      EXPECT_EQ(extended.extent(1), plan.wanted().size());
    }
    View3 block("block", 1, blk.extent, 1);
    for (std::size_t g = 0; g < blk.extent; ++g) {
      block(0, g, 0) = field(0, static_cast<std::int64_t>(blk.offset + g), 0);
    }
    View3 extended("extended", 1, plan.wanted().size(), 1);
    kdist::halo_gather(Space(), plan, 1, block, extended, comm);
    for (std::size_t k = 0; k < extended.extent(1); ++k) {
      const std::int64_t p = plan.wanted().begin + static_cast<std::int64_t>(k);
      const auto wrapped = ((p % std::int64_t(n)) + std::int64_t(n)) % std::int64_t(n);
      const bool inside = p >= 0 && p < std::int64_t(n);
      const double want = inside || boundary == Boundary::periodic ? field(0, wrapped, 0) : 0.0;
      ASSERT_EQ(extended(0, k, 0), want) << "position " << p;
    }
  }
}

// A plan of one block needs no communicator: padding (zeros or periodic) on this process alone.
TEST(HaloExchange, OneBlockPadsWithoutACommunicator) {
  const HaloPlan plan(3, 1, 0, {{-2, 4}}, Boundary::periodic);
  View3 block("block", 1, 3, 1), extended("extended", 1, 6, 1), back("back", 1, 3, 1);
  for (std::size_t g = 0; g < 3; ++g) block(0, g, 0) = static_cast<double>(g + 1);
  kdist::halo_gather(Space(), plan, 1, block, extended);
  const double want[] = {2, 3, 1, 2, 3, 1};  // positions -2 .. 3
  for (std::size_t k = 0; k < 6; ++k) EXPECT_EQ(extended(0, k, 0), want[k]) << k;
  kdist::halo_scatter_add(Space(), plan, 1, extended, back);
  EXPECT_EQ(back(0, 0, 0), 2.0);  // positions 0 and 3
  EXPECT_EQ(back(0, 1, 0), 4.0);  // -2 and 1
  EXPECT_EQ(back(0, 2, 0), 6.0);  // -1 and 2
}

TEST(HaloExchange, ArgumentsThatDoNotFitThePlanAreValueErrorsBeforeAnyMessage) {
  const auto comm = world();
  const auto parts = static_cast<std::size_t>(comm.size());
  const auto me = static_cast<std::size_t>(comm.rank());
  const HaloPlan plan(8, parts, me, widened(8, parts, 1, 1), Boundary::zeros);
  View3 block("block", 2, plan.block().extent, 3), extended("e", 2, plan.wanted().size(), 3);
  View3 short_e("short", 2, plan.wanted().size() + 1, 3), other("other", 2, plan.block().extent, 4);
  auto msg = message_of<kdist::ValueError>(
      [&] { kdist::halo_gather(Space(), plan, 1, block, short_e, comm); });
  EXPECT_TRUE(contains(msg, "kdist::start_halo_gather: along dimension 1 the block has")) << msg;
  EXPECT_TRUE(contains(msg, "expected " + std::to_string(plan.block().extent) + " and " +
                                std::to_string(plan.wanted().size())))
      << msg;
  msg = message_of<kdist::ValueError>(
      [&] { kdist::halo_scatter_add(Space(), plan, 1, extended, other, comm); });
  EXPECT_TRUE(contains(msg, "kdist::halo_scatter_add: along dimension 2 the block has 4")) << msg;
  msg = message_of<kdist::ValueError>(
      [&] { kdist::halo_gather(Space(), plan, 3, block, extended, comm); });
  EXPECT_EQ(msg, "kdist::start_halo_gather: dimension 3 of a rank-3 View");
  if (parts > 1) {
    msg = message_of<kdist::ValueError>(
        [&] { kdist::halo_gather(Space(), plan, 1, block, extended); });
    EXPECT_EQ(msg, "kdist::start_halo_gather: a plan of " + std::to_string(parts) +
                       " blocks exchanges messages; give the communicator whose process r holds "
                       "block r");
  }
  const HaloPlan wrong(8, parts + 1, me, widened(8, parts + 1, 1, 1), Boundary::zeros);
  View3 wb("wb", 2, wrong.block().extent, 3), we("we", 2, wrong.wanted().size(), 3);
  msg = message_of<kdist::ValueError>([&] { kdist::halo_gather(Space(), wrong, 1, wb, we, comm); });
  EXPECT_EQ(msg, "kdist::start_halo_gather: the plan is for block " + std::to_string(me) + " of " +
                     std::to_string(parts + 1) + " but this is process " + std::to_string(me) +
                     " of " + std::to_string(parts) +
                     " of the communicator; process r of it holds block r");
}

}  // namespace
