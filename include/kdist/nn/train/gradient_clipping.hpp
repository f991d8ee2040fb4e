#pragma once
//! \file nn/train/gradient_clipping.hpp
//! Keras' `global_clipnorm` across shards: `kdist::global_norm(tensors...)` is the L2 norm of all
//! the elements of all the (distributed) tensors, as Keras' `global_norm(value_list)` computes it
//! on full tensors, and `kdist::clip_by_global_norm(clipnorm, tensors...)` scales them all by
//! `clipnorm / max(global_norm, clipnorm)` (Keras' `clip_by_global_norm`). kdist::Sequential
//! calls it on every gradient before the optimizer's step when the optimizer has a
//! `global_clipnorm` (kdist/ops/optimizers.hpp).
//!
//! Each process sums the squares of its blocks, counting a block once even where it is
//! replicated: only the replica at coordinate 0 on every mesh axis the layout does not use adds
//! its squares. One all-reduce of a single double then gives every process the same sum.
//!
//! \code
//! const double norm = kdist::clip_by_global_norm(1.0, dw1, db1, dw2);  // collective
//! \endcode

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include <Kokkos_Core.hpp>

#include <kdist/core/error.hpp>
#include <kdist/core/runtime_layout.hpp>
#include <kdist/core/runtime_mesh.hpp>
#include <kdist/ops/detail/kokkos_math.hpp>
#include <kdist/parallel/collectives.hpp>
#include <kdist/parallel/mesh_binding.hpp>
#include <kdist/tensor/tensor.hpp>

