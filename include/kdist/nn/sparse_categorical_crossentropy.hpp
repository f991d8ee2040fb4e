#pragma once
//! \file nn/sparse_categorical_crossentropy.hpp
//! `kdist::sparse_categorical_crossentropy(logits, targets)`: Keras'
//! `SparseCategoricalCrossentropy(from_logits=True)` on (batch, sequence, vocabulary) logits in
//! any layout, a language model's loss. The vocabulary may be sharded over mesh axes (the output
//! of a column-parallel Dense, Megatron's vocabulary-parallel cross-entropy): the logits are never
//! gathered. Per row (a (batch, position) pair) the processes holding its vocabulary blocks
//! combine
//!   - the row max: one all-reduce (max) over the vocabulary axes' communicator,
//!   - the sum of exp(z - max) and the target's logit (held by one block, 0 elsewhere): one
//!     all-reduce (sum) of both at once over the same communicator,
//! each a vector of one (two) values per local row; the gradient `softmax - onehot` is then local.
//! The loss sum goes through one all-reduce of one double over the row axes (batch and sequence).
//! A vocabulary and rows not sharded (or on axes of extent 1) cost no communication; a mesh of
//! more than one process adds the check of the targets (kdist::mpi::agree, one all-reduce of an
//! int). The collectives open "kdist::all_reduce" profiling regions, inside the region
//! "kdist::sparse_categorical_crossentropy".
//!
//! \code
//! // logits: (batch, seq, vocab) laid out ("data", None, "model"); targets: this process's rows
//! kdist::SparseTargets targets("targets", logits.local_extents()[0], logits.local_extents()[1]);
//! auto [loss, dlogits] = kdist::sparse_categorical_crossentropy(logits, targets);
//! kdist::backward_and_resolve(lm_head, LayerTensor<float>(dlogits), true);
//! \endcode

#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <variant>
#include <vector>

#include <Kokkos_Core.hpp>

#include <kdist/core/error.hpp>
#include <kdist/nn/layer.hpp>
#include <kdist/ops/losses.hpp>
#include <kdist/ops/sparse_cross_entropy.hpp>
#include <kdist/parallel/collectives.hpp>
#include <kdist/parallel/detail/collective_split.hpp>
#include <kdist/parallel/mesh_binding.hpp>
#include <kdist/parallel/mpi/agree.hpp>
#include <kdist/parallel/profiling_region.hpp>
#include <kdist/tensor/reusable_views.hpp>
#include <kdist/tensor/tensor.hpp>

