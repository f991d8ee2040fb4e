// kdist/core/halo_plan.hpp: the runs of a halo exchange along one dimension - zeros beyond the
// field, periodic images, uneven and empty blocks, ranges longer than a block or than the field -
// and the sends of each process agree with the receives of the others (same runs, same tags).
#include <kdist/core/halo_plan.hpp>

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace {

using kdist::Boundary;
using kdist::HaloPlan;
using kdist::HaloRange;
using Segment = HaloPlan::Segment;

// What position p of a field of n stands for: itself, its periodic image, or -1 (a zero).
std::int64_t source(std::int64_t p, std::int64_t n, Boundary b) {
  if (p >= 0 && p < n) return p;
  return b == Boundary::zeros ? -1 : ((p % n) + n) % n;
}

// Every position of every process's range comes from the right owner and offset, and each
// message one process sends is one another receives.
void check_consistent(std::size_t n, const std::vector<HaloRange>& wanted, Boundary b) {
  const std::size_t parts = wanted.size();
  std::vector<HaloPlan> plans;
  for (std::size_t me = 0; me < parts; ++me) plans.emplace_back(n, parts, me, wanted, b);
  for (std::size_t me = 0; me < parts; ++me) {
    const auto& plan = plans[me];
    std::int64_t covered = 0;
    for (std::size_t i = 0; i < plan.segments().size(); ++i) {
      const auto& s = plan.segments()[i];
      EXPECT_EQ(s.at, covered) << "runs follow each other";
      ASSERT_GT(s.length, 0);
      for (std::int64_t k = 0; k < s.length; ++k) {
        const std::int64_t p = wanted[me].begin + s.at + k;
        const std::int64_t g = source(p, static_cast<std::int64_t>(n), b);
        if (g < 0) {
          EXPECT_LT(s.owner, 0) << "position " << p << " is a zero";
        } else {
          ASSERT_GE(s.owner, 0) << "position " << p;
          const auto blk = plans[static_cast<std::size_t>(s.owner)].block();
          EXPECT_EQ(static_cast<std::int64_t>(blk.offset) + s.from + k, g) << "position " << p;
          EXPECT_LT(static_cast<std::size_t>(s.from + k), blk.extent);
        }
      }
      if (s.owner >= 0 && static_cast<std::size_t>(s.owner) != me) {
        // the owner sends exactly this run with this tag
        const auto& sends = plans[static_cast<std::size_t>(s.owner)].sends();
        int found = 0;
        for (const auto& m : sends) {
          if (m.peer == static_cast<int>(me) && m.tag == plan.receive_tag(i)) {
            ++found;
            EXPECT_EQ(m.from, s.from);
            EXPECT_EQ(m.at, s.at);
            EXPECT_EQ(m.length, s.length);
          }
        }
        EXPECT_EQ(found, 1) << "process " << s.owner << " sends run " << i << " of process " << me;
      }
      covered += s.length;
    }
    EXPECT_EQ(static_cast<std::size_t>(covered), wanted[me].size());
  }
  std::size_t sent = 0, received = 0;
  for (std::size_t me = 0; me < parts; ++me) {
    sent += plans[me].sends().size();
    for (const auto& s : plans[me].segments()) {
      received += s.owner >= 0 && static_cast<std::size_t>(s.owner) != me ? 1 : 0;
    }
  }
  EXPECT_EQ(sent, received);
}

// Each process wants its block widened by `before` and `after` positions.
std::vector<HaloRange> widened(std::size_t n, std::size_t parts, std::int64_t before,
                               std::int64_t after) {
  std::vector<HaloRange> out;
  for (std::size_t q = 0; q < parts; ++q) {
    const auto b = kdist::detail::chunk_block(n, parts, q);
    if (b.extent == 0) {
      out.push_back({0, 0});
    } else {
      out.push_back({static_cast<std::int64_t>(b.offset) - before,
                     static_cast<std::int64_t>(b.offset + b.extent) + after});
    }
  }
  return out;
}

TEST(HaloPlan, ANeighbourRowEachSideWithZerosBeyondTheField) {
  const auto wanted = widened(8, 4, 1, 1);  // blocks of 2
  const HaloPlan first(8, 4, 0, wanted, Boundary::zeros);
  EXPECT_EQ(first.segments(), (std::vector<Segment>{{0, -1, 0, 1}, {1, 0, 0, 2}, {3, 1, 0, 1}}));
  const HaloPlan second(8, 4, 1, wanted, Boundary::zeros);
  EXPECT_EQ(second.segments(), (std::vector<Segment>{{0, 0, 1, 1}, {1, 1, 0, 2}, {3, 2, 0, 1}}));
  ASSERT_EQ(second.sends().size(), 2u);  // its first row up, its last row down
  EXPECT_EQ(second.sends()[0].peer, 0);
  EXPECT_EQ(second.sends()[0].from, 0);
  EXPECT_EQ(second.sends()[1].peer, 2);
  EXPECT_EQ(second.sends()[1].from, 1);
  for (auto b : {Boundary::zeros, Boundary::periodic}) check_consistent(8, wanted, b);
}

TEST(HaloPlan, PeriodicImagesComeFromTheOtherEnd) {
  const auto wanted = widened(6, 3, 2, 1);
  const HaloPlan first(6, 3, 0, wanted, Boundary::periodic);
  // positions -2, -1 are 4, 5 (process 2), then its own 0, 1, then 2 from process 1
  EXPECT_EQ(first.segments(), (std::vector<Segment>{{0, 2, 0, 2}, {2, 0, 0, 2}, {4, 1, 0, 1}}));
  // One process: its own positions, wrapped.
  const HaloPlan alone(5, 1, 0, {{-2, 7}}, Boundary::periodic);
  EXPECT_EQ(alone.segments(), (std::vector<Segment>{{0, 0, 3, 2}, {2, 0, 0, 5}, {7, 0, 0, 2}}));
  EXPECT_TRUE(alone.sends().empty());
  check_consistent(6, wanted, Boundary::periodic);
}

TEST(HaloPlan, UnevenAndEmptyBlocksLongRangesAndEmptyRanges) {
  // 5 over 4: blocks of 2, 2, 1, 0; halos longer than a block reach past the neighbour.
  for (auto b : {Boundary::zeros, Boundary::periodic}) {
    check_consistent(5, widened(5, 4, 1, 1), b);
    check_consistent(5, widened(5, 4, 3, 2), b);
    check_consistent(7, widened(7, 4, 2, 0), b);
    check_consistent(3, {{-4, 8}, {0, 0}, {1, 2}}, b);  // longer than the field; nothing; inside
    check_consistent(9, {{2, 9}, {-1, 3}}, b);          // strided-conv-like ranges
  }
  // Two runs from the same owner get tags 0 and 1 (periodic, 2 blocks).
  const std::vector<HaloRange> both{{-1, 3}, {2, 5}};
  const HaloPlan p0(4, 2, 0, both, Boundary::periodic);
  ASSERT_EQ(p0.segments().size(), 3u);
  EXPECT_EQ(p0.segments()[0].owner, 1);
  EXPECT_EQ(p0.receive_tag(0), 0);
  EXPECT_EQ(p0.segments()[2].owner, 1);
  EXPECT_EQ(p0.receive_tag(2), 1);
  check_consistent(4, both, Boundary::periodic);
}

TEST(HaloPlan, BadArgumentsAreValueErrors) {
  auto message = [](auto&& f) -> std::string {
    try {
      f();
    } catch (const kdist::ValueError& e) {
      return e.what();
    }
    return "no error";
  };
  EXPECT_EQ(message([] {
              HaloPlan(4, 2, 2, {{0, 2}, {2, 4}}, Boundary::zeros);
            }),
            "kdist::HaloPlan: process 2 of 2 blocks: give 1 block or more and a process below "
            "their number");
  EXPECT_EQ(message([] {
              HaloPlan(4, 2, 0, {{0, 2}}, Boundary::zeros);
            }),
            "kdist::HaloPlan: 1 wanted ranges for 2 blocks: give one range per block");
  EXPECT_EQ(message([] {
              HaloPlan(0, 1, 0, {{-1, 1}}, Boundary::periodic);
            }),
            "kdist::HaloPlan: a field of extent 0 has no positions to give (wanted [-1, 1))");
}

}  // namespace
