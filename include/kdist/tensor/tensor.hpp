#pragma once
//! \file tensor/tensor.hpp
//! `kdist::DistributedTensor<DataType>`: a global tensor sharded over a device mesh. Each process
//! (one device per MPI rank) holds its block as a `Kokkos::View` in the default memory space; the
//! tensor knows its global shape, its layout, and whether it is a pending sum ("partial") over
//! some mesh axes, as PyTorch DTensor's Partial placement.

#include <algorithm>
#include <array>
#include <cstddef>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <mpi.h>
#include <Kokkos_Core.hpp>

#include <kdist/core/concepts.hpp>
#include <kdist/core/detail/data_type_extents.hpp>
#include <kdist/core/detail/python_repr.hpp>
#include <kdist/core/error.hpp>
#include <kdist/core/layout.hpp>
#include <kdist/core/pending_sum.hpp>
#include <kdist/core/runtime_layout.hpp>
#include <kdist/parallel/concepts.hpp>
#include <kdist/parallel/world.hpp>
#include <kdist/tensor/detail/box.hpp>

namespace kdist {

namespace detail {
//! The layout of a distributed tensor must have a mesh of exactly the running processes; checked
//! on replicated values only, so every rank throws the same error or none does.
inline void check_layout_for_tensor(const RuntimeTensorLayout& layout,
                                    std::span<const std::size_t> shape) {
  if (!layout.device_mesh()) {
    throw ValueError("kdist: tensor of shape " + shape_repr(shape) + " with layout " +
                     layout.axes_repr() + ": the layout has no device mesh; give it one");
  }
  layout.check_shape(shape);
  const auto& mesh = *layout.device_mesh();
  const int world = kdist::process_count();
  if (mesh.size() != static_cast<std::size_t>(world)) {
    throw ValueError("kdist: tensor of shape " + shape_repr(shape) + " with layout " +
                     layout.to_string() + ": the mesh has " + std::to_string(mesh.size()) +
                     " devices but " + std::to_string(world) +
                     " MPI processes are running (one device per process); run with mpiexec -n " +
                     std::to_string(mesh.size()) + " or build the mesh from kdist::list_devices()");
  }
}

template <class View, std::size_t... I>
View make_view(const std::string& label, const std::array<std::size_t, sizeof...(I)>& ext,
               std::index_sequence<I...>, bool zero = true) {
  if (!zero) return View(Kokkos::view_alloc(Kokkos::WithoutInitializing, label), ext[I]...);
  return View(Kokkos::view_alloc(label), ext[I]...);
}
}  // namespace detail

//! A tensor of global `shape()` laid out on a mesh by `layout()`; this process holds `local()`.
//!
//! DataType is a Kokkos data type (`float**`, `double***`...), rank 1 to 4 (and beyond). The local
//! View is LayoutRight in MemorySpace (the default execution space's by default). A typed tensor's
//! DataType may have static extents (`float[784][200]`, `float*[784]`): the global shape is then
//! checked against them, and its local View has static extents where every device's block has
//! the same, known extent (see the typed tensor below).
//!
//! Layout says what the type knows, as mdspan's extents do:
//! - `kdist::RuntimeTensorLayout` (the default, `DistributedTensor<float**>`): the layout and
//!   whether the tensor is a pending sum are values, checked at run time (this specialization);
//! - a static `kdist::TensorLayout<Mesh, ...>`, or `kdist::PendingSum<TensorLayout<...>, axes>`
//!   for a pending sum: the mesh type, the sharding and the pending sum are part of the type, and
//!   mixing meshes, a layout of another rank, or reading a pending sum's values do not compile
//!   (the primary template below). A typed tensor converts to the run-time one (its base), never back
//!   without a check.
//!
//! Build one with kdist::distribute_tensor (from a global array, from one root, or from a function
//! of the global index), or from a local block with `from_local`.
template <class DataType, class Layout = RuntimeTensorLayout,
          class MemorySpace = Kokkos::DefaultExecutionSpace::memory_space>
class DistributedTensor;

namespace error {
//! A run-time tensor (`DistributedTensor<DataType>`, layout a value) with static extents in
//! `DataType`: its blocks' extents are known at run time only. Write the extents as `*`
//! (`float**`), or give the tensor a static kdist::TensorLayout, whose type can carry them.
template <class DataType>
struct run_time_tensor_has_static_extents;
}  // namespace error

//! The run-time tensor: layout and pending-sum state are values.
template <class DataType, class MemorySpace>
class DistributedTensor<DataType, RuntimeTensorLayout, MemorySpace> {
  static_assert(
      detail::diagnose<detail::is_dynamic_data_type_v<DataType>,
                       error::run_time_tensor_has_static_extents<DataType>>::value,
      "kdist::DistributedTensor<DataType>: a run-time tensor's extents are run-time; write them "
      "as * (float**), or give the tensor a static kdist::TensorLayout");

