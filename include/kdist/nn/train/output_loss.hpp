#pragma once
//! \file nn/train/output_loss.hpp
//! `detail::OutputLoss<T>`: the training step's loss on the last layer's output, routed by what
//! the output and the loss are:
//! - (batch, outputs) rows against integer labels or (rows, outputs) targets: the loss's `sum`
//!   over this process's rows (the logits of a final softmax when the loss fuses it), whole rows
//!   gathered first; accuracy with labels;
//! - a language model's (batch, sequence, vocabulary) logits against (batch, sequence) token ids,
//!   for a loss that takes them (AnyLoss::takes_sequence_logits): the vocabulary-parallel sparse
//!   cross-entropy, the logits never gathered.
//! It writes d loss / d output (scaled by 1 / global batch) in the layout the last layer produced,
//! and sums the metrics over the processes holding distinct rows with a non-blocking all-reduce
//! that runs under the backward pass (start ... finish). Or, asked to keep them on the device
//! (Keras' steps_per_execution > 1, a step captured as a device graph), the rows' loss, correct
//! count and first label out of range stay where the kernels wrote them, added up step after step
//! (fold_step_metrics), and come back, summed over the processes, only when take_totals() reads
//! them: no wait for the device and no collective in the step. Every step's metrics add up in
//! the totals that take_totals() returns (fit's epoch loop reads them).

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <Kokkos_Core.hpp>

#include <kdist/core/detail/data_type_extents.hpp>
#include <kdist/core/error.hpp>
#include <kdist/nn/device_checks.hpp>
#include <kdist/nn/explicit_instantiation.hpp>
#include <kdist/nn/layer.hpp>
#include <kdist/nn/loss.hpp>
#include <kdist/nn/sparse_categorical_crossentropy.hpp>
#include <kdist/nn/train/metrics.hpp>
#include <kdist/ops/detail/images.hpp>
#include <kdist/ops/losses.hpp>
#include <kdist/parallel/collective_request.hpp>
#include <kdist/parallel/collectives.hpp>
#include <kdist/parallel/mesh_binding.hpp>
#include <kdist/parallel/mpi/agree.hpp>
#include <kdist/parallel/world.hpp>
#include <kdist/tensor/redistribute.hpp>
#include <kdist/tensor/reusable_views.hpp>
#include <kdist/tensor/tensor.hpp>

namespace kdist::detail {

//! picked(i, j) = y(i + r0, j + c0) as an int32 token id (a free function: nvcc takes no
//! KOKKOS_LAMBDA in a private member function).
using PickedTargets =
    Kokkos::View<std::int32_t**, Kokkos::LayoutRight, typename SparseTargets::memory_space>;
template <class YV>
void pick_targets(const YV& y, const PickedTargets& picked, std::size_t r0, std::size_t c0) {
  using Exec = typename PickedTargets::execution_space;
  Kokkos::parallel_for(
      "kdist::Sequential::targets",
      Kokkos::MDRangePolicy<Exec, Kokkos::Rank<2>, Kokkos::IndexType<std::int64_t>>(
          {0, 0}, {static_cast<std::int64_t>(picked.extent(0)),
                   static_cast<std::int64_t>(picked.extent(1))}),
      KOKKOS_LAMBDA(const std::int64_t i, const std::int64_t j) {
        picked(i, j) = static_cast<std::int32_t>(y(i + r0, j + c0));
      });
}

//! A process's block of its rows of target fields: block(n, p..., c) = targets(n, the row-major
//! position of (offsets + (p..., c)) in a field of `shape` (batch, spatial..., channels)). `block`
//! is a contiguous LayoutRight View of rank R = 4 or 5.
template <class YV, class BV, class Shape>
void pick_field_targets(const YV& targets, const BV& block, const Shape& offsets,
                        const Shape& shape) {
  using Exec = typename BV::execution_space;
  constexpr std::size_t R = static_cast<std::size_t>(BV::rank);
  Kokkos::Array<std::int64_t, R> lo{}, whole{}, part{};
  for (std::size_t d = 0; d < R; ++d) {
    lo[d] = static_cast<std::int64_t>(offsets[d]);
    whole[d] = static_cast<std::int64_t>(shape[d]);
    part[d] = static_cast<std::int64_t>(block.extent(d));
  }
  auto* out = block.data();
  Kokkos::parallel_for(
      "kdist::Sequential::field_targets",
      Kokkos::RangePolicy<Exec, Kokkos::IndexType<std::int64_t>>(
          0, static_cast<std::int64_t>(block.size())),
      KOKKOS_LAMBDA(const std::int64_t k) {
        std::int64_t rest = k, flat = 0, stride = 1;
        for (std::size_t d = R; d-- > 1;) {  // the field's dimensions, channels first
          flat += (lo[d] + rest % part[d]) * stride;
          stride *= whole[d];
          rest /= part[d];
        }
        out[k] = targets(rest, flat);
      });
}

//! Metrics a step keeps on the device: totals(0) += the step's loss sum times `loss_scale`,
//! totals(1) += its correct count (when `correct` is allocated).
using DeviceTotals = Kokkos::View<double[2], Kokkos::LayoutRight>;
inline void fold_step_metrics(const DeviceTotals& totals, const LossSum& loss, double loss_scale,
                              const LossSum& correct) {
  const bool with_correct = correct.data() != nullptr;
  Kokkos::parallel_for(
      "kdist::Sequential::fold_metrics", Kokkos::RangePolicy<Kokkos::DefaultExecutionSpace>(0, 1),
      KOKKOS_LAMBDA(const int) {
        totals(0) += loss() * loss_scale;
        if (with_correct) totals(1) += correct();
      });
}

template <class T>
class OutputLoss {
 public:
  using Matrix = DistributedTensor<T**>;

