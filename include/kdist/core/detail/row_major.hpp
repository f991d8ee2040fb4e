#pragma once
// Row-major conversion between a flat index and coordinates, as np.reshape(devices, shape) lays
// devices out on a mesh. constexpr so static meshes compute at compile time.

#include <cstddef>
#include <limits>
#include <optional>

namespace kdist::detail {

template <class Extents>
constexpr std::size_t product(const Extents& extents) {
  std::size_t p = 1;
  for (auto e : extents) p *= static_cast<std::size_t>(e);
  return p;
}

//! The product of `extents`, or nullopt when it does not fit std::size_t (validation of shapes
//! from users and files: a wrapped product would accept a mesh of 2^32 x 2^32 for 0 devices).
template <class Extents>
constexpr std::optional<std::size_t> checked_product(const Extents& extents) {
  std::size_t p = 1;
  for (auto x : extents) {
    const auto e = static_cast<std::size_t>(x);
    if (e != 0 && p > std::numeric_limits<std::size_t>::max() / e) return std::nullopt;
    p *= e;
  }
  return p;
}

//! coords[r] for flat `index` in a row-major grid of `extents` (last axis fastest).
template <class Extents, class Coords>
constexpr void unflatten(const Extents& extents, std::size_t index, Coords& coords) {
  for (std::size_t r = extents.size(); r-- > 0;) {
    const auto e = static_cast<std::size_t>(extents[r]);
    coords[r] = index % e;
    index /= e;
  }
}

template <class Extents, class Coords>
constexpr std::size_t flatten(const Extents& extents, const Coords& coords) {
  std::size_t index = 0;
  for (std::size_t r = 0; r < extents.size(); ++r) {
    index = index * static_cast<std::size_t>(extents[r]) + static_cast<std::size_t>(coords[r]);
  }
  return index;
}

}  // namespace kdist::detail
