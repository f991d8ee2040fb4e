#pragma once
//! \file tensor/distribute_tensor.hpp
//! `kdist::distribute_tensor` (Keras' name) and `kdist::full_tensor`: from global data to shards
//! and back. No rank ever needs the whole tensor to create one: the function form fills each
//! block where it lives (a known Keras failure: weights built whole before sharding, then out of
//! memory).

#include <array>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <type_traits>
#include <utility>

#include <mpi.h>
#include <Kokkos_Core.hpp>

#include <kdist/core/concepts.hpp>
#include <kdist/core/error.hpp>
#include <kdist/core/runtime_layout.hpp>
#include <kdist/parallel/concepts.hpp>
#include <kdist/parallel/detail/host_scratch.hpp>
#include <kdist/parallel/profiling_region.hpp>
#include <kdist/tensor/detail/box.hpp>
#include <kdist/tensor/detail/exchange.hpp>
#include <kdist/tensor/tensor.hpp>

namespace kdist {

namespace detail {

template <class Tensor>
Box<Tensor::rank> whole(const typename Tensor::shape_type& shape) {
  Box<Tensor::rank> b;
  b.ext = shape;
  return b;
}

//! s may send to t when they agree on every mesh axis the source is replicated over (partial
//! axes excepted: every partial contribution is sent and summed).
inline std::vector<std::size_t> replicated_non_partial_axes(
    const RuntimeTensorLayout& layout, const std::vector<std::string>& partial) {
  std::vector<std::size_t> out;
  const auto& mesh = *layout.device_mesh();
  for (auto a : layout.replicated_mesh_axes()) {
    const auto& name = mesh.axis_names()[a];
    if (std::find(partial.begin(), partial.end(), name) == partial.end()) out.push_back(a);
  }
  return out;
}

struct SameReplica {
  const RuntimeDeviceMesh* mesh;
  std::vector<std::size_t> axes;
  std::vector<std::vector<std::size_t>> coords;  // per device
  SameReplica(const RuntimeDeviceMesh& m, std::vector<std::size_t> ax)
      : mesh(&m), axes(std::move(ax)) {
    coords.reserve(m.size());
    for (std::size_t d = 0; d < m.size(); ++d) coords.push_back(m.coords_of(d));
  }
  bool operator()(std::size_t s, std::size_t t) const {
    for (auto a : axes) {
      if (coords[s][a] != coords[t][a]) return false;
    }
    return true;
  }
};

//! A host copy of t's block (its summand when t is a pending sum) for the length of one call:
//! the block itself in host memory, else a copy in host scratch (nothing allocated).
template <class Tensor>
auto host_local_in_scratch(const Tensor& t) {
  auto h = host_view_in_scratch<HostScratch::source>(t.local_summand());
  Kokkos::deep_copy(h, t.local_summand());
  count_staged<typename Tensor::memory_space>(h.span() * sizeof(typename Tensor::value_type));
  return h;
}

//! Writes `v(i, ...) = f(offset + (i, ...))` for every element of v. Functors, not lambdas: a
//! KOKKOS_LAMBDA that captures a user's lambda `f` makes nvcc reject the user's code ("a type
//! local to a function cannot be used in the template argument of the enclosing parent function
//! of an extended lambda").
template <class View, class F, std::size_t R>
struct FillFromIndices {  // on the host: F may be any host callable
  View v;
  F f;
  std::array<std::size_t, R> o;
  void operator()(std::int64_t i) const { v(i) = f(std::size_t(i) + o[0]); }
  void operator()(std::int64_t i, std::int64_t j) const {
    v(i, j) = f(std::size_t(i) + o[0], std::size_t(j) + o[1]);
  }
  void operator()(std::int64_t i, std::int64_t j, std::int64_t k) const {
    v(i, j, k) = f(std::size_t(i) + o[0], std::size_t(j) + o[1], std::size_t(k) + o[2]);
  }
  void operator()(std::int64_t i, std::int64_t j, std::int64_t k, std::int64_t l) const {
    v(i, j, k, l) = f(std::size_t(i) + o[0], std::size_t(j) + o[1], std::size_t(k) + o[2],
                      std::size_t(l) + o[3]);
  }
  void operator()(std::int64_t i, std::int64_t j, std::int64_t k, std::int64_t l,
                  std::int64_t m) const {
    v(i, j, k, l, m) = f(std::size_t(i) + o[0], std::size_t(j) + o[1], std::size_t(k) + o[2],
                         std::size_t(l) + o[3], std::size_t(m) + o[4]);
  }
};
template <class View, class F, std::size_t R>
struct FillFromIndicesOnDevice {  // where the View lives: F is callable there
  View v;
  F f;
  // Kokkos::Array, not std::array: std::array::operator[] is a host function, and nvcc (without
  // --expt-relaxed-constexpr) only warns (#20013) and then fills nothing on the device.
  Kokkos::Array<std::size_t, R> o;
  KOKKOS_INLINE_FUNCTION void operator()(std::int64_t i) const { v(i) = f(std::size_t(i) + o[0]); }
  KOKKOS_INLINE_FUNCTION void operator()(std::int64_t i, std::int64_t j) const {
    v(i, j) = f(std::size_t(i) + o[0], std::size_t(j) + o[1]);
  }
  KOKKOS_INLINE_FUNCTION void operator()(std::int64_t i, std::int64_t j, std::int64_t k) const {
    v(i, j, k) = f(std::size_t(i) + o[0], std::size_t(j) + o[1], std::size_t(k) + o[2]);
  }
  KOKKOS_INLINE_FUNCTION void operator()(std::int64_t i, std::int64_t j, std::int64_t k,
                                         std::int64_t l) const {
    v(i, j, k, l) = f(std::size_t(i) + o[0], std::size_t(j) + o[1], std::size_t(k) + o[2],
                      std::size_t(l) + o[3]);
  }
  KOKKOS_INLINE_FUNCTION void operator()(std::int64_t i, std::int64_t j, std::int64_t k,
                                         std::int64_t l, std::int64_t m) const {
    v(i, j, k, l, m) = f(std::size_t(i) + o[0], std::size_t(j) + o[1], std::size_t(k) + o[2],
                         std::size_t(l) + o[3], std::size_t(m) + o[4]);
  }
};

//! The iteration space of View v in execution space Exec (rank 1 to 5).
template <class Exec, class View>
auto index_policy(const View& v) {
  constexpr std::size_t R = View::rank;
  static_assert(R >= 1 && R <= 5, "kdist::distribute_tensor from a function supports ranks 1 to 5");
  using I = Kokkos::IndexType<std::int64_t>;
  if constexpr (R == 1) {
    return Kokkos::RangePolicy<Exec, I>(0, static_cast<std::int64_t>(v.extent(0)));
  } else {
    using Policy = Kokkos::MDRangePolicy<Exec, Kokkos::Rank<R>, I>;
    typename Policy::point_type lower{}, upper{};
    for (std::size_t d = 0; d < R; ++d) {
      lower[d] = 0;
      upper[d] = static_cast<std::int64_t>(v.extent(d));
    }
    return Policy(lower, upper);
  }
}

//! Fills v from f: in v's own execution space when `on_device`, else on the host into a mirror
//! that is then copied to v (no copy when v is host memory).
template <bool OnDevice, class View, class F, std::size_t R>
void fill_from_function(const View& v, const std::array<std::size_t, R>& offset, const F& f) {
  if constexpr (OnDevice) {
    using Exec = typename View::execution_space;
    Kokkos::Array<std::size_t, R> o{};
    for (std::size_t d = 0; d < R; ++d) o[d] = offset[d];
    Kokkos::parallel_for("kdist::distribute_tensor(fn) in place", index_policy<Exec>(v),
                         FillFromIndicesOnDevice<View, F, R>{v, f, o});
  } else {
    auto h = Kokkos::create_mirror_view(v);
    using Host = Kokkos::DefaultHostExecutionSpace;
    Kokkos::parallel_for("kdist::distribute_tensor(fn) on the host", index_policy<Host>(h),
                         FillFromIndices<decltype(h), F, R>{h, f, offset});
    Kokkos::fence();
    Kokkos::deep_copy(v, h);
  }
  Kokkos::fence();
}

}  // namespace detail

//! From a global row-major array that every process holds: each keeps its block.
//!
//! Example: `auto w = kdist::distribute_tensor<float**>(data.data(), {784, 200}, layout);`
//! (A DataType with static extents takes a static layout: the typed forms below.)
template <DynamicDataType DataType, class MemorySpace = Kokkos::DefaultExecutionSpace::memory_space>
detail::runtime_tensor_t<DataType, MemorySpace> distribute_tensor(
    const typename detail::runtime_tensor_t<DataType, MemorySpace>::value_type* global,
    const typename detail::runtime_tensor_t<DataType, MemorySpace>::shape_type& shape,
    const RuntimeTensorLayout& layout) {
  detail::ProfilingRegion region("kdist::distribute_tensor");
  using Tensor = detail::runtime_tensor_t<DataType, MemorySpace>;
  auto t = Tensor::uninitialized(shape, layout);
  auto h = Kokkos::create_mirror_view(t.local());
  detail::copy_box(global, detail::whole<Tensor>(shape), h.data(), t.block(), t.block());
  Kokkos::deep_copy(t.local(), h);
  return t;
}

//! From a host View of the global tensor that every process holds (Keras:
//! `distribute_tensor(tensor, layout)`).
template <KokkosView GlobalView>
auto distribute_tensor(const GlobalView& global, const RuntimeTensorLayout& layout) {
  // A View with static extents (float[8][6]) gives a run-time tensor (float**).
  using DataType = detail::dynamic_data_type_t<typename GlobalView::traits::non_const_data_type>;
  using Tensor = DistributedTensor<DataType>;
  typename Tensor::shape_type shape{};
  for (std::size_t d = 0; d < Tensor::rank; ++d) shape[d] = global.extent(d);
  auto contiguous = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), global);
  Kokkos::View<DataType, Kokkos::LayoutRight, Kokkos::HostSpace> right("kdist::global",
                                                                       global.layout());
  Kokkos::deep_copy(right, contiguous);
  return distribute_tensor<DataType>(right.data(), shape, layout);
}