namespace kdist {

namespace detail {

//! A range over the `n` elements of a block of View type `View`, in its execution space.
template <class View>
Kokkos::RangePolicy<typename View::execution_space, Kokkos::IndexType<std::int64_t>> block_range(
    std::size_t n) {
  return {0, static_cast<std::int64_t>(n)};
}

//! Whether this process's block of `t` is the one that counts in a global sum: the replica at
//! coordinate 0 along every mesh axis that no dimension of the layout uses, but `part_axes` (the
//! processes along those hold different parts of the block: a sharded optimizer state's).
template <class DataType, class MemorySpace>
bool counts_in_global_sum(const DistributedTensor<DataType, RuntimeTensorLayout, MemorySpace>& t,
                          std::span<const std::size_t> part_axes = {}) {
  const auto coords = t.device_mesh().coords_of(t.device());
  for (const std::size_t a : t.layout().replicated_mesh_axes()) {
    if (std::find(part_axes.begin(), part_axes.end(), a) != part_axes.end()) continue;
    if (coords[a] != 0) return false;
  }
  return true;
}

//! The sum of the squares of `n` elements from `data` (of a block of View type `View`), in
//! double, into `result`: a double (waited for) or a rank-0 View in the block's memory (not).
template <class View, class R>
void squared_sum_to(const typename View::value_type* data, std::size_t n, R& result) {
  using T = typename View::non_const_value_type;
  const Kokkos::View<const T*, Kokkos::LayoutRight, typename View::memory_space,
                     Kokkos::MemoryTraits<Kokkos::Unmanaged>>
      flat(data, n);
  Kokkos::parallel_reduce(
      "kdist::global_norm", block_range<View>(n),
      KOKKOS_LAMBDA(const std::int64_t i, double& acc) {
        const double x = static_cast<double>(flat(i));
        acc += x * x;
      },
      result);
}

//! How many elements of this process's block of `t` count in a global sum of squares, from
//! `begin`: all (or `count`) of them, or 0 for a block that is a replica of one counted elsewhere
//! (the processes along `part_axes` hold different parts of it: GlobalNorm::add_part). Errors:
//! kdist::ValueError for a pending sum.
template <class DataType, class MemorySpace>
std::size_t counted_elements(const DistributedTensor<DataType, RuntimeTensorLayout, MemorySpace>& t,
                             const char* who, std::size_t begin, std::optional<std::size_t> count,
                             std::span<const std::size_t> part_axes) {
  if (t.is_partial()) {
    throw ValueError(std::string(who) + ": " + t.to_string() +
                     " is a pending sum; its norm is not the norm of its summands. Sum it first: "
                     "kdist::redistribute(t, t.layout())");
  }
  if (!counts_in_global_sum(t, part_axes)) return 0;
  return count.value_or(t.local().size() - begin);
}

//! The sum of the squares of the elements of this process's block, in double (0 for a block
//! that is a replica of one counted elsewhere), or of its elements [begin, begin + count) when
//! the processes along `part_axes` hold parts of it (GlobalNorm::add_part). Errors:
//! kdist::ValueError for a pending sum.
template <class DataType, class MemorySpace>
double counted_squared_sum(const DistributedTensor<DataType, RuntimeTensorLayout, MemorySpace>& t,
                           const char* who, std::size_t begin = 0,
                           std::optional<std::size_t> count = std::nullopt,
                           std::span<const std::size_t> part_axes = {}) {
  using View = typename DistributedTensor<DataType, RuntimeTensorLayout, MemorySpace>::view_type;
  const std::size_t n = counted_elements(t, who, begin, count, part_axes);
  if (n == 0) return 0.0;
  double sum = 0.0;
  squared_sum_to<View>(t.local().data() + begin, n, sum);
  return sum;
}

//! `flat(i) *= scale()` over this process's block of `t`, where `scale` gives the factor in a
//! kernel: a value from the host, or one the kernel reads from device memory.
template <class DataType, class MemorySpace, class Scale>
void scale_block_by(DistributedTensor<DataType, RuntimeTensorLayout, MemorySpace>& t, Scale scale) {
  using View = typename DistributedTensor<DataType, RuntimeTensorLayout, MemorySpace>::view_type;
  using T = typename View::non_const_value_type;
  const auto& local = t.local();
  const std::size_t n = local.size();
  if (n == 0) return;
  const Kokkos::View<T*, Kokkos::LayoutRight, MemorySpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>
      flat(local.data(), n);
  Kokkos::parallel_for(
      "kdist::clip_by_global_norm", block_range<View>(n),
      KOKKOS_LAMBDA(const std::int64_t i) { flat(i) *= static_cast<T>(scale()); });
}
//! The factor of scale_block_by: a value given on the host, or read from device memory.
struct ScaleValue {
  double value;
  KOKKOS_INLINE_FUNCTION double operator()() const { return value; }
};
struct ScaleAt {
  const double* at;
  KOKKOS_INLINE_FUNCTION double operator()() const { return *at; }
};

//! Multiplies every element of this process's block of `t` by `scale`.
template <class DataType, class MemorySpace>
void scale_block(DistributedTensor<DataType, RuntimeTensorLayout, MemorySpace>& t, double scale) {
  scale_block_by(t, ScaleValue{scale});
}

//! counted_squared_sum left on the device: into `out` (a rank-0 View in the block's memory),
//! without waiting for it; 0 for a block that does not count. Errors: as counted_squared_sum.
template <class DataType, class MemorySpace, class Out>
void counted_squared_sum_into(
    const DistributedTensor<DataType, RuntimeTensorLayout, MemorySpace>& t, const Out& out,
    const char* who, std::size_t begin = 0, std::optional<std::size_t> count = std::nullopt,
    std::span<const std::size_t> part_axes = {}) {
  using View = typename DistributedTensor<DataType, RuntimeTensorLayout, MemorySpace>::view_type;
  const std::size_t n = counted_elements(t, who, begin, count, part_axes);
  if (n == 0) {
    Kokkos::parallel_for(
        "kdist::global_norm::none", Kokkos::RangePolicy<typename View::execution_space>(0, 1),
        KOKKOS_LAMBDA(const int) { out() = 0.0; });
    return;
  }
  Out result = out;
  squared_sum_to<View>(t.local().data() + begin, n, result);
}

//! On the device, in one thread: `scale() = global_clip_scale(sqrt(sum of squares), clipnorm)`
//! from the per-variable sums `squares` (added in order, as GlobalNorm adds them on the host).
inline void clip_scale_into(const Kokkos::View<double*, Kokkos::LayoutRight>& squares,
                            double clipnorm,
                            const Kokkos::View<double, Kokkos::LayoutRight>& scale) {
  Kokkos::parallel_for(
      "kdist::clip_by_global_norm::scale", Kokkos::RangePolicy<Kokkos::DefaultExecutionSpace>(0, 1),
      KOKKOS_LAMBDA(const int) {
        double sum = 0.0;
        for (std::size_t k = 0; k < squares.extent(0); ++k) sum += squares(k);
        const double norm = kdist::detail::kmath::sqrt(sum);
        const bool finite = norm - norm == 0.0;  // false for inf and NaN
        scale() = !finite ? norm - norm : (norm > clipnorm ? clipnorm / norm : 1.0);
      });
}

//! Multiplies every element of this process's block of `t` by `*scale` (device memory), read by
//! the kernel (a captured step replays with each step's scale).
template <class DataType, class MemorySpace>
void scale_block_at(DistributedTensor<DataType, RuntimeTensorLayout, MemorySpace>& t,
                    const double* scale) {
  scale_block_by(t, ScaleAt{scale});
}

}  // namespace detail

//! The squared global norm of distributed tensors, gathered one tensor at a time (for tensors of
//! several types, as a model's variables are): `add` each, then `norm()` on every process.
class GlobalNorm {
 public:
  //! Adds the squares of `t`'s elements (this process's block, once per replica group).
  //! Errors: kdist::ValueError for a pending sum (sum it first).
  template <class DataType, class MemorySpace>
  void add(const DistributedTensor<DataType, RuntimeTensorLayout, MemorySpace>& t) {
    local_ += detail::counted_squared_sum(t, "kdist::global_norm");
    if (!mesh_) mesh_ = t.device_mesh();
  }
  //! Adds the squares of elements [begin, begin + count) of this process's block of `t`: its
  //! part of a block whose parts the processes along mesh axes `part_axes` hold (a sharded
  //! optimizer state's gradient, kdist/nn/train/optimizer_state_shards.hpp), once per replica along the
  //! other axes. Errors: kdist::ValueError for a pending sum.
  template <class DataType, class MemorySpace>
  void add_part(const DistributedTensor<DataType, RuntimeTensorLayout, MemorySpace>& t,
                std::size_t begin, std::size_t count, std::span<const std::size_t> part_axes) {
    local_ += detail::counted_squared_sum(t, "kdist::global_norm", begin, count, part_axes);
    if (!mesh_) mesh_ = t.device_mesh();
  }
  //! This process's part of the squared norm.
  double local_squared_sum() const { return local_; }
  //! The global norm: sqrt of the sum of every process's part. **Collective**: one all-reduce of
  //! one double over the processes of the first tensor's mesh (every process, as every mesh is
  //! bound to all of them); 0 without communication when no tensor was added (on every process
  //! alike, as SPMD code adds the same tensors everywhere).
  double norm() const {
    if (!mesh_) return 0.0;
    double sum = local_;
    const Kokkos::View<double*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>> buf(
        &sum, 1);
    all_reduce(Kokkos::DefaultHostExecutionSpace(), buf, ReduceOp::sum,
               communicators(*mesh_).world());
    return std::sqrt(sum);
  }