namespace kdist {

//! The integer targets of this process's rows: a (local batch, local sequence) View of int32 in
//! the logits' memory space, element (i, j) the class of global row (logits.offsets()[0] + i,
//! logits.offsets()[1] + j), i.e. `local_extents()[0] x local_extents()[1]` of the logits' block.
//! Processes that hold the same rows (other vocabulary blocks, replicas) pass the same targets.
using SparseTargets = Kokkos::View<const std::int32_t**, Kokkos::LayoutRight,
                                   Kokkos::DefaultExecutionSpace::memory_space>;

//! What sparse_categorical_crossentropy returns.
template <class T>
struct SparseCrossEntropyResult {
  //! The mean of the per-position losses `logsumexp(z) - z[target]` over all batch * sequence
  //! positions of the global tensor; the same value on every process.
  double loss = 0.0;
  //! d(loss)/d(logits) = (softmax(z) - onehot(target)) / (batch * sequence), laid out exactly as
  //! the logits (vocabulary blocks stay where they are).
  DistributedTensor<T***> dlogits;
};

namespace detail::sparse_xent {

//! The product of the mesh extents of `axes` (1 for none).
inline std::size_t extent_of(const RuntimeDeviceMesh& mesh, const std::vector<std::string>& axes) {
  std::size_t n = 1;
  for (const auto& a : axes) {
    for (std::size_t i = 0; i < mesh.axis_names().size(); ++i) {
      if (mesh.axis_names()[i] == a) n *= mesh.shape()[i];
    }
  }
  return n;
}

//! A contiguous LayoutRight View's elements as a rank-1 unmanaged View.
template <class V>
Kokkos::View<typename V::value_type*, Kokkos::LayoutRight, typename V::memory_space,
             Kokkos::MemoryTraits<Kokkos::Unmanaged>>
flat(const V& v) {
  using R = Kokkos::View<typename V::value_type*, Kokkos::LayoutRight, typename V::memory_space,
                         Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
  return R(v.data(), v.size());
}

//! A contiguous LayoutRight (a, b, c) View as the matrix (a * b, c).
template <class V>
Kokkos::View<typename V::value_type**, Kokkos::LayoutRight, typename V::memory_space,
             Kokkos::MemoryTraits<Kokkos::Unmanaged>>
rows(const V& v) {
  using R = Kokkos::View<typename V::value_type**, Kokkos::LayoutRight, typename V::memory_space,
                         Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
  return R(v.data(), v.extent(0) * v.extent(1), v.extent(2));
}

}  // namespace detail::sparse_xent

//! Where sparse_categorical_crossentropy leaves its loss for a step that keeps its metrics on the
//! device (kdist::detail::OutputLoss): the sum of the losses of this process's rows (neither
//! summed over the processes nor divided), and the first of its targets out of range (a flat
//! index into the targets; the largest int64 when none), found without waiting for the device.
struct SparseCrossEntropyOnDevice {
  Kokkos::View<double, Kokkos::LayoutRight> sum;
  Kokkos::View<std::int64_t, Kokkos::LayoutRight> first_bad;
};

//! The buffers of sparse_categorical_crossentropy kept from one call to the next (a model keeps
//! one: its steps allocate nothing once the shapes have been seen).
template <class T>
struct SparseCrossEntropyBuffers {
  using MemorySpace = typename DistributedTensor<T***>::memory_space;
  ReusableViews<Kokkos::View<T*, Kokkos::LayoutRight, MemorySpace>> row_max;
  ReusableViews<Kokkos::View<T**, Kokkos::LayoutRight, MemorySpace>> row_sums;
  ReusableViews<typename DistributedTensor<T***>::view_type> dlogits;
};

//! Sparse categorical cross-entropy from LOGITS (Keras' `SparseCategoricalCrossentropy(
//! from_logits=True)`, reduction "sum_over_batch_size") of (batch, sequence, vocabulary) logits in
//! any layout (a complete tensor, not a pending sum) and this process's integer targets (see
//! kdist::SparseTargets: the (local batch, local sequence) rows of the logits' block). Returns the
//! global mean loss (the same double on every process) and the gradient laid out as the logits,
//! already divided by batch * sequence. Collective over the logits' mesh.
//!
//! Errors (kdist::ValueError, on every process alike): targets whose extents are not the logits'
//! local (batch, sequence) extents, a target outside [0, vocabulary) on any process (the message
//! gives the count, the first bad value and the vocabulary size), an empty vocabulary.
//! `buffers`, when given, supplies the per-row statistics and the gradient's block. With
//! `on_device`, the loss and the range of the targets are left there (see
//! SparseCrossEntropyOnDevice; the returned loss is NaN): no wait for the device, and no
//! all-reduce of the loss.
template <class T>
SparseCrossEntropyResult<T> sparse_categorical_crossentropy(
    const DistributedTensor<T***>& logits,
    const Kokkos::View<const std::int32_t**, Kokkos::LayoutRight,
                       typename DistributedTensor<T***>::memory_space>& targets,
    SparseCrossEntropyBuffers<T>* buffers = nullptr,
    const SparseCrossEntropyOnDevice* on_device = nullptr) {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>,
                "kdist::sparse_categorical_crossentropy: logits of float or double");
  kdist::detail::ProfilingRegion region("kdist::sparse_categorical_crossentropy");
  namespace sx = detail::sparse_xent;
  using Tensor = DistributedTensor<T***>;
  using MemorySpace = typename Tensor::memory_space;
  const char* who = "kdist::sparse_categorical_crossentropy";
  const auto& shape = logits.shape();
  const auto& mesh = logits.device_mesh();
  const std::size_t vocab = shape[2];
  if (vocab == 0) {
    throw ValueError(std::string(who) + ": the logits have shape " +
                     kdist::detail::shape_repr(shape) +
                     ": an empty vocabulary (last dimension); give at least one class");
  }
  const auto& z3 = logits.local();  // ValueError (everywhere alike) for a pending sum
  const std::size_t lb = z3.extent(0);
  const std::size_t ls = z3.extent(1);