//! From one root process (MPI scatter): only `root` reads `global_on_root`; others pass nullptr.
template <DynamicDataType DataType, class MemorySpace = Kokkos::DefaultExecutionSpace::memory_space>
detail::runtime_tensor_t<DataType, MemorySpace> distribute_tensor_from_root(
    const typename detail::runtime_tensor_t<DataType, MemorySpace>::value_type* global_on_root,
    const typename detail::runtime_tensor_t<DataType, MemorySpace>::shape_type& shape,
    const RuntimeTensorLayout& layout, int root = 0) {
  detail::ProfilingRegion region("kdist::distribute_tensor_from_root");
  using Tensor = detail::runtime_tensor_t<DataType, MemorySpace>;
  constexpr std::size_t R = Tensor::rank;
  auto t = Tensor::uninitialized(shape, layout);
  const std::size_t n = t.device_mesh().size();
  if (root < 0 || static_cast<std::size_t>(root) >= n) {
    throw ValueError("kdist::distribute_tensor_from_root: root " + std::to_string(root) +
                     " is not a process of the mesh (0.." + std::to_string(n - 1) + ")");
  }
  const auto r = static_cast<std::size_t>(root);
  std::vector<detail::Box<R>> blocks;
  for (std::size_t d = 0; d < n; ++d) blocks.push_back(t.block_of(d));
  auto h = Kokkos::create_mirror_view(t.local());
  detail::exchange<R>(
      global_on_root, h.data(), n, t.device(),
      [&](std::size_t s) { return s == r ? detail::whole<Tensor>(shape) : detail::Box<R>{}; },
      [&](std::size_t d) { return blocks[d]; }, [&](std::size_t s, std::size_t) { return s == r; },
      false, kdist::communicator(), "kdist::distribute_tensor_from_root");
  Kokkos::deep_copy(t.local(), h);
  return t;
}

