#pragma once
//! \file core/redistribute_plan.hpp
//! `kdist::plan_redistribute`: how `kdist::redistribute` moves a tensor from one layout to
//! another, as a value. Planning apart from execution, as in PyTorch DTensor: this pure function
//! (std only: no MPI, no Kokkos) chooses the steps from the source layout, the mesh axes its sum
//! is pending over, the target layout and the global shape; tensor/redistribute.hpp runs them.
//! The transitions, DTensor's placement rules:
//!   same layout                    nothing (the block stays where it is)
//!   partial -> same layout         all_reduce over the pending axes
//!   partial -> one replicated dim  reduce_scatter over the pending axes along that dim
//!     sharded over exactly them
//!   partial -> any other layout    all_to_all of the overlapping boxes, summing the contributions
//!   every device already holds     local_copy, no communication (replicated -> shard)
//!     its target block
//!   every device keeps its block   all_gather (shard -> replicated)
//!     and lacks part of its target
//!   otherwise                      all_to_all of the overlapping boxes (shard(i) -> shard(j))
//! A plan is a list of steps; every plan made today has one. It prints:
//!
//! \code
//! kdist::plan_redistribute(whole, {"x"}, rows, shape).to_string();
//! // "<RedistributePlan (None, None) partial=['x'] -> ('x', None): reduce_scatter(sum) over
//! //  ['x'] along dimension 0>"
//! \endcode

#include <algorithm>
#include <cstddef>
#include <ostream>
#include <span>
#include <string>
#include <vector>

#include <kdist/core/detail/python_repr.hpp>
#include <kdist/core/error.hpp>
#include <kdist/core/runtime_layout.hpp>
#include <kdist/core/runtime_mesh.hpp>

namespace kdist {

//! One step of a redistribution plan.
struct RedistributeStep {
  enum class Kind {
    nothing,         //!< the layout is unchanged: no data moves
    local_copy,      //!< each device copies its target block out of its own block
    all_reduce,      //!< sum over `axes` (a pending sum resolved in place)
    reduce_scatter,  //!< sum over `axes`, each device keeping its block along `dim`
    all_gather,      //!< each device keeps its block and receives the rest of its target block
    all_to_all,      //!< each device sends each other exactly the overlap (summing over `axes`)
  };
  Kind kind = Kind::nothing;
  //! The mesh axes of the step: all_reduce, the pending axes (sorted); reduce_scatter, the
  //! target's axes of `dim` in the target's order (the communicator ranks row-major over them);
  //! all_to_all, the pending axes it sums over (none for a complete tensor).
  std::vector<std::string> axes;
  std::size_t dim = 0;  //!< reduce_scatter: the tensor dimension it scatters

  //! Whether the step moves data between devices.
  bool communicates() const { return kind != Kind::nothing && kind != Kind::local_copy; }

  //! "all_reduce(sum) over ['model']", "reduce_scatter(sum) over ['x'] along dimension 0",
  //! "all_gather", "all_to_all summing over ['x']", "local_copy", "nothing".
  std::string to_string() const {
    switch (kind) {
      case Kind::nothing:
        return "nothing";
      case Kind::local_copy:
        return "local_copy";
      case Kind::all_reduce:
        return "all_reduce(sum) over " + detail::join_quoted(axes);
      case Kind::reduce_scatter:
        return "reduce_scatter(sum) over " + detail::join_quoted(axes) + " along dimension " +
               std::to_string(dim);
      case Kind::all_gather:
        return "all_gather";
      case Kind::all_to_all:
        return axes.empty() ? "all_to_all" : "all_to_all summing over " + detail::join_quoted(axes);
    }
    return "?";
  }
  friend bool operator==(const RedistributeStep&, const RedistributeStep&) = default;
};

//! The steps that move a tensor from one layout to another, with the two layouts as Python prints
//! their axes (the source with its pending sum: `(None, None) partial=['x']`).
struct RedistributePlan {
  std::string source, target;
  std::vector<RedistributeStep> steps;

