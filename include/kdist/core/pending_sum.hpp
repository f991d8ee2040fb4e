#pragma once
//! \file core/pending_sum.hpp
//! `kdist::PendingSum<Layout, Axes>`: the layout of a tensor that is a pending sum over mesh axes
//! `Axes` (PyTorch DTensor's Partial placement), as a type. A typed
//! `kdist::DistributedTensor<T, PendingSum<L, "model">>` is what a row-parallel `kdist::matmul`
//! returns: each process holds one summand, so reading or writing its values (`local()`, an
//! optimizer step) does not compile; `kdist::redistribute` to a layout resolves the sum.

#include <array>
#include <cstddef>
#include <string_view>

#include <kdist/core/detail/fixed_string.hpp>
#include <kdist/core/dim_spec.hpp>
#include <kdist/core/error.hpp>
#include <kdist/core/layout.hpp>

namespace kdist {

namespace error {
//! `PendingSum<Layout, Axes>` whose `Layout` is not a static kdist::TensorLayout.
template <class Layout>
struct pending_sum_of_something_that_is_not_a_tensor_layout;
//! Mesh axis `AxisName` both shards the tensor (layout `Layout`) and holds a pending sum over
//! it: a sum is pending over the axes a tensor is replicated over only.
template <class AxisName, class Layout>
struct pending_sum_over_an_axis_that_shards_the_tensor;
}  // namespace error

namespace detail {
//! The DimSpec a sum is pending over (names of mesh axes), as a rank-1 layout on `Mesh`: that
//! layout's own checks say whether each name is an axis of the mesh, used once.
template <class Layout, DimSpec Axes>
using pending_axes_check = BasicTensorLayout<typename Layout::mesh_type, Division::chunk, Axes>;

//! Index of the first axis of `axes` that one of `dims` shards over, or axes.size().
template <std::size_t N>
constexpr std::size_t first_axis_also_sharding(const DimSpec& axes,
                                               const std::array<DimSpec, N>& dims) {
  for (std::size_t k = 0; k < axes.size(); ++k) {
    for (const auto& d : dims) {
      for (std::size_t j = 0; j < d.size(); ++j) {
        if (d.axis(j) == axes.axis(k)) return k;
      }
    }
  }
  return axes.size();
}
}  // namespace detail

//! The layout `Layout` (a kdist::TensorLayout) of a tensor that is a pending sum over the mesh
//! axes `Axes` (one name, `"model"`, or several, `kdist::axes<"data", "model">`). A tag type: it
//! names a tensor's state in `kdist::DistributedTensor<DataType, PendingSum<...>>` and is never
//! built.
//!
//! Compile errors: `Layout` not a TensorLayout; an axis the mesh lacks (TensorLayout's error);
//! an axis that also shards the tensor
//! (`error::pending_sum_over_an_axis_that_shards_the_tensor<"model", "('model', None)">`).
template <class Layout, DimSpec Axes>
class PendingSum {
  static_assert(
      detail::diagnose<is_tensor_layout_v<Layout>,
                       error::pending_sum_of_something_that_is_not_a_tensor_layout<Layout>>::value,
      "kdist::PendingSum<Layout, Axes>: Layout must be a kdist::TensorLayout<Mesh, ...>");
  static_assert(Axes.size() > 0,
                "kdist::PendingSum<Layout, Axes>: name at least one mesh axis the sum is pending "
                "over; a tensor with no pending sum has the layout `Layout` itself");
  static constexpr std::size_t also_sharding_ = [] {
    if constexpr (is_tensor_layout_v<Layout>) {
      return detail::first_axis_also_sharding(Axes, Layout::dims());
    } else {
      return Axes.size();
    }
  }();

 public:
  using layout_type = Layout;
  using mesh_type = typename layout_type::mesh_type;
  //! The mesh axes the sum is pending over.
  static constexpr DimSpec axes() { return Axes; }

 private:
  static_assert(sizeof(detail::pending_axes_check<Layout, Axes>) > 0);  // the names' checks
  static_assert(
      detail::diagnose<also_sharding_ == Axes.size(),
                       error::pending_sum_over_an_axis_that_shards_the_tensor<
                           detail::diagnostic_name<detail::dim_axis_name<
                               Axes, (also_sharding_ < Axes.size() ? also_sharding_ : 0)>>,
                           detail::diagnostic_name<Layout::axes_repr_string()>>>::value,
      "kdist::PendingSum: a mesh axis cannot both shard the tensor and hold a pending sum over it");
};

template <class T>
inline constexpr bool is_pending_sum_v = false;
template <class Layout, DimSpec Axes>
inline constexpr bool is_pending_sum_v<PendingSum<Layout, Axes>> = true;

//! Whether `L` is a static layout a typed tensor can have: a TensorLayout or a PendingSum of one.
template <class L>
inline constexpr bool is_static_tensor_layout_v = is_tensor_layout_v<L> || is_pending_sum_v<L>;

namespace detail {
//! The TensorLayout of a static layout (itself, or a PendingSum's), and the axes a sum is
//! pending over (none for a TensorLayout).
template <class L>
struct static_layout_parts {
  using layout_type = L;
  static constexpr DimSpec pending = replicated;
};
template <class Layout, DimSpec Axes>
struct static_layout_parts<PendingSum<Layout, Axes>> {
  using layout_type = Layout;
  static constexpr DimSpec pending = PendingSum<Layout, Axes>::axes();  // runs its checks
};
}  // namespace detail

//! The layout after resolving a pending sum: `Layout` for both `Layout` and
//! `PendingSum<Layout, Axes>`.
template <class L>
using resolved_layout_t = typename detail::static_layout_parts<L>::layout_type;

}  // namespace kdist