  // ---- the targets: check here, then agree (a wrong View on one process ends them all) ------
  std::string problem;
  if (targets.extent(0) != lb || targets.extent(1) != ls) {
    problem = std::string(who) + ": the targets View is " + std::to_string(targets.extent(0)) +
              "x" + std::to_string(targets.extent(1)) + " on process " +
              std::to_string(logits.device()) + " but its block of the logits " +
              kdist::detail::shape_repr(shape) + " (layout " + logits.layout().axes_repr() +
              ") has " + std::to_string(lb) + "x" + std::to_string(ls) +
              " (batch, sequence) rows; pass the targets of exactly this process's rows "
              "(local_extents()[0] x local_extents()[1], from offsets()[0], offsets()[1])";
  }
  Kokkos::View<const std::int32_t**, Kokkos::LayoutRight, MemorySpace> t2 = targets;
  if (problem.empty() && !targets.span_is_contiguous()) {
    Kokkos::View<std::int32_t**, Kokkos::LayoutRight, MemorySpace> packed(
        Kokkos::view_alloc(Kokkos::WithoutInitializing, "kdist::sparse_xent/targets"), lb, ls);
    Kokkos::deep_copy(packed, targets);
    t2 = packed;
  }
  if (problem.empty() && on_device != nullptr) {  // found on the device, read with the metrics
    ops::first_invalid_label_into(sx::flat(t2), static_cast<std::int64_t>(vocab),
                                  on_device->first_bad);
  } else if (problem.empty()) {
    const auto tflat = sx::flat(t2);
    const std::int64_t bad = ops::count_out_of_range(tflat, static_cast<std::int64_t>(vocab));
    if (bad > 0) {
      auto host = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), tflat);
      std::int64_t first = 0;
      for (std::size_t i = 0; i < host.extent(0); ++i) {
        if (host(i) < 0 || static_cast<std::size_t>(host(i)) >= vocab) {
          first = host(i);
          break;
        }
      }
      problem = std::string(who) + ": " + std::to_string(bad) + " target(s) on process " +
                std::to_string(logits.device()) + " lie outside [0, " + std::to_string(vocab) +
                ") (the first is " + std::to_string(first) +
                "); targets are class indices into the logits' last dimension (vocabulary " +
                std::to_string(vocab) + ")";
    }
  }
  if (mesh.size() > 1) {
    // With the targets' range checked on the device the agreement is on shapes alone, which a
    // step recorded as a graph keeps: there it is a host call between two pieces of the graph.
    const MPI_Comm world = communicators(mesh).world().get();
    if (on_device == nullptr || !problem.empty() ||
        !kdist::detail::offer_host_call_to_split(
            "kdist::sparse_categorical_crossentropy's agreement on the targets' shapes",
            [world] { mpi::agree(world, true, ""); })) {
      mpi::agree(world, problem.empty(), problem);
    }
  } else if (!problem.empty()) {
    throw ValueError(problem);
  }

  // ---- per-row statistics, combined over the vocabulary's axes --------------------------------
  const auto& vocab_axes = logits.layout().axes()[2].names();
  std::vector<std::string> row_axes = logits.layout().axes()[0].names();
  for (const auto& a : logits.layout().axes()[1].names()) row_axes.push_back(a);
  const bool vocab_split = sx::extent_of(mesh, vocab_axes) > 1;
  const bool rows_split = sx::extent_of(mesh, row_axes) > 1;
  const auto space = typename MemorySpace::execution_space();

  const auto z = sx::rows(z3);
  const auto t = sx::flat(t2);
  const std::size_t nrows = lb * ls;
  const auto col0 = static_cast<std::int64_t>(logits.offsets()[2]);
  SparseCrossEntropyBuffers<T> call_buffers;  // this call's only, when none are given
  SparseCrossEntropyBuffers<T>& b = buffers != nullptr ? *buffers : call_buffers;
  const auto m = b.row_max.get("kdist::sparse_xent/max", nrows);
  const auto st = b.row_sums.get("kdist::sparse_xent/sums", nrows, 2);
  ops::row_max(z, m);
  if (vocab_split) {
    const auto& comm = communicators(mesh).comm(std::span<const std::string>(vocab_axes));
    all_reduce(space, m, ReduceOp::max, comm);
  }
  ops::sum_exp_and_target(z, m, t, col0, st);
  if (vocab_split) {
    const auto& comm = communicators(mesh).comm(std::span<const std::string>(vocab_axes));
    all_reduce(space, st, ReduceOp::sum, comm);
  }

  // ---- the loss: each row once (summed over the row axes), divided by batch * sequence -------
  const double count = static_cast<double>(shape[0]) * static_cast<double>(shape[1]);
  double sum = std::numeric_limits<double>::quiet_NaN();  // on the device: not read here
  if (on_device != nullptr) {
    ops::sparse_xent_sum_into(m, st, on_device->sum);
  } else {
    sum = ops::sparse_xent_sum(m, st);
  }
  if (rows_split && on_device == nullptr) {
    Kokkos::View<double*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>> one(&sum, 1);
    const auto& comm = communicators(mesh).comm(std::span<const std::string>(row_axes));
    all_reduce(Kokkos::DefaultHostExecutionSpace(), one, ReduceOp::sum, comm);
  }

  // ---- the gradient, local: (softmax - onehot) / count ----------------------------------------
  const auto g = b.dlogits.get("kdist::dlogits", lb, ls, z3.extent(2));
  const T scale = count > 0 ? static_cast<T>(1.0 / count) : T(0);
  ops::sparse_xent_grad(z, m, st, t, col0, scale, sx::rows(g));
  SparseCrossEntropyResult<T> out;
  out.loss = count > 0 ? sum / count : 0.0;
  out.dlogits = Tensor::from_local(g, shape, logits.layout());
  return out;
}

//! The same for logits held as a layer's output (kdist::LayerTensor). Errors: as above, and
//! kdist::ValueError for logits that are not of rank 3 (batch, sequence, vocabulary).
template <class T>
SparseCrossEntropyResult<T> sparse_categorical_crossentropy(
    const LayerTensor<T>& logits,
    const Kokkos::View<const std::int32_t**, Kokkos::LayoutRight,
                       typename DistributedTensor<T***>::memory_space>& targets,
    SparseCrossEntropyBuffers<T>* buffers = nullptr,
    const SparseCrossEntropyOnDevice* on_device = nullptr) {
  if (const auto* t3 = std::get_if<DistributedTensor<T***>>(&logits)) {
    return sparse_categorical_crossentropy(*t3, targets, buffers, on_device);
  }
  const std::size_t rank = std::visit([](const auto& v) { return v.rank; }, logits);
  throw ValueError(
      "kdist::sparse_categorical_crossentropy: the logits have rank " + std::to_string(rank) +
      "; it takes (batch, sequence, vocabulary) logits of rank 3 (for (batch, classes) logits "
      "use kdist::losses::CategoricalCrossentropy or kdist::ops::softmax_cross_entropy)");
}

}  // namespace kdist