//! `kdist::on_device(f)`: says that `f` can run where the tensor lives (a device function, e.g.
//! a `KOKKOS_LAMBDA` or a functor with `KOKKOS_INLINE_FUNCTION` operator()), so
//! `distribute_tensor` evaluates it there, in place. Needed only where kdist cannot see it for
//! itself: functors, and every callable under HIP. See evaluates_on_device_v.
template <class F>
struct DeviceFunction {
  F f;
  template <class... I>
  KOKKOS_INLINE_FUNCTION auto operator()(I... i) const {
    return f(i...);
  }
};
template <class F>
DeviceFunction<F> on_device(F f) {
  return {std::move(f)};
}

//! `kdist::on_host(f)`: evaluate `f` on the host (into a mirror, then one copy to the device),
//! even where it could run on the device.
template <class F>
struct HostFunction {
  F f;
  template <class... I>
  auto operator()(I... i) const {
    return f(i...);
  }
};
template <class F>
HostFunction<F> on_host(F f) {
  return {std::move(f)};
}

namespace detail {
template <class F>
inline constexpr bool is_device_callable_v =
#if defined(__CUDACC__) && defined(__CUDACC_EXTENDED_LAMBDA__)
    __nv_is_extended_host_device_lambda_closure_type(F) ||
    __nv_is_extended_device_lambda_closure_type(F) ||
#endif
    false;
template <class F>
inline constexpr bool is_device_callable_v<DeviceFunction<F>> = true;
template <class F>
inline constexpr bool is_device_callable_v<HostFunction<F>> = false;
}  // namespace detail

