// kdist/core/detail/shard_math.hpp: the one implementation of shard arithmetic (ceil-division "chunk"
// blocks as torch.chunk; row-major groups of mesh axes).
#include <kdist/core/detail/row_major.hpp>
#include <kdist/core/detail/shard_math.hpp>

#include <gtest/gtest.h>

#include <array>
#include <cstddef>
#include <limits>
#include <vector>

namespace {

using kdist::Block;
using kdist::detail::chunk_block;
using kdist::detail::chunk_owner;
using kdist::detail::chunk_size;

std::vector<Block> blocks(std::size_t global, std::size_t parts) {
  std::vector<Block> out;
  for (std::size_t i = 0; i < parts; ++i) out.push_back(chunk_block(global, parts, i));
  return out;
}

TEST(ShardMath, EvenSizes) {
  EXPECT_EQ(blocks(8, 4), (std::vector<Block>{{0, 2}, {2, 2}, {4, 2}, {6, 2}}));
  EXPECT_EQ(blocks(200, 4)[3], (Block{150, 50}));
  EXPECT_EQ(blocks(784, 1), (std::vector<Block>{{0, 784}}));
}

TEST(ShardMath, UnevenSizesFollowTorchChunk) {
  // torch.chunk(torch.arange(10), 4) -> sizes 3, 3, 3, 1
  EXPECT_EQ(blocks(10, 4), (std::vector<Block>{{0, 3}, {3, 3}, {6, 3}, {9, 1}}));
  // 2 over 4 -> 1, 1, 0, 0: trailing blocks are empty, their offset clamped to the end
  EXPECT_EQ(blocks(2, 4), (std::vector<Block>{{0, 1}, {1, 1}, {2, 0}, {2, 0}}));
  // torch.chunk(torch.arange(5), 4) -> 2, 2, 1 (and a fourth, empty, block here)
  EXPECT_EQ(blocks(5, 4), (std::vector<Block>{{0, 2}, {2, 2}, {4, 1}, {5, 0}}));
  // 6 over 4: ceil 2 -> 2, 2, 2, 0 (not 2, 2, 1, 1: the rule is ceil-division, not balanced)
  EXPECT_EQ(blocks(6, 4), (std::vector<Block>{{0, 2}, {2, 2}, {4, 2}, {6, 0}}));
  // 0 elements: every block empty
  EXPECT_EQ(blocks(0, 3), (std::vector<Block>{{0, 0}, {0, 0}, {0, 0}}));
}

TEST(ShardMath, ChunkSize) {
  EXPECT_EQ(chunk_size(10, 4), 3u);
  EXPECT_EQ(chunk_size(8, 4), 2u);
  EXPECT_EQ(chunk_size(1, 8), 1u);
  EXPECT_EQ(chunk_size(0, 8), 0u);
  EXPECT_EQ(chunk_size(7, 1), 7u);
}

// Extents near 2^64: (global + parts - 1) / parts would wrap to a tiny block size, and
// index * block would wrap past the end. Both are computed without overflow.
TEST(ShardMath, ExtentsNear2To64DoNotOverflow) {
  constexpr std::size_t max = std::numeric_limits<std::size_t>::max();
  EXPECT_EQ(chunk_size(max, 2), max / 2 + 1);
  EXPECT_EQ(chunk_size(max, 1), max);
  EXPECT_EQ(chunk_size(max - 1, max), 1u);
  EXPECT_EQ(chunk_block(max, 2, 0), (Block{0, max / 2 + 1}));
  EXPECT_EQ(chunk_block(max, 2, 1), (Block{max / 2 + 1, max / 2}));
  // 3 parts of 2^64 - 1: blocks of 6148914691236517205, the last one exactly reaches the end
  const std::size_t b = chunk_size(max, 3);
  EXPECT_EQ(chunk_block(max, 3, 2), (Block{2 * b, max - 2 * b}));
  // an index far past the last block clamps to an empty block at the end
  EXPECT_EQ(chunk_block(max, 2, max), (Block{max, 0}));
  EXPECT_EQ(chunk_owner(max, 2, max - 1), 1u);
}

// Blocks tile [0, global) exactly, in order, and chunk_owner agrees with them, for every size up
// to 40 over 1..9 parts.
TEST(ShardMath, BlocksTileAndOwnersAgree) {
  for (std::size_t parts = 1; parts <= 9; ++parts) {
    for (std::size_t global = 0; global <= 40; ++global) {
      std::size_t next = 0;
      for (std::size_t p = 0; p < parts; ++p) {
        const Block b = chunk_block(global, parts, p);
        EXPECT_EQ(b.offset, next) << global << " over " << parts << ", block " << p;
        EXPECT_LE(b.extent, chunk_size(global, parts));
        for (std::size_t i = b.offset; i < b.offset + b.extent; ++i) {
          EXPECT_EQ(chunk_owner(global, parts, i), p) << "element " << i << " of " << global;
        }
        next = b.offset + b.extent;
      }
      EXPECT_EQ(next, global) << global << " over " << parts;
    }
  }
}

// A dimension sharded over mesh axes (1, 0) of a (2, 3, 4) mesh: 3 * 2 = 6 shards, the first
// listed axis major.
TEST(ShardMath, GroupsAreRowMajorOverTheListedAxes) {
  const std::array<std::size_t, 3> extents{2, 3, 4};
  const std::array<std::size_t, 2> axes{1, 0};
  EXPECT_EQ(kdist::detail::group_size(axes, 2, extents), 6u);
  EXPECT_EQ(kdist::detail::group_size(axes, 0, extents), 1u);  // replicated: one shard
  // coords (data=1, x=2, model=*): index = x * 2 + data = 5
  EXPECT_EQ(kdist::detail::group_index(axes, 2, extents, std::array<std::size_t, 3>{1, 2, 3}), 5u);
  EXPECT_EQ(kdist::detail::group_index(axes, 2, extents, std::array<std::size_t, 3>{0, 1, 0}), 2u);
  EXPECT_EQ(kdist::detail::group_index(axes, 0, extents, std::array<std::size_t, 3>{1, 2, 3}), 0u);

  // set_group_coords inverts group_index and leaves the other axes alone.
  for (std::size_t idx = 0; idx < 6; ++idx) {
    std::array<std::size_t, 3> c{9, 9, 7};
    kdist::detail::set_group_coords(axes, 2, extents, idx, c);
    EXPECT_EQ(c[2], 7u);
    EXPECT_EQ(kdist::detail::group_index(axes, 2, extents, c), idx);
  }
}

TEST(ShardMath, RowMajorFlattenRoundTrip) {
  const std::array<std::size_t, 3> extents{2, 3, 4};
  EXPECT_EQ(kdist::detail::product(extents), 24u);
  std::array<std::size_t, 3> c{};
  kdist::detail::unflatten(extents, 23, c);
  EXPECT_EQ(c, (std::array<std::size_t, 3>{1, 2, 3}));
  kdist::detail::unflatten(extents, 5, c);  // last axis fastest
  EXPECT_EQ(c, (std::array<std::size_t, 3>{0, 1, 1}));
  for (std::size_t i = 0; i < 24; ++i) {
    kdist::detail::unflatten(extents, i, c);
    EXPECT_EQ(kdist::detail::flatten(extents, c), i);
  }
}

TEST(ShardMath, Constexpr) {
  static_assert(chunk_block(10, 4, 3) == Block{9, 1});
  static_assert(chunk_owner(10, 4, 9) == 3);
  constexpr std::array<std::size_t, 2> extents{2, 4};
  constexpr std::array<std::size_t, 2> axes{0, 1};
  constexpr std::array<std::size_t, 2> coords{1, 1};
  static_assert(kdist::detail::group_index(axes, 2, extents, coords) == 5);
  SUCCEED();
}

TEST(ShardMath, DivisionValues) {
  EXPECT_NE(kdist::Division::chunk, kdist::Division::even);
  EXPECT_EQ((Block{1, 2}), (Block{1, 2}));
  EXPECT_NE((Block{1, 2}), (Block{2, 1}));
}

}  // namespace
