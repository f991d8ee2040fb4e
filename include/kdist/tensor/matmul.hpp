#pragma once
//! \file tensor/matmul.hpp
//! `kdist::matmul(A, B)`: the product of two distributed matrices, with the communication its
//! layouts call for (Megatron's column / row parallelism, as PyTorch DTensor derives it):
//!   contraction dimension sharded alike in A and B   local product, result a pending sum over
//!                                                    those axes (row-parallel)
//!   contraction dimension replicated in one operand  that operand is sliced locally to the
//!                                                    other's block, no communication
//!   contraction dimension replicated in both         local product (column-parallel when B's
//!                                                    columns are sharded)
//! The result is laid out (A's row axes, B's column axes). Resolve a pending sum with
//! kdist::redistribute (all-reduce to replicated, reduce-scatter to a shard). Local products
//! run through kdist::ops::matmul (Eigen on host memory, Kokkos kernels elsewhere).

#include <algorithm>
#include <array>
#include <cstddef>
#include <string>
#include <type_traits>
#include <vector>

#include <Kokkos_Core.hpp>

#include <kdist/parallel/profiling_region.hpp>
#include <kdist/tensor/detail/data_type_extents.hpp>
#include <kdist/core/dim_spec.hpp>
#include <kdist/core/error.hpp>
#include <kdist/core/layout.hpp>
#include <kdist/ops/matmul.hpp>
#include <kdist/core/pending_sum.hpp>
#include <kdist/tensor/redistribute.hpp>
#include <kdist/core/runtime_layout.hpp>
#include <kdist/tensor/tensor.hpp>