//! Whether `distribute_tensor(f, ...)` into `MemorySpace` evaluates `f` where the tensor lives
//! (true) or on the host followed by one copy (false). Host memory: always in place. Device
//! memory: in place for a `KOKKOS_LAMBDA` (nvcc tells an extended `__host__ __device__` lambda
//! by its type) and for `kdist::on_device(f)`; on the host for any other callable (a plain
//! lambda, a std::function, a functor) and for `kdist::on_host(f)`.
template <class F, class MemorySpace = Kokkos::DefaultExecutionSpace::memory_space>
inline constexpr bool evaluates_on_device_v =
    Kokkos::SpaceAccessibility<Kokkos::HostSpace, MemorySpace>::accessible ||
    detail::is_device_callable_v<F>;

//! From a function of the global index, evaluated for each block only (no process ever holds
//! the whole tensor): where the block lives when `f` can run there, else on the host and then
//! copied (evaluates_on_device_v says which, at compile time).
//!
//! Example: `kdist::distribute_tensor<float**>([](std::size_t i, std::size_t j) { return
//! float(i * 200 + j); }, {784, 200}, layout);` (a host lambda: evaluated on the host);
//! `kdist::distribute_tensor<float**>(KOKKOS_LAMBDA(std::size_t i, std::size_t j) { return
//! float(i * 200 + j); }, {784, 200}, layout);` (evaluated on the device).
template <DynamicDataType DataType, class MemorySpace = Kokkos::DefaultExecutionSpace::memory_space,
          IndexFunction<DataType> F>
detail::runtime_tensor_t<DataType, MemorySpace> distribute_tensor(
    F f, const typename detail::runtime_tensor_t<DataType, MemorySpace>::shape_type& shape,
    const RuntimeTensorLayout& layout) {
  detail::ProfilingRegion region("kdist::distribute_tensor(fn)");
  using Tensor = detail::runtime_tensor_t<DataType, MemorySpace>;
  auto t = Tensor::uninitialized(shape, layout);
  detail::fill_from_function<evaluates_on_device_v<F, MemorySpace>>(t.local(), t.offsets(), f);
  return t;
}

//! The forms above with a static layout (a `kdist::TensorLayout<Mesh, ...>`) return a typed tensor,
//! `DistributedTensor<DataType, Layout>`, whose type carries the mesh and the sharding; a layout
//! of another rank than DataType's is a compile error (`error::layout_rank_mismatch`).
//!
//! DataType may give static extents (`float[784][200]`): the shape must have them (ValueError), and
//! where all are static the shape may be left out.
//!
//! Example: `auto w = kdist::distribute_tensor<float**>(f, {784, 200}, kernel_layout);` with
//! `kdist::TensorLayout<Mesh, kdist::replicated, "model"> kernel_layout(mesh);`, or
//! `auto w = kdist::distribute_tensor<float[784][200]>(f, kernel_layout);`.
template <class DataType, class MemorySpace = Kokkos::DefaultExecutionSpace::memory_space,
          IndexFunction<DataType> F, StaticLayout Layout>
DistributedTensor<DataType, Layout, MemorySpace> distribute_tensor(
    F f, const typename detail::runtime_tensor_t<DataType, MemorySpace>::shape_type& shape,
    const Layout& layout) {
  using Typed = DistributedTensor<DataType, Layout, MemorySpace>;
  Typed::check_static_shape(shape, "kdist::distribute_tensor");  // before any work or message
  return Typed(distribute_tensor<detail::dynamic_data_type_t<DataType>, MemorySpace>(
                   std::move(f), shape, layout.to_runtime()),
               layout);
}
template <class DataType, class MemorySpace = Kokkos::DefaultExecutionSpace::memory_space,
          StaticLayout Layout>
DistributedTensor<DataType, Layout, MemorySpace> distribute_tensor(
    const typename detail::runtime_tensor_t<DataType, MemorySpace>::value_type* global,
    const typename detail::runtime_tensor_t<DataType, MemorySpace>::shape_type& shape,
    const Layout& layout) {
  using Typed = DistributedTensor<DataType, Layout, MemorySpace>;
  Typed::check_static_shape(shape, "kdist::distribute_tensor");  // before any work or message
  return Typed(distribute_tensor<detail::dynamic_data_type_t<DataType>, MemorySpace>(
                   global, shape, layout.to_runtime()),
               layout);
}
template <KokkosView GlobalView, StaticLayout Layout>
auto distribute_tensor(const GlobalView& global, const Layout& layout) {
  using Typed = DistributedTensor<typename GlobalView::traits::non_const_data_type, Layout>;
  return Typed(distribute_tensor(global, layout.to_runtime()), layout);
}
template <class DataType, class MemorySpace = Kokkos::DefaultExecutionSpace::memory_space,
          StaticLayout Layout>