  OutputLoss() = default;
  //! A copy takes the loss, nothing of a step under way.
  OutputLoss(const OutputLoss& other) : loss_(other.loss_), fused_softmax_(other.fused_softmax_) {}
  OutputLoss& operator=(const OutputLoss& other) {
    if (this != &other) {
      request_.wait();
      loss_ = other.loss_;
      fused_softmax_ = other.fused_softmax_;
    }
    return *this;
  }
  OutputLoss(OutputLoss&&) noexcept = default;
  OutputLoss& operator=(OutputLoss&&) noexcept = default;
  ~OutputLoss() = default;

  //! The loss, and whether it takes the logits of the last layer's final softmax (fused).
  void set(AnyLoss<T> loss, bool fused_softmax) {
    loss_ = std::move(loss);
    fused_softmax_ = fused_softmax;
  }
  const AnyLoss<T>& loss() const noexcept { return loss_; }
  bool fused_softmax() const noexcept { return fused_softmax_; }

  template <class YV>
  static constexpr bool is_labels() {
    return static_cast<int>(YV::rank) == 1;
  }

  //! The loss of the last layer's output `out` against this process's targets (of the rows of
  //! its input, the first of which is the global row `first_row`); when `train`, returns d loss /
  //! d out in the layout the last layer produced it. The metrics' sum starts without blocking
  //! (collective); finish() reads it. Errors: kdist::ValueError for targets that do not fit the
  //! output, a loss that cannot take it.
  //! With `on_device` (and a loss that can, on (batch, outputs) rows: the library's), the step's
  //! metrics stay on the device (see the file's comment; kept_on_device() says whether they did),
  //! read by take_totals(); `step_at` is the step's count in device memory, for the message of a
  //! label out of range.
  template <class YV>
  std::optional<LayerTensor<T>> start(const LayerTensor<T>& out, const YV& targets,
                                      std::size_t global_batch, std::size_t first_row, bool train,
                                      bool on_device = false,
                                      const std::int64_t* step_at = nullptr) {
    global_batch_ = global_batch;
    kept_on_device_ = false;
    sums_[2] = 0.0;
    if constexpr (static_cast<std::size_t>(YV::rank) > 2) {  // a block of a target field
      (void)first_row, (void)on_device, (void)step_at;
      if (const auto* field = std::get_if<DistributedTensor<T****>>(&out)) {
        return field_loss(*field, targets, global_batch, train);
      }
      if (const auto* volume = std::get_if<DistributedTensor<T*****>>(&out)) {
        return field_loss(*volume, targets, global_batch, train);
      }
      throw ValueError("kdist::Sequential: targets of rank " + std::to_string(YV::rank) +
                       " (a block of a target field) for a model whose output is not a field; "
                       "give labels or (rows, outputs) targets");
    } else {
      return start_rows(out, targets, global_batch, first_row, train, on_device, step_at);
    }
  }

