#pragma once
//! \file tensor/visualize_sharding.hpp
//! `kdist::visualize_sharding(tensor)`: a text picture of which device holds which block, drawn
//! as `jax.debug.visualize_array_sharding` does for 1-D and 2-D tensors; a per-device summary for
//! higher ranks. Pure function of replicated metadata: every process returns the same text.

#include <algorithm>
#include <cstddef>
#include <set>
#include <string>
#include <vector>

#include <kdist/core/concepts.hpp>
#include <kdist/core/detail/python_repr.hpp>
#include <kdist/tensor/detail/box.hpp>
#include <kdist/tensor/tensor.hpp>

namespace kdist {

namespace detail {
//! "cpu:0,4" for devices {cpu:0, cpu:4}: a shared "<type>:" prefix is written once.
inline std::string device_label(const std::vector<std::string>& names) {
  if (names.empty()) return "-";
  const auto colon = names[0].find(':');
  bool shared = colon != std::string::npos;
  for (const auto& n : names) {
    shared = shared && n.compare(0, colon + 1, names[0], 0, colon + 1) == 0;
  }
  std::string out = shared ? names[0].substr(0, colon + 1) : "";
  for (std::size_t i = 0; i < names.size(); ++i) {
    if (i) out += ",";
    out += shared ? names[i].substr(colon + 1) : names[i];
  }
  return out;
}

inline std::string pad_center(const std::string& s, std::size_t width) {
  const std::size_t left = (width - s.size()) / 2;
  return std::string(left, ' ') + s + std::string(width - s.size() - left, ' ');
}
}  // namespace detail

//! The picture, e.g. for a (8, 4) tensor with layout ('data', 'model') on a 2x2 mesh:
//! \code
//! ┌───────┬───────┐
//! │ cpu:0 │ cpu:1 │
//! ├───────┼───────┤
//! │ cpu:2 │ cpu:3 │
//! └───────┴───────┘
//! \endcode
template <class DataType, class MemorySpace>
std::string visualize_sharding(
    const DistributedTensor<DataType, RuntimeTensorLayout, MemorySpace>& t) {
  using Tensor = DistributedTensor<DataType, RuntimeTensorLayout, MemorySpace>;
  constexpr std::size_t R = Tensor::rank;
  const auto& mesh = t.device_mesh();
  std::vector<std::size_t> shape(t.shape().begin(), t.shape().end());
  std::string out = "shape=" + detail::shape_repr(shape) + " layout=" + t.layout().axes_repr();
  if (t.is_partial()) out += " partial=" + detail::join_quoted(t.partial_axes());
  out += "\n";
  std::vector<detail::Box<R>> blocks;
  for (std::size_t d = 0; d < mesh.size(); ++d) blocks.push_back(t.block_of(d));

  if constexpr (R > 2) {
    for (std::size_t d = 0; d < mesh.size(); ++d) {
      std::vector<std::string> lo, hi;
      for (std::size_t k = 0; k < R; ++k) {
        lo.push_back(std::to_string(blocks[d].lo[k]) + ":" +
                     std::to_string(blocks[d].lo[k] + blocks[d].ext[k]));
      }
      out += mesh.devices()[d] + " holds [" + detail::py_list(lo).substr(1);
      out.back() = ']';
      out += "\n";
    }
    return out;
  } else {
    // Cut points of each dimension: every block boundary.
    auto cuts = [&](std::size_t k) {
      std::set<std::size_t> c{0};
      if constexpr (R > 0) {
        if (k < R) {
          c.insert(t.shape()[k]);
          for (const auto& b : blocks) {
            if (b.volume() == 0) continue;
            c.insert(b.lo[k]);
            c.insert(b.lo[k] + b.ext[k]);
          }
        }
      }
      return std::vector<std::size_t>(c.begin(), c.end());
    };
    std::vector<std::size_t> rows = R == 2 ? cuts(0) : std::vector<std::size_t>{0, 1};
    std::vector<std::size_t> cols = R >= 1 ? cuts(R - 1) : std::vector<std::size_t>{0, 1};
    if (rows.size() < 2) rows = {0, 1};
    if (cols.size() < 2) cols = {0, 1};
    const std::size_t nr = rows.size() - 1, nc = cols.size() - 1;
    std::vector<std::vector<std::string>> label(nr, std::vector<std::string>(nc));
    std::size_t width = 1;
    for (std::size_t i = 0; i < nr; ++i) {
      for (std::size_t j = 0; j < nc; ++j) {
        std::vector<std::string> holders;
        for (std::size_t d = 0; d < mesh.size(); ++d) {
          const auto& b = blocks[d];
          bool holds = b.volume() != 0;
          if constexpr (R == 2) {
            holds = holds && b.lo[0] <= rows[i] && rows[i] < b.lo[0] + b.ext[0];
          }
          if constexpr (R >= 1) {
            holds = holds && b.lo[R - 1] <= cols[j] && cols[j] < b.lo[R - 1] + b.ext[R - 1];
          }
          if (holds) holders.push_back(mesh.devices()[d]);
        }
        label[i][j] = detail::device_label(holders);
        width = std::max(width, label[i][j].size());
      }
    }
    width += 2;
    std::string bar;
    for (std::size_t k = 0; k < width; ++k) bar += "─";
    auto line = [&](const char* l, const char* m, const char* r) {
      std::string s = l;
      for (std::size_t j = 0; j < nc; ++j) s += bar + (j + 1 < nc ? m : r);
      return s + "\n";
    };
    out += line("┌", "┬", "┐");
    for (std::size_t i = 0; i < nr; ++i) {
      out += "│";
      for (std::size_t j = 0; j < nc; ++j) out += detail::pad_center(label[i][j], width) + "│";
      out += "\n";
      out += i + 1 < nr ? line("├", "┼", "┤") : line("└", "┴", "┘");
    }
    return out;
  }
}

//! visualize_sharding of a typed tensor: that of its run-time tensor (spelled out for nvcc, whose
//! front end cannot deduce the run-time base of a typed tensor with static extents).
template <class DataType, TypedTensorLayout Layout, class MemorySpace>
std::string visualize_sharding(const DistributedTensor<DataType, Layout, MemorySpace>& t) {
  return visualize_sharding(t.runtime());
}

}  // namespace kdist