DistributedTensor<DataType, Layout, MemorySpace> distribute_tensor_from_root(
    const typename detail::runtime_tensor_t<DataType, MemorySpace>::value_type* global_on_root,
    const typename detail::runtime_tensor_t<DataType, MemorySpace>::shape_type& shape,
    const Layout& layout, int root = 0) {
  using Typed = DistributedTensor<DataType, Layout, MemorySpace>;
  Typed::check_static_shape(shape,
                            "kdist::distribute_tensor_from_root");  // before any work or message
  return Typed(distribute_tensor_from_root<detail::dynamic_data_type_t<DataType>, MemorySpace>(
                   global_on_root, shape, layout.to_runtime(), root),
               layout);
}

//! The forms above for a DataType whose extents are all static (`float[784][200]`): the shape is
//! DataType's.
template <StaticDataType DataType, class MemorySpace = Kokkos::DefaultExecutionSpace::memory_space,
          IndexFunction<DataType> F, StaticLayout Layout>
DistributedTensor<DataType, Layout, MemorySpace> distribute_tensor(F f, const Layout& layout) {
  return distribute_tensor<DataType, MemorySpace>(
      std::move(f), detail::data_type_extents<DataType>::extents, layout);
}
template <StaticDataType DataType, class MemorySpace = Kokkos::DefaultExecutionSpace::memory_space,
          StaticLayout Layout>
DistributedTensor<DataType, Layout, MemorySpace> distribute_tensor(
    const typename detail::runtime_tensor_t<DataType, MemorySpace>::value_type* global,
    const Layout& layout) {
  return distribute_tensor<DataType, MemorySpace>(
      global, detail::data_type_extents<DataType>::extents, layout);
}

//! The whole tensor on every process (all-gather, summing pending partial sums), as a host View.
template <class DataType, class MemorySpace>
Kokkos::View<DataType, Kokkos::LayoutRight, Kokkos::HostSpace> full_tensor(
    const DistributedTensor<DataType, RuntimeTensorLayout, MemorySpace>& t,
    std::optional<int> root = std::nullopt) {
  detail::ProfilingRegion region("kdist::full_tensor");
  using Tensor = DistributedTensor<DataType, RuntimeTensorLayout, MemorySpace>;
  constexpr std::size_t R = Tensor::rank;
  using Host = Kokkos::View<DataType, Kokkos::LayoutRight, Kokkos::HostSpace>;
  const std::size_t n = t.device_mesh().size();
  if (root && (*root < 0 || static_cast<std::size_t>(*root) >= n)) {
    throw ValueError("kdist::full_tensor: root " + std::to_string(*root) +
                     " is not a process of the mesh (0.." + std::to_string(n - 1) + ")");
  }
  const bool here = !root || static_cast<std::size_t>(*root) == t.device();
  std::array<std::size_t, R> ext{};
  if (here) ext = t.shape();
  Host out = detail::make_view<Host>("kdist::full_tensor", ext, std::make_index_sequence<R>{},
                                     /*zero=*/t.is_partial());
  auto src = detail::host_local_in_scratch(t);
  std::vector<detail::Box<R>> blocks;
  for (std::size_t d = 0; d < n; ++d) blocks.push_back(t.block_of(d));
  detail::SameReplica sender(t.device_mesh(),
                             detail::replicated_non_partial_axes(t.layout(), t.partial_axes()));
  detail::exchange<R>(
      src.data(), out.data(), n, t.device(), [&](std::size_t s) { return blocks[s]; },
      [&](std::size_t d) {
        return (!root || static_cast<std::size_t>(*root) == d) ? detail::whole<Tensor>(t.shape())
                                                               : detail::Box<R>{};
      },
      sender, t.is_partial(), kdist::communicator(), "kdist::full_tensor");
  return out;
}

//! full_tensor of a typed tensor: that of its run-time tensor. (Spelled out because nvcc's front
//! end cannot deduce the run-time base of a typed tensor with static extents, `float[8][6]`.)
template <class DataType, TypedTensorLayout Layout, class MemorySpace>
auto full_tensor(const DistributedTensor<DataType, Layout, MemorySpace>& t,
                 std::optional<int> root = std::nullopt) {
  return full_tensor(t.runtime(), root);
}

}  // namespace kdist
