#pragma once
// The rules a layout obeys on a mesh, written once: constexpr functions over the layout's axis
// names per dimension and the mesh's axis lookup, used by the static TensorLayout<Mesh, ...> (in
// static_asserts naming the offender) and by RuntimeTensorLayout (as Keras' ValueErrors). In
// order: every name is an axis of the mesh (Keras' check), then no mesh axis shards two
// dimensions or one dimension twice (kdist's: a tensor cannot be split twice over one axis).

#include <cstddef>
#include <optional>
#include <string_view>

namespace kdist::detail {

//! A position in a layout: name `k` of dimension `dim`; `found` false when there is none.
//! For a reused axis, `earlier_dim` is the dimension that used it first.
struct LayoutAxisRef {
  std::size_t dim = 0, k = 0;
  bool found = false;
  std::size_t earlier_dim = 0;
};

//! The first name that `find(name)` (the mesh's lookup: an optional axis index) does not know.
//! `count(d)` is the number of names of dimension d, `name(d, k)` the k-th.
template <class Count, class Name, class Find>
constexpr LayoutAxisRef first_unknown_axis(std::size_t rank, Count count, Name name, Find find) {
  for (std::size_t d = 0; d < rank; ++d) {
    for (std::size_t k = 0; k < count(d); ++k) {
      if (!find(std::string_view(name(d, k)))) return {d, k, true, 0};
    }
  }
  return {};
}

//! The first name whose mesh axis an earlier name of the layout already uses (names the mesh
//! does not know are skipped: first_unknown_axis reports them).
template <class Count, class Name, class Find>
constexpr LayoutAxisRef first_reused_axis(std::size_t rank, Count count, Name name, Find find) {
  for (std::size_t d = 0; d < rank; ++d) {
    for (std::size_t k = 0; k < count(d); ++k) {
      const std::optional<std::size_t> axis = find(std::string_view(name(d, k)));
      if (!axis) continue;
      for (std::size_t e = 0; e <= d; ++e) {
        for (std::size_t j = 0; j < (e == d ? k : count(e)); ++j) {
          if (find(std::string_view(name(e, j))) == axis) return {d, k, true, e};
        }
      }
    }
  }
  return {};
}

}  // namespace kdist::detail