 private:
  template <class YV>
  std::optional<LayerTensor<T>> start_rows(const LayerTensor<T>& out, const YV& targets,
                                           std::size_t global_batch, std::size_t first_row,
                                           bool train, bool on_device,
                                           const std::int64_t* step_at) {
    if (const auto* logits = std::get_if<DistributedTensor<T***>>(&out)) {  // a language model
      const bool keep = train && on_device;
      if (keep) allocate_device_metrics();
      const SparseCrossEntropyOnDevice sink{step_loss_, first_bad_};
      auto result = sequence_loss(*logits, targets, first_row, keep ? &sink : nullptr);
      if (keep) {
        const auto& picked = picked_;
        const double count =
            static_cast<double>(logits->shape()[0]) * static_cast<double>(logits->shape()[1]);
        fold_step_metrics(device_totals_, step_loss_, static_cast<double>(global_batch) / count,
                          LossSum());
        checks_.record_first("kdist::Sequential: the target token", logits->shape()[2], first_bad_,
                             LossLabels(picked.data(), picked.size()), step_at);
        std::vector<std::string> axes = logits->layout().axes()[0].names();
        for (const auto& a : logits->layout().axes()[1].names()) axes.push_back(a);
        kept(logits->layout(), std::move(axes), false);
        sequence_loss_.reset();
      } else {
        sequence_loss_ = result.loss;
      }
      if (!train) return std::nullopt;
      return LayerTensor<T>(std::move(result.dlogits));
    }
    sequence_loss_.reset();
    if (const auto* field = std::get_if<DistributedTensor<T****>>(&out)) {
      return field_loss(*field, targets, global_batch, train);
    }
    if (const auto* volume = std::get_if<DistributedTensor<T*****>>(&out)) {
      return field_loss(*volume, targets, global_batch, train);
    }
    auto [rows, produced] = rows_of(out);
    check_targets(rows.local(), targets);
    const auto target = loss_target(targets);
    has_accuracy_ = is_labels<YV>();
    std::optional<typename Matrix::view_type> grad;
    if (train) grad = dloss_views_.get("dloss", rows.local().extent(0), rows.local().extent(1));
    const T scale = train ? T(1) / static_cast<T>(global_batch) : T(0);
    const LossGradient<T> g = grad ? LossGradient<T>(*grad) : LossGradient<T>();
    if (train && on_device && keep_on_device(rows, target, g, scale, step_at)) {
      return LayerTensor<T>(
          redistribute(Matrix::from_local(*grad, rows.shape(), rows.layout()), produced, moved_));
    }
    // A loss that fails here (a label out of range) fails on this process alone: its rows add
    // nothing, the flag goes with the metrics' sum, and every process of the sum ends with the
    // message before the update (check_agreed), none left waiting in the step's collectives.
    failure_.clear();
    try {
      sums_[0] =
          loss_.sum(LossInput<T>(rows.local()), target, grad ? &g : nullptr, scale, fused_softmax_);
      sums_[1] = count_correct(rows.local(), target);
    } catch (const ValueError& e) {
      failure_ = e.what();
      sums_[0] = sums_[1] = 0.0;
      if (grad) Kokkos::deep_copy(*grad, T(0));
    }
    sums_[2] = failure_.empty() ? 0.0 : 1.0;
    start_sums(rows);
    if (!train) return std::nullopt;
    return LayerTensor<T>(
        redistribute(Matrix::from_local(*grad, rows.shape(), rows.layout()), produced, moved_));
  }