 public:
  // (The all-run-time form of DataType, so a misuse diagnosed above fails once.)
  using view_type =
      Kokkos::View<detail::dynamic_data_type_t<DataType>, Kokkos::LayoutRight, MemorySpace>;
  using value_type = typename view_type::non_const_value_type;
  using memory_space = MemorySpace;
  static constexpr std::size_t rank = static_cast<std::size_t>(view_type::rank);
  using shape_type = std::array<std::size_t, rank>;

  //! An empty tensor (no mesh); assign a real one to it.
  DistributedTensor() = default;

  //! A tensor whose local block on this process is `local` (its extents must be the layout's),
  //! pending a sum over mesh axes `partial_axes` (names) when not empty.
  static DistributedTensor from_local(view_type local, const shape_type& shape,
                                      RuntimeTensorLayout layout,
                                      std::vector<std::string> partial_axes = {}) {
    DistributedTensor t(shape, std::move(layout), std::move(partial_axes), false);
    for (std::size_t d = 0; d < rank; ++d) {
      if (local.extent(d) != t.block_.ext[d]) {
        throw ValueError("kdist::DistributedTensor::from_local: local block extent " +
                         std::to_string(local.extent(d)) + " in dimension " + std::to_string(d) +
                         " differs from " + std::to_string(t.block_.ext[d]) +
                         ", the extent layout " + t.layout_.axes_repr() + " gives device " +
                         std::to_string(t.device_) + " for shape " + detail::shape_repr(shape));
      }
    }
    t.local_ = std::move(local);
    return t;
  }
  //! A zero-filled tensor.
  static DistributedTensor zeros(const shape_type& shape, RuntimeTensorLayout layout,
                                 std::string label = "kdist::DistributedTensor") {
    return DistributedTensor(shape, std::move(layout), {}, true, label);
  }
  //! A tensor whose local block is allocated but not initialised (for callers that write every
  //! element).
  static DistributedTensor uninitialized(const shape_type& shape, RuntimeTensorLayout layout,
                                         std::string label = "kdist::DistributedTensor") {
    return DistributedTensor(shape, std::move(layout), {}, true, label, false);
  }

  const shape_type& shape() const { return shape_; }
  const RuntimeTensorLayout& layout() const { return layout_; }
  const RuntimeDeviceMesh& device_mesh() const { return *layout_.device_mesh(); }
  //! This process's block of the tensor's values. Errors (ValueError): the tensor is a pending
  //! sum (`is_partial()`): its block is one summand, not the values, and using it as the values
  //! (an optimizer step, a non-linear op) lets the replicas drift apart. Resolve the sum first
  //! (`kdist::redistribute(t, layout)`), or take `local_summand()` on purpose.
  const view_type& local() const {
    check_complete("local");
    return local_;
  }
  view_type& local() {
    check_complete("local");
    return local_;
  }
  //! This process's block as stored, whatever the state: the values of a complete tensor, one
  //! summand of them when the tensor is a pending sum (for code that sums or forwards summands:
  //! collectives, redistribute, a linear op that keeps the sum pending).
  const view_type& local_summand() const { return local_; }
  view_type& local_summand() { return local_; }
  //! Global offsets and extents of this process's block.
  const shape_type& offsets() const { return block_.lo; }
  const shape_type& local_extents() const { return block_.ext; }
  std::size_t global_size() const { return detail::product(shape_); }
  //! The device (= MPI rank in the world) this process drives.
  std::size_t device() const { return device_; }
  //! Mesh axes over which the tensor is a pending sum (empty: not partial).
  const std::vector<std::string>& partial_axes() const { return partial_; }
  bool is_partial() const { return !partial_.empty(); }