 private:
  double local_ = 0.0;
  std::optional<RuntimeDeviceMesh> mesh_;
};

//! Keras' global norm of `tensors` (distributed tensors of any ranks): the L2 norm of all their
//! elements, as if computed on the full tensors; the same on every process. **Collective**.
//! Errors: kdist::ValueError for a tensor that is a pending sum.
template <class... Tensors>
double global_norm(const Tensors&... tensors) {
  GlobalNorm n;
  (n.add(tensors), ...);
  return n.norm();
}

//! The factor Keras' clip_by_global_norm scales gradients by: `clipnorm / max(norm, clipnorm)`
//! (1 when the norm is at most clipnorm), NaN for a norm that is not finite (as Keras: the
//! gradients, and so the step, become NaN). Errors: kdist::ValueError for a clipnorm that is not a
//! finite number > 0.
inline double global_clip_scale(double norm, double clipnorm) {
  if (!(clipnorm > 0.0) || !std::isfinite(clipnorm)) {
    throw ValueError("kdist::clip_by_global_norm: clipnorm is " + std::to_string(clipnorm) +
                     "; it must be a finite number > 0");
  }
  if (!std::isfinite(norm)) return std::nan("");
  return norm > clipnorm ? clipnorm / norm : 1.0;
}

//! Keras' clip_by_global_norm in place: scales every tensor by global_clip_scale(global norm,
//! clipnorm) (nothing when that is 1) and returns the global norm before clipping, the same on
//! every process. **Collective**. Errors: kdist::ValueError for a clipnorm that is not a finite
//! number > 0 (before any communication) or a tensor that is a pending sum.
template <class... Tensors>
double clip_by_global_norm(double clipnorm, Tensors&... tensors) {
  (void)global_clip_scale(0.0, clipnorm);  // checks clipnorm on every process alike
  const double norm = global_norm(tensors...);
  const double scale = global_clip_scale(norm, clipnorm);
  if (scale != 1.0) (detail::scale_block(tensors, scale), ...);
  return norm;
}

}  // namespace kdist
