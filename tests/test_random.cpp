// Tests of kdist/ops/random.hpp: the keying convention (pinned), determinism, independence from the
// order and slicing of evaluation (host loops and Kokkos kernels), distribution sanity.
// First: kdist's header marks Random123's functions host and device (R123_CUDA_DEVICE) before
// Random123 is included; included first itself, Random123 makes them host-only under hipcc.
#include <kdist/ops/random.hpp>

#include <Random123/philox.h>
#include <gtest/gtest.h>

#include "kokkos_environment.hpp"

#include <Kokkos_Core.hpp>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <set>
#include <utility>
#include <vector>

namespace {

using kdist::dropout_keep;
using kdist::glorot_uniform;
using kdist::random_key;
using kdist::stream_id;
using kdist::uniform01;

TEST(Random, Fnv1aKnownValues) {
  static_assert(kdist::fnv1a_64("") == 0xcbf29ce484222325ull);
  static_assert(kdist::fnv1a_64("a") == 0xaf63dc4c8601ec8cull);
  static_assert(kdist::fnv1a_64("foobar") == 0x85944171f73967e8ull);
  EXPECT_EQ(stream_id("d1/kernel"), kdist::fnv1a_64("d1/kernel"));
  std::set<std::uint64_t> ids{stream_id("d1/kernel"), stream_id("d1/bias"), stream_id("d2/kernel"),
                              stream_id("d2/bias"), stream_id("dropout")};
  EXPECT_EQ(ids.size(), 5u);
}

TEST(Random, KeyIsPhiloxOfStreamUnderSeed) {
  // Known answer of Random123's Philox4x32-10 (its kat_vectors): counter 0, key 0.
  const kdist::RandomKey k = random_key(0, 0, 0);
  EXPECT_EQ(k.k0, 0x6627e8d5u);
  EXPECT_EQ(k.k1, 0xe169c58du);
  // The documented convention for arbitrary seed and stream.
  const std::uint64_t seed = 0x0123456789abcdefull;
  const std::uint64_t stream = stream_id("d1/kernel");
  philox4x32_ctr_t ctr = {
      {static_cast<std::uint32_t>(stream), static_cast<std::uint32_t>(stream >> 32), 0u, 0u}};
  philox4x32_key_t key = {
      {static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32)}};
  const auto r = philox4x32_R(10, ctr, key);
  const kdist::RandomKey k2 = random_key(seed, stream, 77);
  EXPECT_EQ(k2.k0, r.v[0]);
  EXPECT_EQ(k2.k1, r.v[1]);
  EXPECT_EQ(k2.step, 77u);
  // Element words: counter {lo(index), hi(index), lo(step), hi(step)} under the derived key.
  const std::uint64_t index = 0x0000000500000007ull;
  philox4x32_ctr_t ectr = {{7u, 5u, 77u, 0u}};
  philox4x32_key_t ekey = {{k2.k0, k2.k1}};
  const auto e = philox4x32_R(10, ectr, ekey);
  const kdist::RandomBits b = kdist::random_bits(k2, index);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(b.word[i], e.v[i]);
  EXPECT_EQ(uniform01(k2, index), static_cast<float>(e.v[0] >> 8) * 0x1p-24f);
  // Dropout: element 64 (c / 16) + 16 w + c % 16 draws word w of counter c.
  const std::uint64_t element = (index / 16) * 64 + 16 * 2 + index % 16;
  EXPECT_EQ(kdist::dropout_counter(element), index);
  EXPECT_EQ(kdist::dropout_word(element), 2);
  const float u = static_cast<float>(e.v[2] >> 8) * 0x1p-24f;
  EXPECT_EQ(kdist::dropout_uniform(k2, element), u);
  EXPECT_EQ(dropout_keep(seed, stream, 77, element, 0.4f), u < 0.6f);
}

TEST(Random, Deterministic) {
  const auto k = random_key(1337, stream_id("d1/kernel"));
  for (std::uint64_t i = 0; i < 1000; ++i) {
    EXPECT_EQ(uniform01(k, i), uniform01(random_key(1337, stream_id("d1/kernel")), i));
    EXPECT_EQ(glorot_uniform(1337, stream_id("d1/kernel"), 784, 200, i),
              glorot_uniform(k, 784, 200, i));
  }
}

TEST(Random, SeedStreamAndStepChangeTheNumbers) {
  const auto base = random_key(1, stream_id("a"), 0);
  const kdist::RandomKey others[] = {random_key(2, stream_id("a"), 0),
                                     random_key(1, stream_id("b"), 0),
                                     random_key(1, stream_id("a"), 1)};
  for (const auto& o : others) {
    int equal = 0;
    for (std::uint64_t i = 0; i < 1000; ++i) equal += uniform01(base, i) == uniform01(o, i);
    EXPECT_LE(equal, 2);  // 24-bit values: a coincidence is ~1e-4 per draw
  }
  // Neighbouring indices differ too.
  int equal = 0;
  for (std::uint64_t i = 0; i < 1000; ++i) equal += uniform01(base, i) == uniform01(base, i + 1);
  EXPECT_LE(equal, 2);
}