  //! Global box of device `dev`'s block.
  detail::Box<rank> block_of(std::size_t dev) const {
    detail::Box<rank> b;
    auto lo = layout_.offsets(shape_, dev);
    auto ext = layout_.local_extents(shape_, dev);
    std::copy(lo.begin(), lo.end(), b.lo.begin());
    std::copy(ext.begin(), ext.end(), b.ext.begin());
    return b;
  }
  const detail::Box<rank>& block() const { return block_; }

  //! Throws the error of `local()` when the tensor is a pending sum; `what` names the use.
  void check_complete(const char* what) const {
    if (!is_partial()) return;
    throw ValueError("kdist::DistributedTensor::" + std::string(what) + ": " + to_string() +
                     " is a pending sum over " + detail::join_quoted(partial_) +
                     ": this process holds one summand, not the values. Resolve the sum first "
                     "(kdist::redistribute(t, t.layout()) sums it over those axes), or use "
                     "local_summand() if a summand is what you mean");
  }

  //! Keras-like summary: `<DistributedTensor shape=(784, 200), layout=(None, 'model'), ...>`.
  std::string to_string() const {
    std::vector<std::size_t> s(shape_.begin(), shape_.end());
    std::string out = "<DistributedTensor shape=" + detail::shape_repr(s) +
                      ", layout=" + layout_.axes_repr() +
                      ", device_mesh=" + device_mesh().to_string();
    if (is_partial()) out += ", partial=" + detail::join_quoted(partial_);
    return out + ">";
  }

 private:
  DistributedTensor(const shape_type& shape, RuntimeTensorLayout layout,
                    std::vector<std::string> partial, bool allocate,
                    const std::string& label = "kdist::DistributedTensor", bool zero = true)
      : shape_(shape), layout_(std::move(layout)), partial_(std::move(partial)) {
    detail::check_layout_for_tensor(layout_, shape_);
    for (const auto& a : partial_) {
      const std::size_t i = device_mesh().axis_index(a);  // validates the name
      for (std::size_t d = 0; d < rank; ++d) {
        const auto& used = layout_.mesh_axes_of(d);
        if (std::find(used.begin(), used.end(), i) != used.end()) {
          throw ValueError("kdist::DistributedTensor: mesh axis '" + a +
                           "' cannot both shard the tensor (layout " + layout_.axes_repr() +
                           ") and hold a pending sum over it");
        }
      }
    }
    // A pending sum over axes of extent 1 is already complete.
    std::erase_if(partial_, [&](const std::string& a) {
      return device_mesh().extent(device_mesh().axis_index(a)) == 1;
    });
    std::sort(partial_.begin(), partial_.end());
    device_ = static_cast<std::size_t>(kdist::process_id());
    block_ = block_of(device_);
    if (allocate) {
      local_ =
          detail::make_view<view_type>(label, block_.ext, std::make_index_sequence<rank>{}, zero);
    }
  }