 public:
  //! The step's global mean loss (and accuracy), once their sum is done; the same on every
  //! process.
  Metrics finish() {
    Metrics m;
    if (sequence_loss_) {
      m = {*sequence_loss_, 0.0, global_batch_, false};
    } else {
      check_agreed();
      const double n = static_cast<double>(global_batch_);
      m = {sums_[0] / n, has_accuracy_ ? sums_[1] / n : 0.0, global_batch_, has_accuracy_};
    }
    totals_.loss += m.loss * static_cast<double>(m.examples);
    totals_.correct += m.accuracy * static_cast<double>(m.examples);
    totals_.examples += m.examples;
    totals_.has_accuracy = m.has_accuracy;
    return m;
  }
  //! Waits for the step's metrics sum (started by start()) and, when the loss failed on any
  //! process of it, throws that failure on every one (kdist::ValueError; a collective then). The
  //! training step calls it before the update, so a failed step changes no weight.
  void check_agreed() {
    request_.wait();
    if (sums_[2] == 0.0) return;
    sums_[2] = 0.0;
    std::string failure = std::exchange(failure_, std::string());
    if (!sum_comm_) throw ValueError(failure);
    mpi::agree(*sum_comm_, failure.empty(), failure);
    throw ValueError(failure);  // not reached: the flag says some process failed
  }
  //! The host's part of a step kept on the device that ran again as a replayed graph (the device's
  //! part, the fold, is in the graph); unstage() takes back that of a capture that failed.
  void replayed(std::size_t global_batch) {
    totals_.examples += global_batch;
    device_pending_ = true;
  }
  void unstage(std::size_t global_batch) {
    if (kept_on_device_ && totals_.examples >= global_batch) totals_.examples -= global_batch;
  }
  //! Where the layers of a step kept on the device record their input checks (StepContext::checks).
  DeviceChecks* device_checks() noexcept { return &checks_; }
  //! Whether the last start() kept the step's metrics on the device (then finish() is not called).
  bool kept_on_device() const noexcept { return kept_on_device_; }

  //! What the steps since the last take_totals() (or reset_totals()) add up to: the sum of the
  //! per-example losses, of the correct predictions, and the examples. Reads the metrics kept on
  //! the device (one copy, and one all-reduce over the processes holding distinct rows: collective
  //! when any were kept). Errors: kdist::ValueError on every process when a step kept on the
  //! device had a label out of range (its step, row and label named).
  struct Totals {
    double loss = 0, correct = 0;
    std::size_t examples = 0;
    bool has_accuracy = false;
  };
  Totals take_totals() {
    Totals out = totals_;
    totals_ = {};
    if (!device_pending_ && !checks_.pending()) return out;
    double h[2] = {0.0, 0.0};  // the one read of the device (a copy: on the host the mirror is
    if (device_pending_) {     // the View itself)
      Kokkos::deep_copy(
          Kokkos::View<double[2], Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>(h),
          device_totals_);
      Kokkos::deep_copy(device_totals_, 0.0);
      if (!read_axes_.empty()) {
        const Kokkos::View<double*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>> v(
            h, 2);
        all_reduce(Kokkos::DefaultHostExecutionSpace(), v, ReduceOp::sum,
                   communicators(*read_layout_->device_mesh())
                       .comm(std::span<const std::string>(read_axes_)));
      }
    }
    device_pending_ = false;
    // A failed check on any process ends every process with it (one all-reduce of a flag).
    const std::string failure = checks_.take();
    if (process_count() > 1) {
      mpi::agree(kdist::communicator(), failure.empty(), failure);
    } else if (!failure.empty()) {
      throw ValueError(failure);
    }
    out.loss += h[0];
    out.correct += h[1];
    return out;
  }
  //! Drops the totals without reading them (no collective): fit's epoch starts afresh.
  void reset_totals() {
    totals_ = {};
    if (device_pending_) Kokkos::deep_copy(device_totals_, 0.0);
    device_pending_ = false;
  }