  //! Whether any step moves data between devices.
  bool communicates() const {
    return std::any_of(steps.begin(), steps.end(),
                       [](const RedistributeStep& s) { return s.communicates(); });
  }
  //! `<RedistributePlan ('x', None) -> (None, None): all_gather>`
  std::string to_string() const {
    std::string out = "<RedistributePlan " + source + " -> " + target + ":";
    for (std::size_t i = 0; i < steps.size(); ++i) out += (i ? "; " : " ") + steps[i].to_string();
    return out + ">";
  }
  friend std::ostream& operator<<(std::ostream& os, const RedistributePlan& p) {
    return os << p.to_string();
  }
};

namespace detail {
//! The dimension a pending sum over `partial` (sorted) can be reduce-scattered along from
//! `source` into `target`: they are equal except in that one dimension, replicated in `source`
//! and sharded in `target` over exactly the pending axes. `source.rank()` when there is none.
inline std::size_t reduce_scatter_dim(const RuntimeTensorLayout& source,
                                      const std::vector<std::string>& partial,
                                      const RuntimeTensorLayout& target) {
  const std::size_t R = source.rank();
  if (partial.empty() || target.division() != source.division()) return R;
  std::size_t found = R;
  for (std::size_t d = 0; d < R; ++d) {
    const auto& src = source.axes()[d];
    const auto& dst = target.axes()[d];
    if (src == dst) continue;
    if (found != R || !src.is_replicated()) return R;
    auto names = dst.names();
    std::sort(names.begin(), names.end());
    if (names != partial) return R;
    found = d;
  }
  return found;
}

//! Whether the box (lo, ext) of `inner` lies in `outer`'s (an empty box lies anywhere).
inline bool box_inside(const std::vector<std::size_t>& inner_lo,
                       const std::vector<std::size_t>& inner_ext,
                       const std::vector<std::size_t>& outer_lo,
                       const std::vector<std::size_t>& outer_ext) {
  for (auto e : inner_ext) {
    if (e == 0) return true;
  }
  for (std::size_t d = 0; d < inner_lo.size(); ++d) {
    if (inner_lo[d] < outer_lo[d] || inner_lo[d] + inner_ext[d] > outer_lo[d] + outer_ext[d]) {
      return false;
    }
  }
  return true;
}
}  // namespace detail

//! The plan that moves a tensor of global `shape`, laid out by `source` and pending a sum over
//! the mesh axes `partial_axes` (none: complete), to the layout `target`. Pure: the same answer on
//! every process, no communication. The pending axes are taken as a tensor holds them: sorted,
//! axes of extent 1 dropped (such a sum is complete).
//!
//! Errors (ValueError): a layout without a mesh, layouts on two meshes, a shape of another rank
//! than the layouts' or one a layout's even division forbids, a pending axis the mesh lacks.
inline RedistributePlan plan_redistribute(const RuntimeTensorLayout& source,
                                          std::vector<std::string> partial_axes,
                                          const RuntimeTensorLayout& target,
                                          std::span<const std::size_t> shape) {
  if (!source.device_mesh() || !target.device_mesh() ||
      !(*source.device_mesh() == *target.device_mesh())) {
    throw ValueError("kdist::plan_redistribute: layout " + source.to_string() +
                     " cannot move to layout " + target.to_string() +
                     ": both need the same device mesh");
  }
  source.check_shape(shape);
  target.check_shape(shape);
  const RuntimeDeviceMesh& mesh = *source.device_mesh();
  std::erase_if(partial_axes,
                [&](const std::string& a) { return mesh.extent(mesh.axis_index(a)) == 1; });
  std::sort(partial_axes.begin(), partial_axes.end());
  partial_axes.erase(std::unique(partial_axes.begin(), partial_axes.end()), partial_axes.end());

  RedistributePlan plan;
  plan.source = source.axes_repr();
  if (!partial_axes.empty()) plan.source += " partial=" + detail::join_quoted(partial_axes);
  plan.target = target.axes_repr();
  using Kind = RedistributeStep::Kind;
  const bool same = source.axes() == target.axes() && source.division() == target.division();
  if (!partial_axes.empty()) {
    if (same) {
      plan.steps.push_back({Kind::all_reduce, partial_axes, 0});
    } else if (const std::size_t d = detail::reduce_scatter_dim(source, partial_axes, target);
               d < source.rank()) {
      plan.steps.push_back({Kind::reduce_scatter, target.axes()[d].names(), d});
    } else {
      plan.steps.push_back({Kind::all_to_all, partial_axes, 0});
    }
    return plan;
  }
  if (same) {
    plan.steps.push_back({Kind::nothing, {}, 0});
    return plan;
  }
  // A complete tensor: compare each device's blocks.
  bool inside = true, covers = true;
  for (std::size_t dev = 0; dev < mesh.size() && (inside || covers); ++dev) {
    const auto s_lo = source.offsets(shape, dev), s_ext = source.local_extents(shape, dev);
    const auto t_lo = target.offsets(shape, dev), t_ext = target.local_extents(shape, dev);
    inside = inside && detail::box_inside(t_lo, t_ext, s_lo, s_ext);
    covers = covers && detail::box_inside(s_lo, s_ext, t_lo, t_ext);
  }
  const Kind kind = inside ? Kind::local_copy : covers ? Kind::all_gather : Kind::all_to_all;
  plan.steps.push_back({kind, {}, 0});
  return plan;
}

}  // namespace kdist
