#pragma once
// The one implementation of shard arithmetic, shared by static and run-time layouts. constexpr
// so static layouts on static meshes compute at compile time.
//
// Rule for sizes the shards do not divide (torch.chunk): every block has ceil(N / parts)
// elements, trailing blocks may be smaller or empty.

#include <algorithm>
#include <cstddef>

namespace kdist {

//! The part of one tensor dimension a device holds: global offset and local extent.
struct Block {
  std::size_t offset = 0;
  std::size_t extent = 0;
  friend constexpr bool operator==(const Block&, const Block&) = default;
};

//! How a layout treats a dimension its shards do not divide.
enum class Division {
  chunk,  //!< ceil-division blocks (torch.chunk): trailing blocks may be smaller or empty
  even,   //!< every block the same size; any other shape is an error
};

}  // namespace kdist

namespace kdist::detail {

//! ceil(global / parts), without the overflow of (global + parts - 1) / parts near 2^64.
constexpr std::size_t chunk_size(std::size_t global, std::size_t parts) {
  return parts == 0 ? global : global / parts + (global % parts != 0 ? 1 : 0);
}

constexpr Block chunk_block(std::size_t global, std::size_t parts, std::size_t index) {
  const std::size_t b = chunk_size(global, parts);
  // index * b, clamped to global without overflowing
  const std::size_t offset = (b == 0 || index > global / b) ? global : std::min(index * b, global);
  return {offset, std::min(b, global - offset)};
}

//! Which block holds global position i (i < global).
constexpr std::size_t chunk_owner(std::size_t global, std::size_t parts, std::size_t i) {
  const std::size_t b = chunk_size(global, parts);
  return b == 0 ? 0 : i / b;
}

//! Number of shards of a dimension sharded over mesh axes `axes` (indices into `extents`).
template <class Axes, class Extents>
constexpr std::size_t group_size(const Axes& axes, std::size_t count, const Extents& extents) {
  std::size_t p = 1;
  for (std::size_t k = 0; k < count; ++k) p *= static_cast<std::size_t>(extents[axes[k]]);
  return p;
}

//! The shard index of a device at `coords` along a dimension sharded over `axes`: row-major over
//! the axes in the order listed (JAX P(('x', 'y')): x major, y minor).
template <class Axes, class Extents, class Coords>
constexpr std::size_t group_index(const Axes& axes, std::size_t count, const Extents& extents,
                                  const Coords& coords) {
  std::size_t idx = 0;
  for (std::size_t k = 0; k < count; ++k) {
    idx = idx * static_cast<std::size_t>(extents[axes[k]]) +
          static_cast<std::size_t>(coords[axes[k]]);
  }
  return idx;
}

//! Inverse of group_index: set coords[axes[k]] so that the group index is `idx`.
template <class Axes, class Extents, class Coords>
constexpr void set_group_coords(const Axes& axes, std::size_t count, const Extents& extents,
                                std::size_t idx, Coords& coords) {
  for (std::size_t k = count; k-- > 0;) {
    const auto e = static_cast<std::size_t>(extents[axes[k]]);
    coords[axes[k]] = idx % e;
    idx /= e;
  }
}

}  // namespace kdist::detail
