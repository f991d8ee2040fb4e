// kdist/nn/reservoir.hpp: the streaming reservoir's policy alone (no MPI): a fixed capacity,
// eviction of the most-seen (at random among equals, so old examples stay while nothing is
// seen), the seen counts, sampling of the unseen first, then at random, of distinct examples, the same
// choices for the same seed, the statistics, and every argument error.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <kdist/nn/reservoir.hpp>
#include <set>
#include <string>
#include <vector>

namespace {

using R = kdist::Reservoir<float>;

// Example i: 3 values i, i + 0.25, i + 0.5; its target row 2 values -i, -2i.
std::vector<float> example(std::size_t i) {
  const auto f = static_cast<float>(i);
  return {f, f + 0.25f, f + 0.5f};
}
std::vector<float> target(std::size_t i) {
  const auto f = static_cast<float>(i);
  return {-f, -2 * f};
}
void add(R& r, std::size_t i) {
  r.add(example(i), target(i));
}

// Every slot holds the example and target of its arrival number.
void expect_consistent(const R& r) {
  for (std::size_t s = 0; s < r.size(); ++s) {
    const auto a = r.arrival(s);
    const auto e = r.example(s);
    const auto t = r.target(s);
    EXPECT_EQ(std::vector<float>(e.begin(), e.end()), example(a)) << "slot " << s;
    EXPECT_EQ(std::vector<float>(t.begin(), t.end()), target(a)) << "slot " << s;
  }
}

std::string error_of(auto&& f) {
  try {
    f();
  } catch (const kdist::ValueError& e) {
    return e.what();
  }
  ADD_FAILURE() << "no kdist::ValueError";
  return {};
}

TEST(ReservoirPolicy, HoldsAtMostItsCapacity) {
  R r(4, 3, 2, 1);
  for (std::size_t i = 0; i < 10; ++i) {
    add(r, i);
    EXPECT_EQ(r.size(), std::min<std::size_t>(i + 1, 4));
  }
  EXPECT_TRUE(r.full());
  const auto s = r.statistics();
  EXPECT_EQ(s.received, 10u);
  EXPECT_EQ(s.evicted, 6u);
  EXPECT_EQ(s.evicted_unseen, 6u);
  EXPECT_EQ(s.size, 4u);
  expect_consistent(r);
  EXPECT_EQ(r.examples().size(), 12u);
  EXPECT_EQ(r.targets().size(), 8u);
}

TEST(ReservoirPolicy, EvictsTheMostSeen) {
  R r(4, 3, 2, 5);
  for (std::size_t i = 0; i < 4; ++i) add(r, i);
  std::vector<std::size_t> slots;
  ASSERT_EQ(r.sample(4, slots), 4u);  // every example seen once
  ASSERT_EQ(r.sample(1, slots), 1u);  // one of them twice
  const std::size_t most = slots[0];
  EXPECT_EQ(r.seen(most), 2u);
  const auto old = r.arrival(most);
  EXPECT_EQ(r.add(example(4), target(4)), most);  // the new example takes the most-seen's slot
  EXPECT_EQ(r.arrival(most), 4u);
  EXPECT_EQ(r.seen(most), 0u);
  for (std::size_t s = 0; s < 4; ++s) EXPECT_NE(r.arrival(s), old);
  EXPECT_EQ(r.statistics().evicted_unseen, 0u);
  expect_consistent(r);
  // Then among the rest (all seen once): never the new, unseen one.
  for (std::size_t i = 5; i < 8; ++i) EXPECT_NE(r.add(example(i), target(i)), most);
  EXPECT_EQ(r.arrival(most), 4u);
}

TEST(ReservoirPolicy, KeepsOldExamplesWhenNothingIsSeen) {
  // 400 arrivals into 32 slots with no training: a FIFO would hold only arrivals 368..399; the
  // random choice among equally (never) seen examples keeps older ones.
  R r(32, 3, 2, 11);
  for (std::size_t i = 0; i < 400; ++i) add(r, i);
  std::size_t older = 0;
  std::uint64_t oldest = 400;
  for (std::size_t s = 0; s < r.size(); ++s) {
    older += r.arrival(s) < 400 - 32 ? 1 : 0;
    oldest = std::min(oldest, r.arrival(s));
  }
  EXPECT_GE(older, 8u);
  EXPECT_LT(oldest, 300u);
  expect_consistent(r);
}

TEST(ReservoirPolicy, SamplesTheUnseenFirstThenAtRandom) {
  R r(6, 3, 2, 3);
  for (std::size_t i = 0; i < 6; ++i) add(r, i);
  std::vector<std::size_t> a, b, c;
  ASSERT_EQ(r.sample(4, a), 4u);
  EXPECT_EQ(std::set<std::size_t>(a.begin(), a.end()).size(), 4u);  // distinct
  ASSERT_EQ(r.sample(4, b), 4u);
  // The two not seen come first, then two of those seen once.
  std::size_t unseen_before = 0;
  for (std::size_t s : b) unseen_before += std::count(a.begin(), a.end(), s) == 0 ? 1 : 0;
  EXPECT_EQ(unseen_before, 2u);
  EXPECT_EQ(std::count(a.begin(), a.end(), b[0]) + std::count(a.begin(), a.end(), b[1]), 0);
  std::size_t total = 0;
  for (std::size_t s = 0; s < 6; ++s) {
    EXPECT_GE(r.seen(s), 1u);
    EXPECT_LE(r.seen(s), 2u);
    total += r.seen(s);
  }
  EXPECT_EQ(total, 8u);
  const auto st = r.statistics();
  EXPECT_EQ(st.sampled, 8u);
  EXPECT_EQ(st.seen_min, 1u);
  EXPECT_EQ(st.seen_max, 2u);
  EXPECT_DOUBLE_EQ(st.seen_mean, 8.0 / 6.0);
  // More than held: all of them, once each.
  ASSERT_EQ(r.sample(10, c), 6u);
  EXPECT_EQ(std::set<std::size_t>(c.begin(), c.end()).size(), 6u);
  // Only those seen fewer than `below` times.
  EXPECT_EQ(r.sample(10, c, 3), 4u);  // the four seen twice by now
  EXPECT_EQ(r.sample(10, c, 3), 0u);
  EXPECT_EQ(r.seen_min(), 3u);
  // A new arrival (it evicts one seen 3 times) is in the very next batch.
  const std::size_t fresh = r.add(example(6), target(6));
  EXPECT_EQ(r.sample(1, c), 1u);
  EXPECT_EQ(c[0], fresh);
  // Then the picks are spread: 600 picks of 1 over 6 examples, each 60 to 140 times.
  std::vector<std::size_t> count(6);
  for (int i = 0; i < 600; ++i) {
    r.sample(1, c);
    ++count[c[0]];
  }
  for (std::size_t n : count) {
    EXPECT_GE(n, 60u);
    EXPECT_LE(n, 140u);
  }
  expect_consistent(r);
}

TEST(ReservoirPolicy, TheSameSeedGivesTheSameChoices) {
  auto run = [](std::uint64_t seed) {
    R r(16, 3, 2, seed);
    std::vector<std::uint64_t> trace;
    std::vector<std::size_t> slots;
    for (std::size_t i = 0; i < 200; ++i) {
      add(r, i);
      if (i % 3 == 0) {
        r.sample(5, slots);
        for (std::size_t s : slots) trace.push_back(r.arrival(s));
      }
    }
    return trace;
  };
  EXPECT_EQ(run(42), run(42));
  EXPECT_NE(run(42), run(43));
}

TEST(ReservoirPolicy, LabelsAndTargets) {
  kdist::Reservoir<double> r(2, 2, 0, 0);
  EXPECT_TRUE(r.has_labels());
  r.add(std::vector<double>{1, 2}, 7);
  r.add(std::vector<double>{3, 4}, 0);
  EXPECT_EQ(r.label(0), 7);
  EXPECT_EQ(r.label(1), 0);
  EXPECT_TRUE(r.target(0).empty());
  EXPECT_EQ(r.labels().size(), 2u);
  EXPECT_EQ(r.examples()[3], 4.0);
}

TEST(ReservoirPolicy, ArgumentErrors) {
  EXPECT_NE(error_of([] { R(0, 3, 2); }).find("the capacity is 0 examples"), std::string::npos);
  EXPECT_NE(error_of([] { R(4, 0, 2); }).find("examples of 0 values"), std::string::npos);
  R r(4, 3, 2);
  EXPECT_NE(error_of([&] {
              r.add(std::vector<float>{1, 2}, target(0));
            }).find("the example has 2 values; this reservoir's have 3"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              r.add(example(0), std::vector<float>{1});
            }).find("the target has 1 values; this reservoir's have 2"),
            std::string::npos);
  EXPECT_NE(error_of([&] { r.add(example(0), 3); }).find("call add(x, target)"), std::string::npos);
  R labels(4, 3, 0);
  EXPECT_NE(error_of([&] { labels.add(example(0), target(0)); }).find("call add(x, label)"),
            std::string::npos);
  EXPECT_NE(error_of([&] { labels.add(example(0), -1); }).find("label -1 is negative"),
            std::string::npos);
  EXPECT_EQ(r.size(), 0u);  // nothing added by a failed call
  EXPECT_EQ(labels.size(), 0u);
}

}  // namespace