// Rows [r0, r1) x cols [c0, c1) of a rows x cols glorot_uniform kernel, drawn in a Kokkos kernel
// in the default execution space and copied to the host. (A free function: nvcc allows no device
// lambda in a GoogleTest body, a private member function.)
Kokkos::View<float**, Kokkos::LayoutRight, Kokkos::HostSpace> glorot_shard_in_kernel(
    const kdist::RandomKey& key, std::size_t rows, std::size_t cols, std::size_t r0, std::size_t r1,
    std::size_t c0, std::size_t c1) {
  Kokkos::View<float**, Kokkos::LayoutRight> shard("shard", r1 - r0, c1 - c0);
  Kokkos::parallel_for(
      Kokkos::MDRangePolicy<Kokkos::Rank<2>>(
          {0, 0}, {static_cast<std::int64_t>(r1 - r0), static_cast<std::int64_t>(c1 - c0)}),
      KOKKOS_LAMBDA(const std::int64_t i, const std::int64_t j) {
        const auto gi = static_cast<std::uint64_t>(i) + r0;
        const auto gj = static_cast<std::uint64_t>(j) + c0;
        shard(i, j) = kdist::glorot_uniform(key, rows, cols, gi * cols + gj);
      });
  return Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), shard);
}

TEST(Random, IndependentOfOrderAndSlicing) {
  // A 64x50 "global" kernel filled in row order, and a shard (rows 16..39, cols 10..34) filled in
  // reverse order from global indices: the shard's values are the global ones, bit for bit.
  const std::size_t rows = 64;
  const std::size_t cols = 50;
  const std::uint64_t stream = stream_id("d1/kernel");
  std::vector<float> full(rows * cols);
  for (std::size_t i = 0; i < rows; ++i) {
    for (std::size_t j = 0; j < cols; ++j) {
      full[i * cols + j] = glorot_uniform(42, stream, rows, cols, i * cols + j);
    }
  }
  const std::size_t r0 = 16, r1 = 40, c0 = 10, c1 = 35;
  for (std::size_t i = r1; i-- > r0;) {
    for (std::size_t j = c1; j-- > c0;) {
      const float v = glorot_uniform(42, stream, rows, cols, i * cols + j);
      ASSERT_EQ(v, full[i * cols + j]) << "at " << i << "," << j;
    }
  }
  // Inside a Kokkos kernel (the same function on any backend).
  auto host = glorot_shard_in_kernel(random_key(42, stream), rows, cols, r0, r1, c0, c1);
  for (std::size_t i = r0; i < r1; ++i) {
    for (std::size_t j = c0; j < c1; ++j) {
      ASSERT_EQ(host(i - r0, j - c0), full[i * cols + j]);
    }
  }
}

TEST(Random, Uniform01Distribution) {
  const auto k = random_key(7, stream_id("uniform"));
  const std::uint64_t n = 1'000'000;
  double sum = 0.0, sum2 = 0.0;
  float lo = 1.0f, hi = 0.0f;
  std::vector<int> bins(10, 0);
  for (std::uint64_t i = 0; i < n; ++i) {
    const float u = uniform01(k, i);
    lo = std::min(lo, u);
    hi = std::max(hi, u);
    sum += u;
    sum2 += static_cast<double>(u) * u;
    ++bins[static_cast<std::size_t>(u * 10.0f)];
  }
  EXPECT_GE(lo, 0.0f);
  EXPECT_LT(hi, 1.0f);
  const double mean = sum / static_cast<double>(n);
  const double var = sum2 / static_cast<double>(n) - mean * mean;
  EXPECT_NEAR(mean, 0.5, 0.002);                    // sd of the mean: 0.00029
  EXPECT_NEAR(var, 1.0 / 12.0, 0.001);              // sd: 0.00008
  for (int b : bins) EXPECT_NEAR(b, 100000, 1500);  // sd: 300
  // The largest word maps below 1.
  EXPECT_LT(static_cast<float>(0xffffffffu >> 8) * 0x1p-24f, 1.0f);
}

TEST(Random, NormalDistribution) {
  const auto k = random_key(7, stream_id("normal"));
  const std::uint64_t n = 1'000'000;
  double sum = 0.0, sum2 = 0.0;
  std::uint64_t within1 = 0;
  for (std::uint64_t i = 0; i < n; ++i) {
    const float z = kdist::normal(k, i);
    ASSERT_TRUE(std::isfinite(z));
    sum += z;
    sum2 += static_cast<double>(z) * z;
    within1 += std::fabs(z) < 1.0f;
  }
  const double mean = sum / static_cast<double>(n);
  const double var = sum2 / static_cast<double>(n) - mean * mean;
  EXPECT_NEAR(mean, 0.0, 0.005);  // sd: 0.001
  EXPECT_NEAR(var, 1.0, 0.01);    // sd: 0.0014
  EXPECT_NEAR(static_cast<double>(within1) / static_cast<double>(n), 0.682689, 0.003);
}