  shape_type shape_{};
  RuntimeTensorLayout layout_{std::vector<DimAxes>{}};
  std::vector<std::string> partial_;
  std::size_t device_ = 0;
  detail::Box<rank> block_{};
  view_type local_;
};

namespace error {
//! A typed tensor's `Layout` is neither kdist::RuntimeTensorLayout, a kdist::TensorLayout nor a
//! kdist::PendingSum of one.
template <class Layout>
struct tensor_layout_is_not_a_layout;
//! `local()` of a typed tensor that is a pending sum over the mesh axes `Axes` (layout
//! `Layout`): its block is one summand, not the values. Resolve the sum with kdist::redistribute,
//! or take `local_summand()` on purpose.
template <class Axes, class Layout>
struct local_of_a_pending_sum_over;
}  // namespace error

namespace detail {
//! `(None, 'model')`-style repr of a DimSpec's axes as one dimension: `('model',)`.
template <DimSpec Axes>
inline constexpr auto pending_axes_repr = axes_repr_string<Axes>();

template <std::size_t>
inline constexpr DimSpec replicated_at = replicated;

//! The layout of a typed tensor of rank R: `L`'s parts when it is a static layout, else (an
//! error the tensor diagnoses) a replicated placeholder of rank R, so nothing else fails.
template <class L, std::size_t R, class = std::make_index_sequence<R>>
struct typed_tensor_parts {
  static constexpr bool valid = true;
  using layout_type = resolved_layout_t<L>;
  static constexpr DimSpec pending = static_layout_parts<L>::pending;
};
template <class L, std::size_t R, std::size_t... I>
requires(!TypedTensorLayout<L>) struct typed_tensor_parts<L, R, std::index_sequence<I...>> {
  static constexpr bool valid = false;
  using layout_type = TensorLayout<placeholder_mesh, replicated_at<I>...>;
  static constexpr DimSpec pending = replicated;
};
}  // namespace detail

//! A typed tensor: `Layout` is a `kdist::TensorLayout<Mesh, ...>` (or a `kdist::PendingSum` of
//! one), so the mesh type, the sharding of each dimension and whether the tensor is a pending sum
//! are part of its type, and the mistakes they make possible are compile errors:
//! - a layout of another rank than DataType's (`error::layout_rank_mismatch<2, 1, "(None,
//!   'model')">`);
//! - operands on two mesh types (kdist::matmul), a target layout of another mesh type
//!   (kdist::redistribute), naming both meshes;
//! - reading or writing a pending sum's values: `local()` of a `PendingSum` tensor, an optimizer
//!   step with it (kdist::apply_gradient) (`error::local_of_a_pending_sum_over<"('model',)",
//!   ...>`).
//!
//! Static extents, as mdspan's: DataType may give extents (`float[784][200]`, `float*[784]` for a
//! run-time batch). The global shape must then have them (ValueError), an EvenTensorLayout that
//! cannot divide one is a compile error (`error::extent_not_divisible`), and a dimension whose
//! every block has the same extent - the global one static, its mesh axes static and dividing it
//! - is static in `view_type`, the type of `local()` (Kokkos spells the static extents last, so
//! a static extent before a run-time one stays run-time there). `static_extent(d)` and
//! `static_local_extent(d)` say what the type knows.
//!
//! It is a run-time tensor too (its public base, `DistributedTensor<float**>` for DataType
//! `float[784][200]`): every function that takes one takes it, and returns a run-time result;
//! kdist::distribute_tensor, kdist::redistribute and kdist::matmul on typed arguments return typed
//! results. From a run-time tensor only by the explicit, checked constructor.
//!
//! Example: `kdist::DistributedTensor<float**, kdist::TensorLayout<Mesh, kdist::replicated,
//! "model">> w = kdist::distribute_tensor<float**>(f, {784, 200}, kernel_layout);`
template <class DataType, class Layout, class MemorySpace>
class DistributedTensor : public DistributedTensor<detail::dynamic_data_type_t<DataType>,
                                                   RuntimeTensorLayout, MemorySpace> {
 public:
  using runtime_type =
      DistributedTensor<detail::dynamic_data_type_t<DataType>, RuntimeTensorLayout, MemorySpace>;
  using runtime_type::rank;
  using typename runtime_type::shape_type;
  using data_type = DataType;
  //! The run-time tensor's View (all extents run-time).
  using runtime_view_type = typename runtime_type::view_type;

 private:
  using parts = detail::typed_tensor_parts<Layout, rank>;
  static_assert(detail::diagnose<parts::valid, error::tensor_layout_is_not_a_layout<Layout>>::value,
                "kdist::DistributedTensor<DataType, Layout>: Layout must be "
                "kdist::RuntimeTensorLayout (the default), a kdist::TensorLayout<Mesh, ...> or a "
                "kdist::PendingSum<kdist::TensorLayout<Mesh, ...>, axes>");

 public:
  //! The layout without its pending sum (the layout `redistribute` to it resolves the sum to).
  using layout_type = typename parts::layout_type;
  using mesh_type = typename layout_type::mesh_type;
  //! Whether the tensor is a pending sum, and over which mesh axes.
  static constexpr bool is_pending_sum = parts::pending.size() > 0;
  static constexpr DimSpec pending_axes() { return parts::pending; }

 private:
  static constexpr bool rank_matches = layout_type::rank() == rank;
  static_assert(
      detail::diagnose<rank_matches,
                       error::layout_rank_mismatch<
                           layout_type::rank(), rank,
                           detail::diagnostic_name<layout_type::axes_repr_string()>>>::value,
      "kdist::DistributedTensor: the layout's rank differs from the tensor's rank");
  static constexpr auto static_extents_ = detail::data_type_extents<DataType>::extents;
  // Even division of the static extents (EvenTensorLayout); the layout names the offender. (A
  // function template, not a template lambda: nvcc then re-emits the class's default arguments.)
  template <std::size_t... D>
  static constexpr bool static_extents_fit_layout(std::index_sequence<D...>) {
    if constexpr (rank_matches) {
      return layout_type::template check_static_shape<static_extents_[D]...>();
    }
    return true;
  }
  static_assert(static_extents_fit_layout(std::make_index_sequence<rank>{}));
  static constexpr std::array<std::size_t, rank> static_local_extents_ = [] {
    std::array<std::size_t, rank> out{};
    for (std::size_t d = 0; d < rank; ++d) {
      out[d] =
          rank_matches ? layout_type::static_local_extent(d, static_extents_[d]) : dynamic_extent;
    }
    return out;
  }();
  struct local_extents_source {
    static constexpr auto extents = static_local_extents_;
  };

 public:
  //! DataType's extents as a shape for messages, `(784, 200)` or `(?, 784)`.
  static constexpr auto static_shape_string() { return detail::static_shape_string<DataType>(); }
  //! The global extent of dimension d that DataType gives, or kdist::dynamic_extent.
  static constexpr std::size_t static_extent(std::size_t d) { return static_extents_[d]; }
  //! The extent of dimension d of every device's block, when the type determines it (the global
  //! extent and the mesh axes of d static, the shards dividing it), else kdist::dynamic_extent.
  static constexpr std::size_t static_local_extent(std::size_t d) {
    return static_local_extents_[d];
  }
  using value_type = typename detail::data_type_extents<DataType>::value_type;
  //! This process's block: a View whose extents are static where static_local_extent is (and
  //! every later one is too), e.g. `Kokkos::View<float*[100]>` for `float[784][200]` with the
  //! columns over a static 'model' axis of 2 and the rows over a run-time one.
  using view_type =
      Kokkos::View<typename detail::data_type_from<value_type, local_extents_source>::type,
                   Kokkos::LayoutRight, MemorySpace>;

  //! An empty tensor (no mesh); assign a real one to it.
  DistributedTensor() = default;
  //! `t` as a typed tensor, checked (ValueError, alike on every process): `t`'s shape must have
  //! DataType's static extents, its layout must be `layout` and its pending sum the type's (an
  //! axis of extent 1 holds no pending sum).
  explicit DistributedTensor(runtime_type t, layout_type layout)
      : runtime_type(std::move(t)), layout_(std::move(layout)) {
    check_static_shape(runtime_type::shape(), "kdist::DistributedTensor");
    check_against_type();
  }

  //! A zero-filled tensor (not a pending sum).
  static DistributedTensor zeros(
      const shape_type& shape, layout_type layout,
      std::string label = "kdist::DistributedTensor") requires(!is_pending_sum) {
    check_static_shape(shape, "kdist::DistributedTensor::zeros");
    auto t = runtime_type::zeros(shape, layout.to_runtime(), std::move(label));
    return DistributedTensor(std::move(t), std::move(layout), unchecked{});
  }
  //! A zero-filled tensor of the shape DataType gives (`float[784][200]`).
  static DistributedTensor zeros(
      layout_type layout,
      std::string label = "kdist::DistributedTensor") requires(!is_pending_sum &&
                                                               StaticDataType<DataType>) {
    return zeros(static_extents_, std::move(layout), std::move(label));
  }
  //! Allocated but not initialised (for callers that write every element).
  static DistributedTensor uninitialized(
      const shape_type& shape, layout_type layout,
      std::string label = "kdist::DistributedTensor") requires(!is_pending_sum) {
    check_static_shape(shape, "kdist::DistributedTensor::uninitialized");
    auto t = runtime_type::uninitialized(shape, layout.to_runtime(), std::move(label));
    return DistributedTensor(std::move(t), std::move(layout), unchecked{});
  }
  static DistributedTensor uninitialized(
      layout_type layout,
      std::string label = "kdist::DistributedTensor") requires(!is_pending_sum &&
                                                               StaticDataType<DataType>) {
    return uninitialized(static_extents_, std::move(layout), std::move(label));
  }
  //! From this process's block, a View of static or run-time extents (they must be the
  //! layout's: a ValueError, not Kokkos' abort of a static-extent conversion); for a PendingSum
  //! type the block is this process's summand.
  template <KokkosView LocalView>
  requires std::is_convertible_v<const LocalView&, runtime_view_type>
  static DistributedTensor from_local(const LocalView& local, const shape_type& shape,
                                      layout_type layout) {
    check_static_shape(shape, "kdist::DistributedTensor::from_local");
    auto t = runtime_type::from_local(runtime_view_type(local), shape, layout.to_runtime(),
                                      pending_axis_names());
    return DistributedTensor(std::move(t), std::move(layout), unchecked{});
  }

  //! ValueError unless `shape` has DataType's static extents; `who` names the caller.
  static void check_static_shape(const shape_type& shape, const char* who) {
    const std::size_t d = detail::first_static_extent_mismatch<DataType>(shape);
    if (d == rank) return;
    throw ValueError(std::string(who) + ": shape " + detail::shape_repr(shape) +
                     " differs from the type's static shape " +
                     std::string(static_shape_string().view()) + " in dimension " +
                     std::to_string(d) +
                     "; give the shape the type says, or make that extent run-time (*)");
  }
  //! The static layout (for a PendingSum: the layout the resolved sum has).
  const layout_type& layout() const {
    if (!layout_) throw ValueError("kdist::DistributedTensor::layout: the tensor is empty");
    return *layout_;
  }
  //! The tensor as a run-time one (layout and pending sum as values).
  const runtime_type& runtime() const { return *this; }
  runtime_type& runtime() { return *this; }

  //! This process's block of the values, with the type's static extents (a View: it shares the
  //! block, writes through it land in the tensor). Does not compile for a pending sum (its block
  //! is one summand): resolve it with kdist::redistribute first, or take `local_summand()` on
  //! purpose.
  template <bool Complete = !is_pending_sum>
  view_type local() const {
    require_complete<Complete>();
    return typed_view(runtime_type::local());
  }
  //! This process's block as stored, whatever the state (one summand of a pending sum).
  view_type local_summand() const { return typed_view(runtime_type::local_summand()); }

 private:
  template <bool Complete>
  static constexpr void require_complete() {
    static_assert(
        detail::diagnose<Complete,
                         error::local_of_a_pending_sum_over<
                             detail::diagnostic_name<detail::pending_axes_repr<parts::pending>>,
                             detail::diagnostic_name<layout_type::axes_repr_string()>>>::value,
        "kdist::DistributedTensor::local: the tensor is a pending sum: this process holds one "
        "summand, not the values. Resolve it (kdist::redistribute(t, t.layout())) or use "
        "local_summand()");
  }
  // The stored block with the type's static extents; an empty tensor's is an empty View (its
  // extents 0 would not convert to static ones).
  view_type typed_view(const runtime_view_type& block) const {
    if (!layout_) return view_type();
    return view_type(block);
  }

  struct unchecked {};
  DistributedTensor(runtime_type t, layout_type layout, unchecked)
      : runtime_type(std::move(t)), layout_(std::move(layout)) {}

  static std::vector<std::string> pending_axis_names() {
    std::vector<std::string> out;
    for (std::size_t k = 0; k < parts::pending.size(); ++k) {
      out.emplace_back(parts::pending.axis(k));
    }
    return out;
  }
  void check_against_type() const {
    const auto want = layout_->to_runtime();
    if (!(runtime_type::layout() == want)) {
      throw ValueError("kdist::DistributedTensor<..., " + layout_->to_string() +
                       ">: " + runtime_type::to_string() + " has another layout (" +
                       runtime_type::layout().to_string() +
                       "); kdist::redistribute it to that layout first");
    }
    // The run-time tensor drops pending axes of extent 1 (a sum over one summand is complete).
    auto expected = pending_axis_names();
    std::erase_if(expected, [&](const std::string& a) {
      return want.device_mesh()->extent(want.device_mesh()->axis_index(a)) == 1;
    });
    std::sort(expected.begin(), expected.end());
    if (runtime_type::partial_axes() != expected) {
      throw ValueError("kdist::DistributedTensor: " + runtime_type::to_string() +
                       " is a pending sum over " +
                       detail::join_quoted(runtime_type::partial_axes()) + ", the type says over " +
                       detail::join_quoted(expected) + " (" +
                       std::string(detail::pending_axes_repr<parts::pending>.view()) + ")");
    }
  }

  std::optional<layout_type> layout_;  // empty in a default-constructed tensor only
};

namespace detail {
//! The run-time tensor a tensor of DataType converts to: `DistributedTensor<float**>` for
//! `float[784][200]`.
template <class DataType, class MemorySpace = Kokkos::DefaultExecutionSpace::memory_space>
using runtime_tensor_t =
    DistributedTensor<dynamic_data_type_t<DataType>, RuntimeTensorLayout, MemorySpace>;
}  // namespace detail

}  // namespace kdist