namespace kdist {

namespace detail {
inline std::vector<std::string> axis_names_of(const RuntimeTensorLayout& l, std::size_t d) {
  return l.axes()[d].names();
}
inline bool overlaps(const std::vector<std::string>& a, const std::vector<std::string>& b) {
  for (const auto& x : a) {
    if (std::find(b.begin(), b.end(), x) != b.end()) return true;
  }
  return false;
}

//! The columns [lo, lo + n) (or rows, for `rows`) of a LayoutRight matrix, as a contiguous copy.
template <class View>
View slice(const View& v, bool rows, std::size_t lo, std::size_t n) {
  if (rows && lo == 0 && n == v.extent(0)) return v;
  if (!rows && lo == 0 && n == v.extent(1)) return v;
  View out(Kokkos::view_alloc(Kokkos::WithoutInitializing, "kdist::matmul::slice"),
           rows ? n : v.extent(0), rows ? v.extent(1) : n);
  if (rows) {
    Kokkos::deep_copy(out, Kokkos::subview(v, Kokkos::make_pair(lo, lo + n), Kokkos::ALL));
  } else {
    Kokkos::deep_copy(out, Kokkos::subview(v, Kokkos::ALL, Kokkos::make_pair(lo, lo + n)));
  }
  return out;
}
}  // namespace detail

//! C = op_a(A) * op_b(B) for distributed matrices on one mesh.
//!
//! Errors (ValueError, alike on every process): operands on different meshes, contraction
//! extents that differ.
//! `reuse`, when its extents are those of the local result, receives it (no allocation: a
//! training step can keep its buffers from one step to the next).
template <class T, class MemorySpace>
DistributedTensor<T**, RuntimeTensorLayout, MemorySpace> matmul(
    DistributedTensor<T**, RuntimeTensorLayout, MemorySpace> A,
    DistributedTensor<T**, RuntimeTensorLayout, MemorySpace> B, ops::Op op_a = ops::Op::none,
    ops::Op op_b = ops::Op::none,
    typename DistributedTensor<T**, RuntimeTensorLayout, MemorySpace>::view_type reuse = {}) {
  detail::ProfilingRegion region("kdist::matmul");
  using Tensor = DistributedTensor<T**, RuntimeTensorLayout, MemorySpace>;
  if (!(A.device_mesh() == B.device_mesh())) {
    throw ValueError("kdist::matmul: " + A.to_string() + " and " + B.to_string() +
                     " are on different meshes");
  }
  if (A.is_partial()) A = redistribute(A, A.layout());
  if (B.is_partial()) B = redistribute(B, B.layout());
  const std::size_t a_m = op_a == ops::Op::none ? 0 : 1, a_k = 1 - a_m;
  const std::size_t b_k = op_b == ops::Op::none ? 0 : 1, b_n = 1 - b_k;
  const std::size_t M = A.shape()[a_m], K = A.shape()[a_k], N = B.shape()[b_n];
  if (B.shape()[b_k] != K) {
    throw ValueError("kdist::matmul: contraction extents differ: " + A.to_string() + " gives " +
                     std::to_string(K) + ", " + B.to_string() + " gives " +
                     std::to_string(B.shape()[b_k]));
  }
  auto with_dim = [](const RuntimeTensorLayout& l, std::size_t d, std::vector<std::string> axes) {
    auto dims = l.axes();
    dims[d] = DimAxes(std::move(axes));
    return RuntimeTensorLayout(dims, l.device_mesh(), l.division());
  };
  auto ma = detail::axis_names_of(A.layout(), a_m), ka = detail::axis_names_of(A.layout(), a_k);
  auto kb = detail::axis_names_of(B.layout(), b_k), nb = detail::axis_names_of(B.layout(), b_n);
  // Output dimensions may not share mesh axes with each other or with the pending sum.
  if (detail::overlaps(ma, nb)) {
    B = redistribute(B, with_dim(B.layout(), b_n, {}));
    nb.clear();
  }
  const auto& k_axes = !ka.empty() ? ka : kb;
  if (!(ka.empty() || kb.empty() || ka == kb) || detail::overlaps(k_axes, ma) ||
      detail::overlaps(k_axes, nb)) {
    // Contraction sharded incompatibly: replicate it in both operands.
    if (!ka.empty()) A = redistribute(A, with_dim(A.layout(), a_k, {}));
    if (!kb.empty()) B = redistribute(B, with_dim(B.layout(), b_k, {}));
    ka.clear();
    kb.clear();
  }
  std::vector<std::string> partial = !ka.empty() ? ka : kb;
  auto a_local = A.local();
  auto b_local = B.local();
  if (ka.empty() && !kb.empty()) {  // slice A's contraction to B's block
    a_local = detail::slice(a_local, a_k == 0, B.offsets()[b_k], B.local_extents()[b_k]);
  } else if (kb.empty() && !ka.empty()) {  // slice B's contraction to A's block
    b_local = detail::slice(b_local, b_k == 0, A.offsets()[a_k], A.local_extents()[a_k]);
  }
  RuntimeTensorLayout out_layout({DimAxes(ma), DimAxes(nb)}, A.device_mesh());
  const std::size_t rows = A.local_extents()[a_m], cols = B.local_extents()[b_n];
  typename Tensor::view_type c = reuse;
  if (c.extent(0) != rows || c.extent(1) != cols || c.data() == nullptr) {
    c = typename Tensor::view_type(Kokkos::view_alloc(Kokkos::WithoutInitializing, "kdist::matmul"),
                                   rows, cols);
  }
  if (c.size() != 0) {
    if ((op_a == ops::Op::none ? a_local.extent(1) : a_local.extent(0)) == 0) {
      Kokkos::deep_copy(c, T(0));
    } else {
      ops::matmul(a_local, b_local, c, op_a, op_b);
    }
  }
  return Tensor::from_local(c, {M, N}, std::move(out_layout), std::move(partial));
}

namespace error {
//! kdist::matmul of typed operands on two mesh types (each as `shape=(...), axis_names=[...]`).
template <class MeshOfA, class MeshOfB>
struct matmul_operands_on_different_meshes;
//! kdist::matmul of typed operands whose static extents contract `ExtentOfA` (a column of op(A))
//! against `ExtentOfB` (a row of op(B)): they must be equal.
template <std::size_t ExtentOfA, std::size_t ExtentOfB>
struct matmul_inner_extents_differ;
}  // namespace error

namespace detail {
constexpr bool share_an_axis(const DimSpec& a, const DimSpec& b) {
  for (std::size_t i = 0; i < a.size(); ++i) {
    for (std::size_t j = 0; j < b.size(); ++j) {
      if (a.axis(i) == b.axis(j)) return true;
    }
  }
  return false;
}
//! The result of matmul at compile time: its row and column sharding and the axes the sum is
//! pending over, by the same rules as the run-time matmul above (which then checks it).
struct MatmulPlan {
  DimSpec rows, cols, pending;
};
constexpr MatmulPlan matmul_plan(DimSpec ma, DimSpec ka, DimSpec kb, DimSpec nb) {
  if (share_an_axis(ma, nb)) nb = replicated;
  const DimSpec k = ka.size() ? ka : kb;
  if (!(ka.size() == 0 || kb.size() == 0 || ka == kb) || share_an_axis(k, ma) ||
      share_an_axis(k, nb)) {
    ka = kb = replicated;
  }
  return {ma, nb, ka.size() ? ka : kb};
}
//! The typed result of op_a(A) op_b(B): `type` is the TensorLayout, or a PendingSum of it.
//! (Static members, not an alias over a MatmulPlan argument: GCC 12 crashes on that.)
template <class Mesh, class LA, class LB, ops::Op OpA, ops::Op OpB>
struct matmul_result {
  static constexpr std::size_t a_m = OpA == ops::Op::none ? 0 : 1;
  static constexpr std::size_t b_k = OpB == ops::Op::none ? 0 : 1;
  static constexpr MatmulPlan plan =
      matmul_plan(LA::dims()[a_m], LA::dims()[1 - a_m], LB::dims()[b_k], LB::dims()[1 - b_k]);
  static constexpr DimSpec rows = plan.rows, cols = plan.cols, pending = plan.pending;
  using layout = TensorLayout<Mesh, rows, cols>;
  using type = std::conditional_t<pending.size() == 0, layout, PendingSum<layout, pending>>;
};
//! The static extents of op_a(A) op_b(B) for data types DA and DB: `data_type` (the rows of
//! op(A), the columns of op(B), static where theirs are) and whether the contracted extents agree.
template <class DA, class DB, ops::Op OpA, ops::Op OpB>
struct matmul_extents {
  static constexpr auto a = data_type_extents<DA>::extents;
  static constexpr auto b = data_type_extents<DB>::extents;
  static constexpr std::size_t a_m = OpA == ops::Op::none ? 0 : 1;
  static constexpr std::size_t b_k = OpB == ops::Op::none ? 0 : 1;
  static constexpr std::size_t k_of_a = a[1 - a_m], k_of_b = b[b_k];
  static constexpr bool inner_agree = extents_agree(k_of_a, k_of_b);
  using data_type = typename data_type_with_extents<typename data_type_extents<DA>::value_type,
                                                    a[a_m], b[1 - b_k]>::type;
};
}  // namespace detail

//! matmul of typed operands: the same product, with the result's layout and pending sum in its
//! type (`TensorLayout<Mesh, A's rows, B's columns>`, a `PendingSum` of it over the contraction's
//! axes when both operands shard it alike), and the static extents the operands give
//! (`float[64][784]` times `float[784][200]` is `float[64][200]`). Transposes are template
//! arguments (`kdist::matmul<kdist::ops::Op::transpose>(A, B)`); operands on two mesh types, or
//! static contracted extents that differ, are compile errors naming both. Example (Megatron's MLP block): `auto h = kdist::matmul(x, w1);` (column
//! parallel, complete), `auto y = kdist::matmul(h, w2);` (row parallel, a PendingSum over
//! 'model'), `kdist::redistribute(y, y.layout())` (the all-reduce).
template <ops::Op OpA = ops::Op::none, ops::Op OpB = ops::Op::none, class DA, class DB, class LA,
          class LB, class MemorySpace>
requires(is_static_tensor_layout_v<LA>&& is_static_tensor_layout_v<LB>&&
                 detail::data_type_extents<DA>::rank == 2 &&
         detail::data_type_extents<DB>::rank == 2 &&
         std::is_same_v<detail::dynamic_data_type_t<DA>,
                        detail::dynamic_data_type_t<
                            DB>>) auto matmul(const DistributedTensor<DA, LA, MemorySpace>& A,
                                              const DistributedTensor<DB, LB, MemorySpace>& B,
                                              typename detail::runtime_tensor_t<
                                                  DA, MemorySpace>::view_type reuse = {}) {
  using MeshA = typename DistributedTensor<DA, LA, MemorySpace>::mesh_type;
  using MeshB = typename DistributedTensor<DB, LB, MemorySpace>::mesh_type;
  static_assert(
      detail::diagnose<std::is_same_v<MeshA, MeshB>,
                       error::matmul_operands_on_different_meshes<
                           detail::diagnostic_name<detail::mesh_repr_of<MeshA>::value>,
                           detail::diagnostic_name<detail::mesh_repr_of<MeshB>::value>>>::value,
      "kdist::matmul: the operands are on different mesh types");
  using Extents = detail::matmul_extents<DA, DB, OpA, OpB>;
  static_assert(
      detail::diagnose<Extents::inner_agree,
                       error::matmul_inner_extents_differ<Extents::k_of_a, Extents::k_of_b>>::value,
      "kdist::matmul: the static extents the product contracts differ");
  using Result =
      detail::matmul_result<MeshA, resolved_layout_t<LA>, resolved_layout_t<LB>, OpA, OpB>;
  return DistributedTensor<typename Extents::data_type, typename Result::type, MemorySpace>(
      matmul(A.runtime(), B.runtime(), OpA, OpB, std::move(reuse)),
      typename Result::layout(A.layout().device_mesh()));
}

}  // namespace kdist