 private:
  //! The step's loss (and correct count, first label out of range) into the device's totals, when
  //! the loss can leave its sum there; false, nothing done, when it cannot.
  template <class Y>
  bool keep_on_device(const Matrix& rows, const Y& target, const LossGradient<T>& grad, T scale,
                      const std::int64_t* step_at) {
    if (!loss_.keeps_sum_on_device(fused_softmax_)) return false;
    allocate_device_metrics();
    const auto& z = rows.local();
    constexpr bool labels = std::is_same_v<Y, LossLabels>;
    if constexpr (labels) {
      ops::first_invalid_label_into(target, static_cast<std::int64_t>(z.extent(1)), first_bad_);
      checks_.record_first("kdist::Sequential: the label", z.extent(1), first_bad_, target,
                           step_at);
      if constexpr (Kokkos::SpaceAccessibility<Kokkos::HostSpace,
                                               LossLabels::memory_space>::accessible) {
        // The host's loss would index out of range: this process's rows add nothing this step
        // (the other processes go on in step with it), and the read ends every process.
        if (first_bad_() < static_cast<std::int64_t>(target.extent(0))) {
          Kokkos::deep_copy(grad, T(0));
          Kokkos::deep_copy(step_loss_, 0.0);
          Kokkos::deep_copy(step_correct_, 0.0);
          fold_step_metrics(device_totals_, step_loss_, 1.0, step_correct_);
          kept(rows.layout(), rows.layout().axes()[0].names(), labels);
          return true;
        }
      }
      (void)loss_.sum_into(LossInput<T>(z), target, grad, scale, fused_softmax_, step_loss_);
      ops::count_correct_into(z, target, step_correct_);
      fold_step_metrics(device_totals_, step_loss_, 1.0, step_correct_);
    } else {
      (void)step_at;
      (void)loss_.sum_into(LossInput<T>(z), target, grad, scale, fused_softmax_, step_loss_);
      fold_step_metrics(device_totals_, step_loss_, 1.0, LossSum());
    }
    kept(rows.layout(), rows.layout().axes()[0].names(), labels);
    return true;
  }
  //! The device's metrics Views, once.
  void allocate_device_metrics() {
    if (device_totals_.is_allocated()) return;
    device_totals_ = DeviceTotals("kdist::metrics/totals");
    step_loss_ = LossSum("kdist::metrics/loss");
    step_correct_ = LossSum("kdist::metrics/correct");
    first_bad_ = Kokkos::View<std::int64_t, Kokkos::LayoutRight>("kdist::metrics/first_bad");
  }
  //! Notes a step whose metrics stayed on the device: the processes to sum them over at the read
  //! (`axes` of `layout`'s mesh).
  void kept(const RuntimeTensorLayout& layout, std::vector<std::string> axes, bool accuracy) {
    read_layout_ = layout;
    read_axes_ = std::move(axes);
    device_pending_ = true;
    kept_on_device_ = true;
    totals_.examples += global_batch_;
    totals_.has_accuracy = accuracy;
  }

  //! A language model's loss: (batch, sequence, vocabulary) logits against the integer tokens in
  //! `targets` ((rows of x_local, sequence), any integer or T values), by the vocabulary-parallel
  //! sparse categorical cross-entropy (the logits are never gathered). Each process passes the
  //! targets of its logits block.
  template <class YV>
  SparseCrossEntropyResult<T> sequence_loss(const DistributedTensor<T***>& logits,
                                            const YV& targets, std::size_t first_row,
                                            const SparseCrossEntropyOnDevice* on_device) {
    if (!loss_.takes_sequence_logits()) {
      throw ValueError(
          "kdist::Sequential: a model of (batch, sequence, vocabulary) outputs trains with a loss "
          "of logits, kdist::Loss::sparse_categorical_crossentropy (end it in a Dense without "
          "activation), not " +
          loss_.name());
    }
    if constexpr (static_cast<int>(YV::rank) != 2) {
      throw ValueError(
          "kdist::Sequential: a model of (batch, sequence, vocabulary) outputs takes targets of "
          "(batch, sequence) token ids (a rank-2 View, or an ArrayDataset of target width equal "
          "to the sequence length), not one label per example");
    } else {
      const auto& block = logits.local();
      const std::size_t seq = logits.shape()[1];
      if (targets.extent(1) != seq) {
        throw ValueError("kdist::Sequential: targets of " + std::to_string(targets.extent(1)) +
                         " tokens per example for outputs of sequence length " +
                         std::to_string(seq) + "; give one target token per position");
      }
      const std::size_t r0 = logits.offsets()[0] - std::min(logits.offsets()[0], first_row);
      if (logits.offsets()[0] < first_row || r0 + block.extent(0) > targets.extent(0)) {
        throw ValueError(
            "kdist::Sequential: the output logits' rows " + std::to_string(logits.offsets()[0]) +
            ".." + std::to_string(logits.offsets()[0] + block.extent(0)) +
            " are not among this process's " + std::to_string(targets.extent(0)) +
            " rows of the batch; lay the last layer's output out with the batch dimension on "
            "the data axes (the input's layout)");
      }
      const std::size_t c0 = logits.offsets()[1];
      const auto picked = picked_views_.get("kdist::lm_targets", block.extent(0), block.extent(1));
      picked_ = picked;
      pick_targets(
          Kokkos::create_mirror_view_and_copy(typename PickedTargets::memory_space(), targets),
          picked, r0, c0);
      return sparse_categorical_crossentropy(logits, picked, &xent_buffers_, on_device);
    }
  }

