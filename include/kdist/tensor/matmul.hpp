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
//! The rule is kdist::plan_matmul (core/matmul_plan.hpp), written once: the typed overload asks it
//! at compile time for the result's type, the run-time one at run time for what to move; this
//! file executes the plan. The result is laid out (A's row axes, B's column axes). Resolve a
//! pending sum with kdist::redistribute (all-reduce to replicated, reduce-scatter to a shard).
//! Local products run through kdist::ops::matmul (Eigen on host memory, Kokkos kernels elsewhere).

#include <array>
#include <cstddef>
#include <string>
#include <type_traits>
#include <vector>

#include <Kokkos_Core.hpp>

#include <kdist/core/concepts.hpp>
#include <kdist/core/detail/data_type_extents.hpp>
#include <kdist/core/dim_spec.hpp>
#include <kdist/core/error.hpp>
#include <kdist/core/layout.hpp>
#include <kdist/core/matmul_plan.hpp>
#include <kdist/core/pending_sum.hpp>
#include <kdist/core/runtime_layout.hpp>
#include <kdist/ops/matmul.hpp>
#include <kdist/parallel/profiling_region.hpp>
#include <kdist/tensor/redistribute.hpp>
#include <kdist/tensor/reusable_views.hpp>
#include <kdist/tensor/tensor.hpp>

