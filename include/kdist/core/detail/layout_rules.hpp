#pragma once
// The rules a layout obeys on a mesh, written once: constexpr functions over the layout's axis
// names per dimension and the mesh's axis lookup, used by the static TensorLayout<Mesh, ...> (in
// static_asserts naming the offender) and by RuntimeTensorLayout (as Keras' ValueErrors). In
// order: every name is an axis of the mesh (Keras' check), then no mesh axis shards two
// dimensions or one dimension twice (kdist's: a tensor cannot be split twice over one axis).

#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <kdist/core/detail/python_repr.hpp>
#include <kdist/core/error.hpp>

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

//! None / 'model' / ('data', 'model'): one layout entry (its mesh axis `names`) as Python prints it.
template <class Names>
std::string dim_repr(const Names& names) {
  std::vector<std::string> q;
  for (const auto& n : names) q.push_back(py_str(std::string_view(n)));
  if (q.empty()) return "None";
  if (q.size() == 1) return q[0];
  return py_tuple(q);
}

//! The run-time errors of a layout applied to a shape, one wording for TensorLayout and
//! RuntimeTensorLayout. Dimension `d` of `shape`, over `shards` shards of entry `dim` of layout
//! `axes`, does not divide evenly and the layout demands even division.
[[noreturn]] inline void throw_not_evenly_divisible(std::size_t d,
                                                    std::span<const std::size_t> shape,
                                                    std::size_t shards, std::string_view dim,
                                                    std::string_view axes) {
  throw ValueError("kdist::TensorLayout: dimension " + std::to_string(d) + " of shape " +
                   shape_repr(shape) + " has extent " + std::to_string(shape[d]) + ", which the " +
                   std::to_string(shards) + " shards of " + std::string(dim) +
                   " cannot divide evenly, and layout " + std::string(axes) +
                   " demands even division; use a multiple of " + std::to_string(shards) +
                   " or a layout with Division::chunk");
}

//! `index` must name an element of a tensor of `shape`.
inline void check_index_in_shape(std::span<const std::size_t> shape,
                                 std::span<const std::size_t> index) {
  bool ok = index.size() == shape.size();
  for (std::size_t d = 0; ok && d < shape.size(); ++d) ok = index[d] < shape[d];
  if (!ok) {
    throw ValueError("kdist::TensorLayout: index " + shape_repr(index) +
                     " is out of range for a tensor of shape " + shape_repr(shape));
  }
}

}  // namespace kdist::detail