  //! The output as rows: whole rows on each process (its columns gathered), and the layout the
  //! last layer produced it in.
  //! The loss of a field output (batch, height, width, channels) or (batch, depth, height, width,
  //! channels) - a surrogate of a simulation's field - against targets of the field's values per
  //! example (in row-major order): Keras' mean_squared_error, the mean over every value. Each process takes its
  //! block of the output as it is laid out (spatially sharded: the field never gathered) against
  //! the same block of its rows of targets; the sum runs over every mesh axis of the layout.
  template <class Field, class YV>
  std::optional<LayerTensor<T>> field_loss(const Field& out, const YV& targets,
                                           std::size_t global_batch, bool train) {
    has_accuracy_ = false;
    if constexpr (is_labels<YV>()) {
      (void)out, (void)targets, (void)global_batch, (void)train;
      throw ValueError(
          "kdist::Sequential: the model gives (batch, height, width, channels) fields, which take "
          "target fields (height * width * channels values per example), not class labels; end it "
          "with a Flatten and a Dense to classify");
    } else {
      if (loss_.name() != "mean_squared_error") {
        throw ValueError(
            "kdist::Sequential: the model gives (batch, height, width, channels) "
            "fields, which take Loss::mean_squared_error, not " +
            loss_.name());
      }
      constexpr std::size_t R = Field::rank;
      const auto& s = out.shape();
      std::size_t per = 1;
      std::string dims;
      for (std::size_t d = 1; d < R; ++d) {
        per *= s[d];
        dims += (d > 1 ? " x " : "") + std::to_string(s[d]);
      }
      const auto& z = out.local();
      auto& buffers = field_buffers_.template of_rank<R>();
      const auto picked = buffers.targets.get_like("kdist::targets/block", z);
      if constexpr (static_cast<std::size_t>(YV::rank) == R) {
        // This process's block of the target field, as the output is laid out (a simulation's
        // own block of its next state: kdist::from_local_blocks' way).
        for (std::size_t d = 0; d < R; ++d) {
          if (targets.extent(d) != z.extent(d)) {
            throw ValueError("kdist::Sequential: a block of targets of extents " +
                             ops::detail::extents_of(targets) + " for the output's block " +
                             ops::detail::extents_of(z) + " on this process (layout " +
                             out.layout().axes_repr() + "); give each process its block");
          }
        }
        if constexpr (std::is_same_v<typename YV::memory_space, typename Field::memory_space>) {
          Kokkos::deep_copy(picked, targets);
        } else {
          Kokkos::deep_copy(
              picked, Kokkos::create_mirror_view_and_copy(typename Field::memory_space(), targets));
        }
      } else if constexpr (static_cast<std::size_t>(YV::rank) != 2) {
        throw ValueError("kdist::Sequential: targets of rank " + std::to_string(YV::rank) +
                         " for fields of rank " + std::to_string(R) +
                         "; give this process's block of the target field (rank " +
                         std::to_string(R) + ") or whole rows (rank 2)");
      } else {
        check_targets(z, targets);
        if (targets.extent(1) != per) {
          throw ValueError("kdist::Sequential: targets of " + std::to_string(targets.extent(1)) +
                           " values per example for fields of " + dims + " = " +
                           std::to_string(per) + " values");
        }
        pick_field_targets(loss_target(targets), picked, out.offsets(), s);
      }
      typename Field::view_type grad;
      if (train) grad = buffers.grads.get_like("dloss", z);
      const std::size_t block = z.size() / (z.extent(0) > 0 ? z.extent(0) : 1);
      sums_[0] = sums_[1] = sums_[2] = 0.0;
      if (block > 0 && z.extent(0) > 0) {
        // The loss takes rows (n, block) and means over a row: rescaled to the mean over `per`.
        const double part = static_cast<double>(block) / static_cast<double>(per);
        const T scale = train ? static_cast<T>(part / static_cast<double>(global_batch)) : T(0);
        auto rows = [&](const auto& v) {
          return typename Matrix::view_type(v.data(), z.extent(0), block);
        };
        const auto pz = packed(z);
        const LossGradient<T> g = train ? LossGradient<T>(rows(grad)) : LossGradient<T>();
        sums_[0] = part * loss_.sum(LossInput<T>(rows(pz)),
                                    LossTargets<T>(picked.data(), z.extent(0), block),
                                    train ? &g : nullptr, scale, false);
      } else if (train) {
        Kokkos::deep_copy(grad, T(0));
      }
      std::vector<std::string> axes;
      for (const auto& d : out.layout().axes()) {
        for (const auto& a : d.names()) axes.push_back(a);
      }
      if (out.layout().device_mesh()) start_sums(out.layout(), axes);
      if (!train) return std::nullopt;
      return LayerTensor<T>(Field::from_local(grad, s, out.layout()));
    }
  }
  //! `z` when contiguous, else a packed copy (kept).
  template <class V>
  V packed(const V& z) {
    if (z.span_is_contiguous()) return z;
    const auto copy =
        field_buffers_.template of_rank<static_cast<std::size_t>(V::rank)>().packed.get_like(
            "kdist::field/packed", z);
    Kokkos::deep_copy(copy, z);
    return copy;
  }