namespace kdist {

namespace detail {
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

namespace detail {
//! kdist::matmul with the local result's View from `result_view(rows, cols)`.
template <class T, class MemorySpace, class ResultView>
DistributedTensor<T**, RuntimeTensorLayout, MemorySpace> matmul_with(
    DistributedTensor<T**, RuntimeTensorLayout, MemorySpace> A,
    DistributedTensor<T**, RuntimeTensorLayout, MemorySpace> B, ops::Op op_a, ops::Op op_b,
    ResultView&& result_view) {
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
  // Plan with kdist::plan_matmul (the rule the typed overload's result type comes from), then
  // run it: redistribute what it gathers, slice what it slices, multiply the local blocks.
  const auto& la = A.layout().axes();
  const auto& lb = B.layout().axes();
  const MatmulPlan<DimAxes> plan = plan_matmul(la[a_m], la[a_k], lb[b_k], lb[b_n]);
  auto replicate_dim = [](const RuntimeTensorLayout& l, std::size_t d) {
    auto dims = l.axes();
    dims[d] = DimAxes();
    return RuntimeTensorLayout(dims, l.device_mesh(), l.division());
  };
  if (plan.gather_b_cols) B = redistribute(B, replicate_dim(B.layout(), b_n));
  if (plan.gather_a_contraction) A = redistribute(A, replicate_dim(A.layout(), a_k));
  if (plan.gather_b_contraction) B = redistribute(B, replicate_dim(B.layout(), b_k));
  auto a_local = A.local();
  auto b_local = B.local();
  if (plan.slice == MatmulSlice::a) {  // slice A's contraction to B's block
    a_local = detail::slice(a_local, a_k == 0, B.offsets()[b_k], B.local_extents()[b_k]);
  } else if (plan.slice == MatmulSlice::b) {  // slice B's contraction to A's block
    b_local = detail::slice(b_local, b_k == 0, A.offsets()[a_k], A.local_extents()[a_k]);
  }
  RuntimeTensorLayout out_layout({plan.rows, plan.cols}, A.device_mesh());
  const std::size_t rows = A.local_extents()[a_m], cols = B.local_extents()[b_n];
  typename Tensor::view_type c = result_view(rows, cols);
  if (c.size() != 0) {
    if ((op_a == ops::Op::none ? a_local.extent(1) : a_local.extent(0)) == 0) {
      Kokkos::deep_copy(c, T(0));
    } else {
      ops::matmul(a_local, b_local, c, op_a, op_b);
    }
  }
  return Tensor::from_local(c, {M, N}, std::move(out_layout), plan.pending.names());
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
  using View = typename DistributedTensor<T**, RuntimeTensorLayout, MemorySpace>::view_type;
  return detail::matmul_with(
      std::move(A), std::move(B), op_a, op_b, [&](std::size_t rows, std::size_t cols) {
        if (reuse.data() != nullptr && reuse.extent(0) == rows && reuse.extent(1) == cols) {
          return reuse;
        }
        return View(Kokkos::view_alloc(Kokkos::WithoutInitializing, "kdist::matmul"), rows, cols);
      });
}

//! As above, the local result in a View from `buffers` (kept across steps: a layer's product
//! allocates nothing once its extents have been seen).
template <class T, class MemorySpace, std::size_t Slots>
DistributedTensor<T**, RuntimeTensorLayout, MemorySpace> matmul(
    DistributedTensor<T**, RuntimeTensorLayout, MemorySpace> A,
    DistributedTensor<T**, RuntimeTensorLayout, MemorySpace> B, ops::Op op_a, ops::Op op_b,
    ReusableViews<typename DistributedTensor<T**, RuntimeTensorLayout, MemorySpace>::view_type,
                  Slots>& buffers) {
  return detail::matmul_with(
      std::move(A), std::move(B), op_a, op_b,
      [&](std::size_t rows, std::size_t cols) { return buffers.get("kdist::matmul", rows, cols); });
}

namespace error {
//! kdist::matmul of operands holding different scalar types (float and kdist::bfloat16, say).
template <class ScalarOfA, class ScalarOfB>
struct matmul_operands_hold_different_scalar_types;
}  // namespace error

//! Operands of two scalar types do not compile (error::matmul_operands_hold_different_scalar_types):
//! cast one first, kdist::cast<T>(tensor) (tensor/cast.hpp), as a Keras layer casts its inputs to
//! its compute dtype.
template <class TA, class TB, class MemorySpace, class... Rest>
requires(!std::is_same_v<TA, TB>) DistributedTensor<TA**, RuntimeTensorLayout, MemorySpace> matmul(
    DistributedTensor<TA**, RuntimeTensorLayout, MemorySpace> A,
    DistributedTensor<TB**, RuntimeTensorLayout, MemorySpace>, Rest&&...) {
  static_assert(
      detail::diagnose<std::is_same_v<TA, TB>,
                       error::matmul_operands_hold_different_scalar_types<TA, TB>>::value,
      "kdist::matmul: the operands hold different scalar types; cast one with "
      "kdist::cast<T>(tensor) first (kdist/tensor/cast.hpp), as a Keras layer casts its inputs to "
      "its compute dtype");
  return A;
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
//! A Kokkos data type of rank 2 (`float**`, `float[64][784]`, `float*[784]`): a matrix operand.
template <class DataType>
concept matrix_data_type = data_type_extents<DataType>::rank == 2;

//! The typed result of op_a(A) op_b(B): `type` is the TensorLayout, or a PendingSum of it.
//! (Static members, not an alias over a MatmulPlan argument: GCC 12 crashes on that.)
template <class Mesh, class LA, class LB, ops::Op OpA, ops::Op OpB>
struct matmul_result {
  static constexpr std::size_t a_m = OpA == ops::Op::none ? 0 : 1;
  static constexpr std::size_t b_k = OpB == ops::Op::none ? 0 : 1;
  static constexpr MatmulPlan<DimSpec> plan =
      plan_matmul(LA::dims()[a_m], LA::dims()[1 - a_m], LB::dims()[b_k], LB::dims()[1 - b_k]);
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
//! static contracted extents that differ, are compile errors naming both. Example (Megatron's MLP
//! block): `auto h = kdist::matmul(x, w1);` (column parallel, complete), `auto y =
//! kdist::matmul(h, w2);` (row parallel, a PendingSum over 'model'), `kdist::redistribute(y,
//! y.layout())` (the all-reduce).
template <ops::Op OpA = ops::Op::none, ops::Op OpB = ops::Op::none, detail::matrix_data_type DA,
          SameDynamicDataType<DA> DB, TypedTensorLayout LA, TypedTensorLayout LB, class MemorySpace>
auto matmul(const DistributedTensor<DA, LA, MemorySpace>& A,
            const DistributedTensor<DB, LB, MemorySpace>& B,
            typename detail::runtime_tensor_t<DA, MemorySpace>::view_type reuse = {}) {
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