TEST(Random, GlorotUniformBoundsAndMoments) {
  EXPECT_DOUBLE_EQ(kdist::glorot_limit(784, 200), std::sqrt(6.0 / 984.0));
  EXPECT_DOUBLE_EQ(kdist::glorot_limit(200, 10), std::sqrt(6.0 / 210.0));
  EXPECT_DOUBLE_EQ(kdist::glorot_limit(0, 0), std::sqrt(3.0));  // Keras' max(1, fan_avg)
  const std::uint64_t fan_in = 784, fan_out = 200;
  const double limit = kdist::glorot_limit(fan_in, fan_out);
  const auto k = random_key(1337, stream_id("d1/kernel"));
  double sum = 0.0, sum2 = 0.0;
  float lo = 1.0f, hi = -1.0f;
  const std::uint64_t n = fan_in * fan_out;
  for (std::uint64_t i = 0; i < n; ++i) {
    const float w = glorot_uniform(k, fan_in, fan_out, i);
    lo = std::min(lo, w);
    hi = std::max(hi, w);
    sum += w;
    sum2 += static_cast<double>(w) * w;
  }
  EXPECT_GE(lo, -static_cast<float>(limit));
  EXPECT_LE(hi, static_cast<float>(limit));
  EXPECT_LT(lo, -0.99 * limit);  // the whole range is used
  EXPECT_GT(hi, 0.99 * limit);
  const double mean = sum / static_cast<double>(n);
  const double var = sum2 / static_cast<double>(n) - mean * mean;
  EXPECT_NEAR(mean, 0.0, 0.01 * limit);
  EXPECT_NEAR(var, limit * limit / 3.0, 0.01 * limit * limit / 3.0);
}

TEST(Random, DropoutKeepFraction) {
  const std::uint64_t seed = 1337;
  const std::uint64_t stream = stream_id("dropout");
  const std::uint64_t n = 256 * 200 * 10;
  for (float rate : {0.1f, 0.4f, 0.75f}) {
    std::uint64_t kept = 0;
    for (std::uint64_t i = 0; i < n; ++i) kept += dropout_keep(seed, stream, 3, i, rate);
    EXPECT_NEAR(static_cast<double>(kept) / static_cast<double>(n), 1.0 - rate, 0.004)
        << "rate " << rate;
  }
  for (std::uint64_t i = 0; i < 10000; ++i) {
    EXPECT_TRUE(dropout_keep(seed, stream, 3, i, 0.0f));
  }
  // Masks of different steps are independent: both kept ~ 0.6 * 0.6.
  std::uint64_t both = 0;
  const std::uint64_t m = 200000;
  for (std::uint64_t i = 0; i < m; ++i) {
    both += dropout_keep(seed, stream, 0, i, 0.4f) && dropout_keep(seed, stream, 1, i, 0.4f);
  }
  EXPECT_NEAR(static_cast<double>(both) / static_cast<double>(m), 0.36, 0.005);
}

// ---- dropout's draws: all four words of each Philox evaluation ----------------------------------

// The scalar reference of dropout's mapping, written here from Random123 alone: element i is word
// (i / 16) % 4 of counter (i / 64) * 16 + i % 16, counter {lo, hi, lo(step), hi(step)}.
float reference_dropout_uniform(const kdist::RandomKey& k, std::uint64_t i) {
  const std::uint64_t c = (i / 64) * 16 + i % 16;
  philox4x32_ctr_t ctr = {{static_cast<std::uint32_t>(c), static_cast<std::uint32_t>(c >> 32),
                           static_cast<std::uint32_t>(k.step),
                           static_cast<std::uint32_t>(k.step >> 32)}};
  philox4x32_key_t key = {{k.k0, k.k1}};
  const auto r = philox4x32_R(10, ctr, key);
  return static_cast<float>(r.v[(i / 16) % 4] >> 8) * 0x1p-24f;
}

