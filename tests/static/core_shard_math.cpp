// Compile-time facts of the shard arithmetic (ceil-division "chunk" rule). Built = passed.
#include <kdist/core/detail/row_major.hpp>
#include <kdist/core/detail/shard_math.hpp>

#include <array>

namespace {

using kdist::Block;
using kdist::detail::chunk_block;
using kdist::detail::chunk_owner;
using kdist::detail::chunk_size;

static_assert(chunk_size(10, 4) == 3 && chunk_size(8, 4) == 2 && chunk_size(0, 4) == 0);
static_assert(chunk_block(10, 4, 0) == Block{0, 3} && chunk_block(10, 4, 3) == Block{9, 1});
static_assert(chunk_block(2, 4, 2) == Block{2, 0} && chunk_block(2, 4, 3) == Block{2, 0});
static_assert(chunk_owner(10, 4, 8) == 2 && chunk_owner(10, 4, 9) == 3);

// Every block tiles [0, N) for N <= 64 over 1..8 parts, and owners agree.
constexpr bool tiles() {
  for (std::size_t parts = 1; parts <= 8; ++parts) {
    for (std::size_t n = 0; n <= 64; ++n) {
      std::size_t next = 0;
      for (std::size_t p = 0; p < parts; ++p) {
        const Block b = chunk_block(n, parts, p);
        if (b.offset != next) return false;
        for (std::size_t i = b.offset; i < b.offset + b.extent; ++i) {
          if (chunk_owner(n, parts, i) != p) return false;
        }
        next = b.offset + b.extent;
      }
      if (next != n) return false;
    }
  }
  return true;
}
static_assert(tiles());

constexpr std::array<std::size_t, 3> extents{2, 3, 4};
constexpr bool round_trip() {
  std::array<std::size_t, 3> c{};
  for (std::size_t i = 0; i < 24; ++i) {
    kdist::detail::unflatten(extents, i, c);
    if (kdist::detail::flatten(extents, c) != i) return false;
  }
  kdist::detail::unflatten(extents, 23, c);
  return c == std::array<std::size_t, 3>{1, 2, 3};
}
static_assert(round_trip());

constexpr std::array<std::size_t, 2> axes_ym{1, 0};
static_assert(kdist::detail::group_size(axes_ym, 2, extents) == 6);
constexpr std::array<std::size_t, 3> at_1_2_0{1, 2, 0};
static_assert(kdist::detail::group_index(axes_ym, 2, extents, at_1_2_0) == 5);

}  // namespace