  std::pair<Matrix, RuntimeTensorLayout> rows_of(const LayerTensor<T>& h) {
    const auto* out = std::get_if<Matrix>(&h);
    if (out == nullptr) {
      throw ValueError(
          "kdist::Sequential: the last layer's output has a rank the losses do not take; end "
          "the model with a Dense (batch, outputs) or a layer giving (batch, height, width, "
          "channels) fields");
    }
    RuntimeTensorLayout produced = out->layout();
    RuntimeTensorLayout rows({produced.axes()[0], DimAxes()}, produced.device_mesh());
    return {produced == rows ? *out : redistribute(*out, rows), produced};
  }

  //! The targets as a loss takes them (kdist::LossLabels or kdist::LossTargets): the View itself
  //! when it converts, else a copy (other integer types, layouts or memory spaces).
  template <class YV>
  static auto loss_target(const YV& targets) {
    if constexpr (is_labels<YV>()) {
      static_assert(std::is_integral_v<typename YV::non_const_value_type>,
                    "kdist::Sequential: integer labels (a rank-1 View) must be of an integer type");
      return converted<LossLabels>(targets);
    } else {
      return converted<LossTargets<T>>(targets);
    }
  }
  template <class Want, class YV>
  static Want converted(const YV& y) {
    if constexpr (Kokkos::is_always_assignable<Want, YV>::value) {
      return Want(y);
    } else {
      using Host =
          Kokkos::View<typename Want::non_const_data_type, Kokkos::LayoutRight, Kokkos::HostSpace>;
      using V = typename Want::non_const_value_type;
      auto from = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), y);
      Host copy;
      if constexpr (is_labels<YV>()) {
        copy = Host(Kokkos::view_alloc(Kokkos::WithoutInitializing, "kdist::targets"), y.extent(0));
        for (std::size_t i = 0; i < y.extent(0); ++i) copy(i) = static_cast<V>(from(i));
      } else {
        copy = Host(Kokkos::view_alloc(Kokkos::WithoutInitializing, "kdist::targets"), y.extent(0),
                    y.extent(1));
        for (std::size_t i = 0; i < y.extent(0); ++i) {
          for (std::size_t j = 0; j < y.extent(1); ++j) copy(i, j) = static_cast<V>(from(i, j));
        }
      }
      return Want(Kokkos::create_mirror_view_and_copy(typename Want::memory_space(), copy));
    }
  }
  template <class OV, class YV>
  static double count_correct(const OV& out, const YV& targets) {
    if constexpr (is_labels<YV>()) {
      return static_cast<double>(ops::count_correct(out, targets));
    } else {
      (void)out, (void)targets;
      return 0.0;
    }
  }
  template <class OV, class YV>
  static void check_targets(const OV& out, const YV& targets) {
    static_assert(Kokkos::is_view<YV>::value && (YV::rank == 1 || YV::rank == 2),
                  "kdist::Sequential: targets must be a Kokkos::View of integer labels (rank 1) "
                  "or of values (rank 2)");
    if (targets.extent(0) != out.extent(0)) {
      throw ValueError("kdist::Sequential: " + std::to_string(targets.extent(0)) +
                       " targets for the " + std::to_string(out.extent(0)) +
                       " rows this process holds; give the targets of its rows of the batch");
    }
  }

  //! Starts the sum of the loss sum and correct count over the processes holding distinct rows
  //! (the batch axes), so that model replicas count once.
  void start_sums(const Matrix& rows) {
    start_sums(rows.layout(), rows.layout().axes()[0].names());
  }
  //! ... over the processes holding distinct blocks along `axes` of `layout`'s mesh.
  void start_sums(const RuntimeTensorLayout& layout, const std::vector<std::string>& axes) {
    request_ = CollectiveRequest();
    sum_comm_.reset();
    if (axes.empty()) return;
    const auto& comm =
        communicators(*layout.device_mesh()).comm(std::span<const std::string>(axes));
    sum_comm_ = comm.get();
    const Kokkos::View<double*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>> sums(
        sums_, 3);
    request_ = start_all_reduce(Kokkos::DefaultHostExecutionSpace(), sums, ReduceOp::sum, comm);
  }

  AnyLoss<T> loss_ = Loss::categorical_crossentropy;
  bool fused_softmax_ = false;
  // The step under way: its metrics' sums and the count of processes whose loss failed (read
  // once request_ is done, over sum_comm_) or a language model's loss.
  double sums_[3] = {0, 0, 0};
  std::string failure_;  //!< this process's loss failure, when it had one
  std::optional<MPI_Comm> sum_comm_;
  CollectiveRequest request_;
  std::optional<double> sequence_loss_;
  std::size_t global_batch_ = 0;
  bool has_accuracy_ = false;
  // A step's own buffers, kept for the next steps (kdist::ReusableViews: no allocation per step).
  ReusableViews<typename Matrix::view_type> dloss_views_, moved_;
  // A field output's (kept too): its block of targets, its gradient, a packed copy; per rank.
  template <std::size_t R>
  struct FieldBuffers {
    using View = typename DistributedTensor<typename dynamic_data_type<T, R>::type>::view_type;
    ReusableViews<View> targets, grads, packed;
  };
  struct FieldBuffersByRank {
    FieldBuffers<4> images;
    FieldBuffers<5> volumes;
    template <std::size_t R>
    auto& of_rank() {
      if constexpr (R == 4) {
        return images;
      } else {
        return volumes;
      }
    }
  } field_buffers_;
  ReusableViews<PickedTargets> picked_views_;
  PickedTargets picked_;  //!< the last step's, for the fold's message
  SparseCrossEntropyBuffers<T> xent_buffers_;
  // The totals take_totals() returns: the steps whose metrics came back to the host, and those
  // kept on the device (device_totals_, laid out as fold_step_metrics says, summed at the read
  // over the processes along read_axes_ of read_layout_'s mesh).
  Totals totals_;
  bool kept_on_device_ = false, device_pending_ = false;
  DeviceTotals device_totals_;
  LossSum step_loss_, step_correct_;
  Kokkos::View<std::int64_t, Kokkos::LayoutRight> first_bad_;
  std::optional<RuntimeTensorLayout> read_layout_;
  std::vector<std::string> read_axes_;
  //! The checks of the steps kept on the device (labels, target tokens, the layers' inputs).
  DeviceChecks checks_;
};

}  // namespace kdist::detail

KDIST_EXTERN_CLASS(kdist::detail::OutputLoss)