TEST(Random, DropoutUniformUsesEveryWordOfEachCounter) {
  const auto key = random_key(1337, stream_id("dropout"), 9);
  std::set<std::pair<std::uint64_t, int>> draws;
  for (std::uint64_t i = 0; i < 640; ++i) {
    EXPECT_EQ(kdist::dropout_uniform(key, i), reference_dropout_uniform(key, i)) << i;
    draws.insert({kdist::dropout_counter(i), kdist::dropout_word(i)});
  }
  // 640 elements: 160 counters, each giving its four words to four different elements.
  EXPECT_EQ(draws.size(), 640u);
  std::set<std::uint64_t> counters;
  for (const auto& d : draws) counters.insert(d.first);
  EXPECT_EQ(counters.size(), 160u);
  EXPECT_EQ(*counters.rbegin(), 159u);
  // Indices above 2^32 (the counter's high word) and a step above 2^32.
  const auto big = random_key(7, stream_id("dropout"), (1ull << 32) + 5);
  for (std::uint64_t i = (1ull << 38) - 70; i < (1ull << 38) + 70; ++i) {
    EXPECT_EQ(kdist::dropout_uniform(big, i), reference_dropout_uniform(big, i)) << i;
  }
  for (std::uint64_t i = 0; i < 1000; ++i) {
    EXPECT_EQ(dropout_keep(key, i, 0.4f), reference_dropout_uniform(key, i) < 0.6f) << i;
  }
}

TEST(Random, PhiloxLanesEqualTheScalarPhilox) {
  for (std::uint64_t step : {0ull, 3ull, (1ull << 32) + 1}) {
    const auto key = random_key(1337, stream_id("dropout"), step);
    for (std::uint64_t c0 : {0ull, 16ull, 1000ull, (1ull << 32) - 8, (1ull << 40) + 3}) {
      std::uint32_t words[64];
      kdist::philox_lanes(key, c0, words);
      for (int l = 0; l < 16; ++l) {
        const kdist::RandomBits b = kdist::random_bits(key, c0 + static_cast<std::uint64_t>(l));
        for (int w = 0; w < 4; ++w) {
          EXPECT_EQ(words[16 * w + l], b.word[w]) << "counter " << c0 + l << " word " << w;
        }
      }
    }
  }
}

TEST(Random, DropoutKeepLanesEqualTheScalarDecision) {
  const auto key = random_key(42, stream_id("block0/dropout"), 17);
  for (float rate : {0.0f, 0.1f, 0.4f, 0.5f, 0.999f, 1e-7f}) {
    const std::uint32_t threshold = kdist::dropout_threshold(rate);
    for (std::uint64_t group : {0ull, 1ull, 12345ull, (1ull << 30) + 1}) {
      std::uint8_t keep[64];
      kdist::dropout_keep_lanes(key, group, threshold, keep);
      for (std::uint64_t r = 0; r < 64; ++r) {
        EXPECT_EQ(keep[r] != 0, reference_dropout_uniform(key, 64 * group + r) < 1.0f - rate)
            << "rate " << rate << " element " << 64 * group + r;
      }
    }
  }
}

TEST(Random, DropoutThresholdIsTheFloatComparison) {
  // m kept iff m * 2^-24 < 1 - rate, for every 24-bit m near the threshold.
  for (float rate : {0.0f, 0.1f, 0.3f, 0.4f, 0.5f, 0.75f, 0.999f, 1e-7f, 0.99999994f}) {
    const std::uint32_t t = kdist::dropout_threshold(rate);
    EXPECT_LE(t, 1u << 24);
    for (std::int64_t d = -3; d <= 3; ++d) {
      const std::int64_t m = static_cast<std::int64_t>(t) + d;
      if (m < 0 || m >= (1 << 24)) continue;
      EXPECT_EQ(static_cast<std::uint32_t>(m) < t, static_cast<float>(m) * 0x1p-24f < 1.0f - rate)
          << "rate " << rate << " m " << m;
    }
  }
}

TEST(Random, DropoutKeepFractionOfEachWord) {
  // Each of the four words (and each lane) keeps 1 - rate of its elements.
  const auto key = random_key(1337, stream_id("dropout"), 4);
  const std::uint64_t n = 64 * 20000;
  std::uint64_t kept[4] = {0, 0, 0, 0};
  for (std::uint64_t i = 0; i < n; ++i) {
    kept[kdist::dropout_word(i)] += dropout_keep(key, i, 0.4f) ? 1 : 0;
  }
  for (int w = 0; w < 4; ++w) {
    EXPECT_NEAR(static_cast<double>(kept[w]) / static_cast<double>(n / 4), 0.6, 0.005)
        << "word " << w;
  }
  // Neighbours are independent: element i and i + 1 both kept ~ 0.36, and i and i + 16 (the
  // next word of the same counter).
  for (std::uint64_t shift : {1ull, 16ull, 64ull}) {
    std::uint64_t both = 0;
    for (std::uint64_t i = 0; i < n; ++i) {
      both += dropout_keep(key, i, 0.4f) && dropout_keep(key, i + shift, 0.4f);
    }
    EXPECT_NEAR(static_cast<double>(both) / static_cast<double>(n), 0.36, 0.004)
        << "shift " << shift;
  }
}

}  // namespace
