#pragma once
//! \file nn/model.hpp
//! `kdist::Sequential`: Keras' Sequential model over distributed layers. Layers are anything that
//! satisfies `kdist::Layer` (kdist/nn/layer.hpp): the library's Dense, Dropout, Flatten and Conv2D,
//! or the user's own. Variables have Keras paths ("d1/kernel") and are created sharded from the
//! start by the distribution; the loss is the mean over the GLOBAL batch; the optimizer's state is
//! sharded like its variable (and over the data-parallel processes too with
//! GradientSyncOptions::shard_optimizer_state, ZeRO-1). Losses and optimizers are open sets too:
//! anything that satisfies `kdist::LossFunction` (kdist/nn/loss.hpp) or `kdist::Optimizer`
//! (kdist/nn/optimizer.hpp); the model creates each variable's slots from what its optimizer
//! declares (`slots()`). `fit` and `evaluate` run whole epochs over an in-memory
//! `kdist::ArrayDataset`, each process reading only its rows of each global batch; with no
//! distribution given, `compile` takes the current one (`kdist::distribution()`), or data
//! parallelism over every process: write it as for one device. The same seed gives the same losses
//! on every mesh.

#include <unistd.h>
#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <variant>
#include <vector>

#include <Kokkos_Core.hpp>

#include <kdist/nn/apply_gradient.hpp>
#include <kdist/nn/array_dataset.hpp>
#include <kdist/nn/gradient_clipping.hpp>
#include <kdist/nn/gradient_sync.hpp>
#include <kdist/nn/layer.hpp>
#include <kdist/nn/layers/dense.hpp>
#include <kdist/nn/layers/dropout.hpp>
#include <kdist/nn/layers/flatten.hpp>
#include <kdist/nn/loss.hpp>
#include <kdist/nn/optimizer.hpp>
#include <kdist/nn/optimizer_state_shards.hpp>
#include <kdist/nn/progress.hpp>
#include <kdist/nn/sparse_categorical_crossentropy.hpp>
#include <kdist/ops/losses.hpp>
#include <kdist/ops/matmul_precision.hpp>
#include <kdist/parallel/collectives.hpp>
#include <kdist/parallel/initialize.hpp>
#include <kdist/parallel/mesh_binding.hpp>
#include <kdist/parallel/profiling_region.hpp>
#include <kdist/parallel/step_scope.hpp>
#include <kdist/strategy/data_parallel.hpp>
#include <kdist/strategy/data_sharding.hpp>
#include <kdist/strategy/distribution.hpp>
#include <kdist/tensor/reusable_views.hpp>

namespace kdist {

//! What a step, an epoch or an evaluation returns: the global mean loss and, with integer labels,
//! the accuracy; identical on every process.
struct Metrics {
  double loss = 0;
  double accuracy = 0;
  std::size_t examples = 0;
  bool has_accuracy = true;  //!< false for float targets (Keras prints only the loss)
};

//! What `fit` returns: one Metrics per epoch (Keras' History.history).
struct History {
  std::vector<Metrics> epochs;
};

//! Keras' fit arguments: `batch_size` is the GLOBAL batch; `shuffle` reorders the examples each
//! epoch alike on every process (keyed by the model's seed and the epoch); a tf.data pipeline
//! that is batched and not shuffled is `shuffle = false`.
struct FitOptions {
  std::size_t batch_size = 32;
  std::size_t epochs = 1;         //!< the epoch to train up to (Keras: `epochs`)
  std::size_t initial_epoch = 0;  //!< the epoch to start from (Keras: resuming a run)
  bool shuffle = true;
  bool drop_remainder = false;      //!< drop each epoch's partial last batch (Keras keeps it)
  std::size_t steps_per_epoch = 0;  //!< at most this many steps per epoch; 0: all
  int verbose = 1;                  //!< 1: "Epoch i/n" and the progress line on process 0; 0: none
  //! Called on every process after each epoch with the number of epochs completed and the
  //! epoch's metrics (Keras' `on_epoch_end` callback: a checkpoint every N epochs, early stop).
  std::function<void(std::size_t epochs_done, const Metrics& metrics)> on_epoch_end{};
};

struct EvaluateOptions {
  std::size_t batch_size = 32;
  int verbose = 1;
};

//! A variable as `model.variables` lists it in Keras: path, shape, layout.
struct VariableSummary {
  std::string path;
  std::vector<std::size_t> shape;
  RuntimeTensorLayout layout;
};

namespace detail {
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
}  // namespace detail

//! Sequential on scalars `T` (float or double): its layers, inputs, variables and optimizer state
//! are all `T`. A class template so that including model.hpp (or kdist.hpp) costs only parsing:
//! the training machinery is instantiated by the TUs that train (kdist.hpp's compile-time budget).
template <class T>
class BasicSequential {
 public:
  using value_type = T;
  using Dense = layers::BasicDense<T>;
  using Dropout = layers::BasicDropout<T>;
  using Flatten = layers::BasicFlatten<T>;
  using Layer = AnyLayer<T>;
  using Matrix = DistributedTensor<T**>;
  using Labels = Kokkos::View<const std::int32_t*, Kokkos::LayoutRight>;
  //! Any kdist::Optimizer (SGD, Adam, RMSprop or the user's), by value.
  using Optimizer = AnyOptimizer<T>;

  //! Layers applied in order to examples of shape `input_shape` ((784,), or (28, 28, 1) for images).
  BasicSequential(Shape input_shape, std::vector<Layer> layers)
      : input_shape_(std::move(input_shape)), layers_(std::move(layers)) {
    if (input_shape_.size() != 1 && input_shape_.size() != 3) {
      throw ValueError("kdist::Sequential: the input shape " + detail::shape_repr(input_shape_) +
                       " is neither (features,) nor (height, width, channels)");
    }
    if (layers_.empty()) throw ValueError("kdist::Sequential: a model needs at least one layer");
  }
  //! Layers applied to examples of `input_dim` features.
  BasicSequential(std::size_t input_dim, std::vector<Layer> layers)
      : BasicSequential(Shape{input_dim}, std::move(layers)) {}

  //! Creates every variable, sharded as `dist` says, from `seed`. Also fixes the loss (a
  //! kdist::Loss name or any kdist::LossFunction) and the optimizer (any kdist::Optimizer), and
  //! creates each variable's optimizer slots as the optimizer declares them (Keras' compile).
  //! Errors: kdist::ValueError for a null distribution, an optimizer whose declared Keras order
  //! does not name each of its slots once, or a KDIST_MATMUL_PRECISION that is not a precision.
  void compile(std::shared_ptr<const Distribution> dist, AnyLoss<T> loss, Optimizer optimizer,
               std::uint64_t seed) {
    if (!dist) throw ValueError("kdist::Sequential::compile: the distribution is null");
    (void)optimizer.keras_slot_groups();  // a declaration that does not add up fails here
    (void)ops::matmul_precision();  // a bad KDIST_MATMUL_PRECISION fails here, on a CPU run too
    dist_ = std::move(dist);
    loss_ = std::move(loss);
    optimizer_ = std::move(optimizer);
    seed_ = seed;
    Shape shape = input_shape_;
    for (auto& l : layers_) shape = l.build(shape, *dist_, seed_);
    output_shape_ = shape;
    fused_softmax_ = loss_.fuses_softmax() && layers_.back().ends_in_softmax();
    gradient_sync_.configure(gradient_sync_by_program_);
    slots_.clear();
    state_shards_ = plan_state_shards();
    gradient_sync_.set_state_shards(state_shard_registry());
    const OptimizerSlots declared = optimizer_.slots();
    std::size_t k = 0;
    for_each_variable([&](auto& v) {
      std::vector<SlotView> s;
      for (const auto& name : declared.names) {
        const std::string label = v.path + "/" + name;
        if (const auto& shard = state_shards_[k]) {
          s.push_back(typename DistributedTensor<T*>::view_type(label, shard->size()));
        } else {
          s.push_back(make_slot(v.value.local(), label));
        }
      }
      slots_.push_back(std::move(s));
      ++k;
    });
  }
  //! Keras' `model.compile(loss=..., optimizer=...)`: with the current distribution
  //! (`kdist::distribution()`: a scope, else set_distribution's), or when none is set
  //! `kdist::DataParallel()` over every process, which computes what one device would.
  //! The optimizer defaults to RMSprop, as Keras' `compile` does.
  void compile(AnyLoss<T> loss, Optimizer optimizer = RMSprop(), std::uint64_t seed = 0) {
    auto dist = kdist::distribution();
    if (!dist) dist = std::make_shared<DataParallel>();
    compile(std::move(dist), std::move(loss), std::move(optimizer), seed);
  }

  const Distribution& distribution() const { return *dist_; }

  //! How data-parallel gradients are summed (kdist/nn/gradient_sync.hpp): all-reduces that
  //! overlap the backward pass, small gradients in buckets. Replaces the environment's settings
  //! (KDIST_GRADIENT_OVERLAP, KDIST_GRADIENT_BUCKET_KB). Collective once compiled (every process
  //! calls it, with the same options); before compile it takes effect there. Errors:
  //! kdist::ValueError on every process for options that differ between processes or
  //! bucket_bytes over GradientSyncOptions::max_bucket_bytes.
  void set_gradient_sync(const GradientSyncOptions& options) {
    gradient_sync_by_program_ = options;
    if (!dist_) return;
    gradient_sync_.configure(gradient_sync_by_program_);
    reshard_optimizer_state(plan_state_shards());
  }
  //! Whether the optimizer state of the variable at `path` is sharded over the data-parallel
  //! processes (GradientSyncOptions::shard_optimizer_state), and this process's part of its block
  //! then: {first element, element count}; a small variable owned whole by one process is
  //! {0, its size} there and {0, 0} on the others. Errors: kdist::ValueError for a path that is
  //! no variable's.
  std::optional<std::pair<std::size_t, std::size_t>> optimizer_state_part(std::string_view path) {
    require_compiled("optimizer_state_part");
    std::size_t k = 0;
    std::optional<std::size_t> at;  // the variable's index
    for_each_variable([&](auto& v) {
      if (v.path == path) at = k;
      ++k;
    });
    if (!at) {
      throw ValueError("kdist::Sequential::optimizer_state_part: no variable is at '" +
                       std::string(path) + "'");
    }
    const auto& shard = state_shards_.at(*at);
    if (!shard) return std::nullopt;
    return std::pair{shard->begin(), shard->size()};
  }
  //! The gradient sync's options in force (after compile: the program's or the environment's).
  const GradientSyncOptions& gradient_sync() const { return gradient_sync_.options(); }
  //! What the gradient sync started since reset_gradient_sync_counts() (or compile): the
  //! non-blocking all-reduces, the gradients that went through buckets, the bytes.
  const GradientSyncCounts& gradient_sync_counts() const { return gradient_sync_.counts(); }
  void reset_gradient_sync_counts() { gradient_sync_.reset_counts(); }
  //! Completed training steps (Keras' `optimizer.iterations`): with the seed, what dropout masks
  //! depend on.
  std::int64_t iterations() const { return optimizer_.iterations(); }
  //! Sets the step counter (a checkpoint's restore).
  void set_iterations(std::int64_t n) { optimizer_.set_iterations(n); }
  //! Sets the optimizer's learning rate (a Keras weights file's restore).
  void set_learning_rate(double lr) { optimizer_.set_learning_rate(lr); }
  //! The seed of compile: initial weights, dropout masks and fit's shuffles derive from it.
  std::uint64_t seed() const { return seed_; }
  //! The loss of compile.
  const AnyLoss<T>& loss() const { return loss_; }
  //! The optimizer (SGD, Adam, RMSprop or the user's) with its hyperparameters, its declared
  //! slots and its step counter.
  const Optimizer& optimizer() const { return optimizer_; }

  //! Calls f(variable, slots) for every variable, in layer order: `slots` are the optimizer's state
  //! of that variable (as many as `optimizer().slots()` declares, in its order) as distributed
  //! tensors laid out like the variable and sharing the model's blocks (writing into one writes
  //! the model's state).
  //! With the optimizer state sharded (GradientSyncOptions::shard_optimizer_state) the slots are
  //! whole-block copies gathered from the processes' parts, and what f writes into them goes back
  //! into this process's part: then **collective** (every process of the data axis calls it).
  template <class F>
  void for_each_variable_with_slots(F&& f) {
    std::size_t k = 0;
    for_each_variable([&](auto& v) {
      using Tensor = std::decay_t<decltype(v.value)>;
      std::vector<Tensor> slots;
      for (std::size_t i = 0; i < slots_.at(k).size(); ++i) {
        slots.push_back(Tensor::from_local(whole_slot(v.value.local(), k, i), v.value.shape(),
                                           v.value.layout()));
      }
      f(v, slots);
      if (state_shards_[k]) {
        for (std::size_t i = 0; i < slots.size(); ++i) {
          copy_part(flat<T>(slots[i].local()), slot_part(k, i), *state_shards_[k], true);
        }
      }
      ++k;
    });
  }
  const Shape& input_shape() const { return input_shape_; }
  //! The shape of one example's output (after compile).
  const Shape& output_shape() const { return output_shape_; }
  //! The layers, in order (`layers()[i].get_if<kdist::layers::Dense>()` for a typed one).
  std::vector<Layer>& layers() { return layers_; }

  //! Every variable with its Keras path, global shape and layout.
  std::vector<VariableSummary> variables() {
    std::vector<VariableSummary> out;
    for_each_variable([&](auto& v) { out.push_back({v.path, v.shape(), v.value.layout()}); });
    return out;
  }
  //! Calls f(Variable<...>&) for every variable, in layer order (kernel before bias).
  template <class F>
  void for_each_variable(F&& f) {
    for (auto& l : layers_) {
      for (auto& ref : l.variables()) std::visit([&](auto* v) { f(*v); }, ref);
    }
  }

  //! The input layout for a global batch of `global_batch` examples (the distribution's data
  //! layout).
  RuntimeTensorLayout input_layout(std::size_t global_batch) const {
    require_compiled("input_layout");
    return dist_->get_data_layout(global_shape(global_batch));
  }

  //! One training step on this process's rows `x_local` (its block of the global batch under
  //! input_layout: a rank-2 View for (features,) examples, rank-4 for (h, w, c)) and their
  //! targets (integer labels, one per row, or a (rows, outputs) View of T). Returns the global
  //! mean loss (and accuracy with labels), the same on every process.
  template <class XV, class YV>
  Metrics train_step(const XV& x_local, const YV& targets, std::size_t global_batch) {
    require_compiled("train_step");
    detail::ProfilingRegion region("kdist::Sequential::train_step");
    const StepContext context{true, seed_, static_cast<std::uint64_t>(iterations()), false};
    LayerTensor<T> h = forward_layers(x_local, global_batch, context);
    if (const auto* logits = std::get_if<DistributedTensor<T***>>(&h)) {  // a language model
      auto result = sequence_loss(*logits, targets);
      backward_layers(LayerTensor<T>(std::move(result.dlogits)));
      apply_gradients();
      return {result.loss, 0.0, global_batch, false};
    }
    auto [out, output_layout] = rows_of(h);
    // d loss / d output, in the layout the last layer produced
    auto grad = dloss_views_.get("dloss", out.local().extent(0), out.local().extent(1));
    const T scale = T(1) / static_cast<T>(global_batch);
    check_targets(out.local(), targets);
    const auto target = loss_target(targets);
    const double local_sum = loss_sum(out.local(), target, &grad, scale);
    const double correct = count_correct(out.local(), target);
    // The metrics' sum runs under the backward pass and the update (one wait less per step).
    auto metrics = start_metrics(out, local_sum, correct);
    backward_layers(redistribute(Matrix::from_local(grad, out.shape(), out.layout()), output_layout,
                                 dloss_moved_));
    apply_gradients();
    return finish_metrics(metrics, global_batch, is_labels<YV>());
  }

  //! Keras' `model.predict` on this process's rows `x_local` of a global batch of `global_batch`
  //! examples: the last layer's output as it produced it, in its layout (no dropout; a language
  //! model's logits). Collective: every process calls it.
  template <class XV>
  LayerTensor<T> predict_step(const XV& x_local, std::size_t global_batch) {
    require_compiled("predict_step");
    const StepContext context{false, seed_, static_cast<std::uint64_t>(iterations()), false};
    return forward_layers(x_local, global_batch, context);
  }

  //! Loss (and accuracy) of the rows `x_local` (no dropout, no update).
  template <class XV, class YV>
  Metrics evaluate_batch(const XV& x_local, const YV& targets, std::size_t global_batch) {
    require_compiled("evaluate_batch");
    const StepContext context{false, seed_, static_cast<std::uint64_t>(iterations()), false};
    LayerTensor<T> h = forward_layers(x_local, global_batch, context);
    if (const auto* logits = std::get_if<DistributedTensor<T***>>(&h)) {  // a language model
      return {sequence_loss(*logits, targets).loss, 0.0, global_batch, false};
    }
    auto [out, output_layout] = rows_of(h);
    (void)output_layout;
    check_targets(out.local(), targets);
    const auto target = loss_target(targets);
    const double local_sum = loss_sum(out.local(), target, nullptr, T(0));
    const double correct = count_correct(out.local(), target);
    auto metrics = start_metrics(out, local_sum, correct);
    return finish_metrics(metrics, global_batch, is_labels<YV>());
  }

  //! Keras' `model.fit`: `options.epochs` epochs over `data` in global batches of
  //! `options.batch_size`, each process reading its rows (kdist::BatchPlan). Prints Keras'
  //! "Epoch i/n" and progress lines on process 0 when verbose. Returns each epoch's mean metrics.
  //! Errors: ValueError for examples of another shape than the model's input, targets that do not
  //! fit the output, a batch the data shards do not divide; those of train_step.
  History fit(const ArrayDataset<T>& data, const FitOptions& options = {}) {
    require_compiled("fit");
    check_data(data, "fit");
    BatchPlan plan(
        data.size(), options.batch_size, *dist_,
        {.drop_remainder = options.drop_remainder, .shuffle = options.shuffle, .seed = seed_});
    History history;
    const bool print = options.verbose > 0 && process_id() == 0;
    for (std::size_t e = options.initial_epoch; e < options.epochs; ++e) {
      if (print) std::printf("Epoch %zu/%zu\n", e + 1, options.epochs);
      history.epochs.push_back(run_epoch(data, plan, e, options.steps_per_epoch, true, print));
      if (options.on_epoch_end) options.on_epoch_end(e + 1, history.epochs.back());
    }
    return history;
  }

  //! Keras' `model.evaluate`: the mean loss (and accuracy) over every example of `data`, in
  //! global batches of `options.batch_size`, in order, without dropout.
  Metrics evaluate(const ArrayDataset<T>& data, const EvaluateOptions& options = {}) {
    require_compiled("evaluate");
    check_data(data, "evaluate");
    BatchPlan plan(data.size(), options.batch_size, *dist_, {.drop_remainder = false});
    return run_epoch(data, plan, 0, 0, false, options.verbose > 0 && process_id() == 0);
  }

 private:
  using SlotView = std::variant<
      typename DistributedTensor<T*>::view_type, typename DistributedTensor<T**>::view_type,
      typename DistributedTensor<T***>::view_type, typename DistributedTensor<T****>::view_type>;

  template <class YV>
  static constexpr bool is_labels() {
    return static_cast<int>(YV::rank) == 1;
  }

  void require_compiled(const char* what) const {
    if (!dist_) {
      throw ValueError(std::string("kdist::Sequential::") + what +
                       ": the model is not compiled; call model.compile(...) first");
    }
  }

  Shape global_shape(std::size_t global_batch) const {
    Shape s{global_batch};
    s.insert(s.end(), input_shape_.begin(), input_shape_.end());
    return s;
  }

  //! The input as a distributed tensor: this process's rows under the data layout.
  template <class XV>
  LayerTensor<T> input_tensor(const XV& x_local, std::size_t global_batch) const {
    constexpr std::size_t rank = static_cast<std::size_t>(XV::rank);
    static_assert(rank == 2 || rank == 4,
                  "kdist::Sequential: x_local must be a rank-2 (batch, features) or rank-4 "
                  "(batch, height, width, channels) Kokkos::View");
    if (rank != input_shape_.size() + 1) {
      throw ValueError("kdist::Sequential: x_local has rank " + std::to_string(rank) +
                       " but the model takes examples of shape " +
                       detail::shape_repr(input_shape_));
    }
    for (std::size_t d = 1; d < rank; ++d) {
      if (x_local.extent(d) != input_shape_[d - 1]) {
        std::vector<std::size_t> got;
        for (std::size_t k = 1; k < rank; ++k) got.push_back(x_local.extent(k));
        throw ValueError("kdist::Sequential: examples of shape " + detail::shape_repr(got) +
                         " given to a model of input shape " + detail::shape_repr(input_shape_));
      }
    }
    const Shape s = global_shape(global_batch);
    using Tensor = std::conditional_t<rank == 2, Matrix, DistributedTensor<T****>>;
    typename Tensor::view_type local = x_local;
    typename Tensor::shape_type shape{};
    std::copy(s.begin(), s.end(), shape.begin());
    return Tensor::from_local(local, shape, dist_->get_data_layout(s));
  }

  //! Runs every layer on the input; returns the last layer's output as it produced it.
  template <class XV>
  LayerTensor<T> forward_layers(const XV& x_local, std::size_t global_batch, StepContext context) {
    LayerTensor<T> h = input_tensor(x_local, global_batch);
    input_row_offset_ = std::visit([](const auto& t) { return t.offsets()[0]; }, h);
    for (std::size_t i = 0; i < layers_.size(); ++i) {
      context.output_logits = fused_softmax_ && i + 1 == layers_.size();
      h = layers_[i].forward(h, context);
    }
    return h;
  }
  //! Errors: ValueError when a layer that is not the first gives no input gradient (an
  //! Embedding: token ids have none, so it must come first).
  //! The gradient sync is active meanwhile: layers' gradient all-reduces start as they come
  //! and complete in apply_gradients.
  void backward_layers(LayerTensor<T> dh) {
    gradient_sync_.wait_all();  // nothing is left from a step that threw
    const detail::GradientSyncScope scope(gradient_sync_);
    for (std::size_t i = layers_.size(); i-- > 0;) {
      auto dx = layers_[i].backward(dh, i > 0);
      gradient_sync_.progress();
      if (dx) {
        dh = std::move(*dx);
      } else if (i > 0) {
        throw ValueError("kdist::Sequential: layer '" + layers_[i].name() + "' (layer " +
                         std::to_string(i) +
                         ") gives no gradient of its input, so the layers before it cannot "
                         "train; put it first (an Embedding takes token ids, which have none)");
      }
    }
    gradient_sync_.flush();
  }

  //! A language model's loss: (batch, sequence, vocabulary) logits against the integer tokens in
  //! `targets` ((rows of x_local, sequence), any integer or T values), by the vocabulary-parallel
  //! sparse categorical cross-entropy (the logits are never gathered). Each process passes the
  //! targets of its logits block.
  template <class YV>
  SparseCrossEntropyResult<T> sequence_loss(const DistributedTensor<T***>& logits,
                                            const YV& targets) {
    if (loss_.name() != "sparse_categorical_crossentropy") {
      throw ValueError(
          "kdist::Sequential: a model of (batch, sequence, vocabulary) outputs trains "
          "with kdist::Loss::sparse_categorical_crossentropy on its logits (end it "
          "in a Dense without activation), not " +
          loss_.name());
    }
    if constexpr (static_cast<int>(YV::rank) != 2) {
      throw ValueError(
          "kdist::Sequential: a model of (batch, sequence, vocabulary) outputs takes targets of "
          "(batch, sequence) token ids (a rank-2 View, or an ArrayDataset of target width equal "
          "to the sequence length), not one label per example");
    } else {
      return sequence_loss_of(logits, targets);
    }
  }
  template <class YV>
  SparseCrossEntropyResult<T> sequence_loss_of(const DistributedTensor<T***>& logits,
                                               const YV& targets) {
    const auto& block = logits.local();
    const std::size_t seq = logits.shape()[1];
    if (targets.extent(1) != seq) {
      throw ValueError("kdist::Sequential: targets of " + std::to_string(targets.extent(1)) +
                       " tokens per example for outputs of sequence length " + std::to_string(seq) +
                       "; give one target token per position");
    }
    const std::size_t r0 = logits.offsets()[0] - std::min(logits.offsets()[0], input_row_offset_);
    if (logits.offsets()[0] < input_row_offset_ || r0 + block.extent(0) > targets.extent(0)) {
      throw ValueError(
          "kdist::Sequential: the output logits' rows " + std::to_string(logits.offsets()[0]) +
          ".." + std::to_string(logits.offsets()[0] + block.extent(0)) +
          " are not among this process's " + std::to_string(targets.extent(0)) +
          " rows of the batch; lay the last layer's output out with the batch dimension on the "
          "data axes (the input's layout)");
    }
    const std::size_t c0 = logits.offsets()[1];
    const auto picked = picked_views_.get("kdist::lm_targets", block.extent(0), block.extent(1));
    detail::pick_targets(Kokkos::create_mirror_view_and_copy(
                             typename detail::PickedTargets::memory_space(), targets),
                         picked, r0, c0);
    return sparse_categorical_crossentropy(logits, picked, &xent_buffers_);
  }

  //! The output as rows: whole rows on each process (its columns gathered), and the layout the
  //! last layer produced it in.
  std::pair<Matrix, RuntimeTensorLayout> rows_of(const LayerTensor<T>& h) {
    const auto* out = std::get_if<Matrix>(&h);
    if (out == nullptr) {
      throw ValueError(
          "kdist::Sequential: the last layer gives (batch, height, width, channels) "
          "outputs; end the model with a Flatten and a Dense");
    }
    RuntimeTensorLayout produced = out->layout();
    RuntimeTensorLayout rows({produced.axes()[0], DimAxes()}, produced.device_mesh());
    return {produced == rows ? *out : redistribute(*out, rows), produced};
  }

  //! The sum over this process's rows of the per-example loss (and its gradient into *grad).
  template <class OV, class Y>
  double loss_sum(const OV& out, const Y& target, typename Matrix::view_type* grad, T scale) {
    const LossGradient<T> g = grad ? LossGradient<T>(*grad) : LossGradient<T>();
    return loss_.sum(LossInput<T>(out), target, grad ? &g : nullptr, scale, fused_softmax_);
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

  //! One step of every variable: with the optimizer's global_clipnorm, every gradient scaled by
  //! Keras' clip_by_global_norm first (in place: the gradients stay clipped), then the checks of
  //! kdist::apply_gradient and the optimizer's update_step on the blocks of the variable, its
  //! gradient and its declared slots, told the variable's path. The variables go last layer
  //! first, the order their gradients' all-reduces started: each waits only for its own.
  void apply_gradients() {
    if (const auto clipnorm = optimizer_.global_clipnorm()) {
      gradient_sync_.wait_all();  // the norm needs every gradient
      GlobalNorm norm;            // over every shard of every gradient, replicas counted once
      std::size_t k = 0;
      for_each_variable([&](auto& v) {
        if (const auto& shard = state_shards_[k++]) {  // only its part is summed
          norm.add_part(v.grad, shard->begin(), shard->size(), shard->mesh_axes);
        } else {
          norm.add(v.grad);
        }
      });
      const double scale = global_clip_scale(norm.norm(), *clipnorm);
      if (scale != 1.0) for_each_variable([&](auto& v) { detail::scale_block(v.grad, scale); });
    }
    std::size_t k = slots_.size();
    std::vector<OptimizerView<T>>& slots = slot_views_;
    for (std::size_t l = layers_.size(); l-- > 0;) {
      auto refs = layers_[l].variables();
      for (std::size_t r = refs.size(); r-- > 0;) {
        std::visit(
            [&](auto* v) {
              --k;
              gradient_sync_.wait_for(v->grad.local().data());
              detail::check_gradient_for(v->value, v->grad);
              slots.clear();
              for (const auto& s : slots_[k]) {
                slots.push_back(std::visit([](const auto& view) { return flat<T>(view); }, s));
              }
              auto param = flat<T>(v->value.local());
              auto grad = flat<const T>(v->grad.local());
              const auto& shard = state_shards_[k];
              if (shard) {  // this process's part only; the parts are gathered below
                param = OptimizerView<T>(param.data() + shard->begin(), shard->size());
                grad = OptimizerView<const T>(grad.data() + shard->begin(), shard->size());
              }
              optimizer_.update_step(param, grad, std::span<const OptimizerView<T>>(slots),
                                     v->path);
              if (shard && shard->owned_whole) {
                gradient_sync_.gather_owned(v->value.local().data(), *shard);
              } else if (shard) {
                gradient_sync_.all_gather_parts(v->value.local().data(), *shard);
              }
              gradient_sync_.progress();  // answer the other processes' all-reduce messages
            },
            refs[r]);
      }
    }
    gradient_sync_.start_owned_gathers();
    gradient_sync_.wait_all();
    optimizer_.finish_step();
  }
  //! Which variables' optimizer state is sharded, and how (GradientSyncOptions::
  //! shard_optimizer_state): those replicated over the batch axis, in host memory; split in parts
  //! when of at least bucket_bytes (or bucket_bytes is 0), else owned whole by one process, the
  //! owners balancing the bytes among the processes of each communicator (their gradients share
  //! buckets; optimizer_state_shards.hpp). Errors: kdist::ValueError for the setting on device
  //! memory.
  std::vector<std::optional<detail::StateShard>> plan_state_shards() {
    std::vector<std::optional<detail::StateShard>> out;
    const GradientSyncOptions& o = gradient_sync_.options();
    const auto& batch = dist_->batch_dim_name();
    struct Small {  // a variable to be owned whole
      std::size_t k;
      std::size_t elements;
      MPI_Comm comm;
      std::size_t axis;
    };
    std::vector<Small> small;
    for_each_variable([&](auto& v) {
      std::optional<detail::StateShard> shard;
      const RuntimeDeviceMesh& mesh = v.value.device_mesh();
      const auto axis = batch ? mesh.find_axis(*batch) : std::nullopt;
      const auto copies_along = v.value.layout().replicated_mesh_axes();
      const std::size_t n = v.value.local().size();
      if (o.shard_optimizer_state && axis && mesh.shape()[*axis] > 1 &&
          std::find(copies_along.begin(), copies_along.end(), *axis) != copies_along.end()) {
        using Memory = typename std::decay_t<decltype(v.value)>::view_type::memory_space;
        if constexpr (Kokkos::SpaceAccessibility<Kokkos::HostSpace, Memory>::accessible) {
          const MPI_Comm comm = communicators(mesh).comm(*batch).get();
          if (o.bucket_bytes == 0 || n * sizeof(T) >= o.bucket_bytes) {
            shard = detail::make_state_shard(n, sizeof(T), comm, {*axis});
          } else {
            small.push_back({out.size(), n, comm, *axis});
          }
        } else {
          throw ValueError(
              "kdist::GradientSyncOptions::shard_optimizer_state (KDIST_SHARD_OPTIMIZER_STATE) "
              "is not available for variables in device memory yet (" +
              v.path + "); turn it off");
        }
      }
      out.push_back(std::move(shard));
    });
    // The owners of the small ones, per communicator: the same sizes in the same order on each
    // of its processes (they hold the same blocks), so the same owners.
    std::vector<bool> done(small.size(), false);
    for (std::size_t i = 0; i < small.size(); ++i) {
      if (done[i]) continue;
      std::vector<std::size_t> members, bytes;
      for (std::size_t j = i; j < small.size(); ++j) {
        if (small[j].comm != small[i].comm) continue;
        members.push_back(j);
        bytes.push_back(small[j].elements * sizeof(T));
        done[j] = true;
      }
      const int processes = mpi::Communicator::borrow(small[i].comm).size();
      const std::vector<int> owners = detail::assign_owners(bytes, processes);
      for (std::size_t m = 0; m < members.size(); ++m) {
        const Small& s = small[members[m]];
        out[s.k] = detail::make_owned_state_shard(s.elements, owners[m], s.comm, {s.axis});
      }
    }
    return out;
  }
  //! The gradient sync's copy of the shards, keyed by each gradient block's address.
  std::vector<std::pair<const void*, detail::StateShard>> state_shard_registry() {
    std::vector<std::pair<const void*, detail::StateShard>> out;
    std::size_t k = 0;
    for_each_variable([&](auto& v) {
      if (const auto& shard = state_shards_[k]) out.emplace_back(v.grad.local().data(), *shard);
      ++k;
    });
    return out;
  }
  //! Slot `i` of variable `k` when its state is sharded: its part.
  OptimizerView<T> slot_part(std::size_t k, std::size_t i) {
    return std::visit([](const auto& view) { return flat<T>(view); }, slots_[k][i]);
  }
  //! Copies the part `shard` says between a whole block and a part: into the part (to_part), or
  //! out of it into its place in the block.
  static void copy_part(const OptimizerView<T>& block, const OptimizerView<T>& part,
                        const detail::StateShard& shard, bool to_part) {
    const auto range = std::pair{shard.begin(), shard.begin() + shard.size()};
    if (to_part) {
      Kokkos::deep_copy(part, Kokkos::subview(block, range));
    } else {
      Kokkos::deep_copy(Kokkos::subview(block, range), part);
    }
  }
  //! Slot `i` of variable `k` (block `local`) as a whole block: the slot itself, or when its
  //! state is sharded a new block gathered from every process's part (collective).
  template <class View>
  View whole_slot(const View& local, std::size_t k, std::size_t i) {
    const auto& shard = state_shards_[k];
    if (!shard) return std::get<View>(slots_[k][i]);
    View whole = make_slot(local, std::string(local.label()) + "/slot");
    copy_part(flat<T>(whole), slot_part(k, i), *shard, false);
    detail::start_all_gather_parts(whole.data(), *shard).wait();
    return whole;
  }
  //! Changes which variables' optimizer state is sharded (set_gradient_sync after compile),
  //! keeping its values. Collective.
  void reshard_optimizer_state(std::vector<std::optional<detail::StateShard>> next) {
    std::size_t k = 0;
    for_each_variable([&](auto& v) {
      const auto& now = state_shards_[k];
      const auto& then = next[k];
      const bool same =
          (!now && !then) || (now && then && now->counts == then->counts &&
                              now->comm == then->comm && now->owned_whole == then->owned_whole);
      if (!same) {
        using View = typename std::decay_t<decltype(v.value)>::view_type;
        for (std::size_t i = 0; i < slots_[k].size(); ++i) {
          View whole = whole_slot(v.value.local(), k, i);
          if (then) {
            typename DistributedTensor<T*>::view_type part(std::string(whole.label()),
                                                           then->size());
            copy_part(flat<T>(whole), flat<T>(part), *then, true);
            slots_[k][i] = part;
          } else {
            slots_[k][i] = whole;
          }
        }
      }
      ++k;
    });
    state_shards_ = std::move(next);
    gradient_sync_.set_state_shards(state_shard_registry());
  }

  //! A contiguous block's elements as the optimizer sees them.
  template <class S, class View>
  static OptimizerView<S> flat(const View& view) {
    return OptimizerView<S>(view.data(), view.size());
  }

  //! The step's loss sum and correct count, summed over the processes holding distinct rows (the
  //! batch axes) so that model replicas count once: started by start_metrics, read by
  //! finish_metrics.
  struct PendingMetrics {
    CollectiveRequest request;
  };
  PendingMetrics start_metrics(const Matrix& out, double local_sum, double correct) {
    metrics_sums_[0] = local_sum;
    metrics_sums_[1] = correct;
    PendingMetrics pending;
    const auto& row_axes = out.layout().axes()[0].names();
    if (!row_axes.empty()) {
      const auto& comm =
          communicators(out.device_mesh()).comm(std::span<const std::string>(row_axes));
      const Kokkos::View<double*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>> sums(
          metrics_sums_, 2);
      pending.request =
          start_all_reduce(Kokkos::DefaultHostExecutionSpace(), sums, ReduceOp::sum, comm);
    }
    return pending;
  }
  Metrics finish_metrics(PendingMetrics& pending, std::size_t global_batch, bool has_accuracy) {
    pending.request.wait();
    const double n = static_cast<double>(global_batch);
    return {metrics_sums_[0] / n, has_accuracy ? metrics_sums_[1] / n : 0.0, global_batch,
            has_accuracy};
  }

  void check_data(const ArrayDataset<T>& data, const char* what) const {
    if (data.example_shape() != input_shape_) {
      throw ValueError(std::string("kdist::Sequential::") + what + ": examples of shape " +
                       detail::shape_repr(data.example_shape()) +
                       " given to a model of input shape " + detail::shape_repr(input_shape_));
    }
    const std::size_t outputs = output_shape_.at(0);
    if (!data.has_labels() && data.target_width() != outputs) {
      throw ValueError(std::string("kdist::Sequential::") + what + ": targets of " +
                       std::to_string(data.target_width()) + " values per example for a model of " +
                       std::to_string(outputs) + " outputs");
    }
  }

  //! One epoch of `data` (training when `train`); returns the epoch's mean metrics.
  Metrics run_epoch(const ArrayDataset<T>& data, const BatchPlan& plan, std::size_t epoch,
                    std::size_t max_steps, bool train, bool print) {
    if (input_shape_.size() == 1)
      return run_epoch_of_rank<2>(data, plan, epoch, max_steps, train, print);
    return run_epoch_of_rank<4>(data, plan, epoch, max_steps, train, print);
  }
  template <std::size_t R>
  Metrics run_epoch_of_rank(const ArrayDataset<T>& data, const BatchPlan& plan, std::size_t epoch,
                            std::size_t max_steps, bool train, bool print) {
    const auto order = plan.order(epoch);
    std::size_t steps = plan.steps_per_epoch();
    if (max_steps && max_steps < steps) steps = max_steps;
    const bool tty = print && isatty(STDOUT_FILENO);
    double loss_sum = 0, correct = 0;
    std::size_t seen = 0;
    const auto t0 = std::chrono::steady_clock::now();
    auto last = t0;
    detail::BatchLoader<T, R> loader(data, steps ? plan.local_indices(order, 0).size() : 0);
    Metrics m;
    for (std::size_t s = 0; s < steps; ++s) {
      const StepScope step_scope(train ? "fit" : "evaluate", epoch, s);  // the watchdog's messages
      const auto idx = plan.local_indices(order, s);
      const std::size_t global = plan.global_batch_size_at(s);
      const auto x = loader.load_examples(idx);
      if (data.has_labels()) {
        const auto y = loader.load_labels(idx);
        m = train ? train_step(x, y, global) : evaluate_batch(x, y, global);
      } else {
        const auto y = loader.load_targets(idx);
        m = train ? train_step(x, y, global) : evaluate_batch(x, y, global);
      }
      loss_sum += m.loss * static_cast<double>(global);
      correct += m.accuracy * static_cast<double>(global);
      seen += global;
      const auto now = std::chrono::steady_clock::now();
      if (tty && (now - last > std::chrono::milliseconds(100) || s + 1 == steps)) {
        last = now;
        std::printf("\r%s",
                    progress_line(s + 1, steps, std::chrono::duration<double>(now - t0).count(),
                                  loss_sum / double(seen), accuracy_of(m, correct, seen))
                        .c_str());
        std::fflush(stdout);
      }
    }
    const double secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double n = seen ? double(seen) : 1.0;
    Metrics out{loss_sum / n, data.has_labels() ? correct / n : 0.0, seen, data.has_labels()};
    if (print) {
      std::printf(
          "%s%s\n", tty ? "\r" : "",
          progress_line(steps, steps, secs, out.loss, accuracy_of(out, correct, seen)).c_str());
      std::fflush(stdout);
    }
    return out;
  }
  static std::optional<double> accuracy_of(const Metrics& m, double correct, std::size_t seen) {
    if (!m.has_accuracy || seen == 0) return std::nullopt;
    return correct / double(seen);
  }

  Shape input_shape_;
  Shape output_shape_;
  std::vector<Layer> layers_;
  std::shared_ptr<const Distribution> dist_;
  AnyLoss<T> loss_ = Loss::categorical_crossentropy;
  Optimizer optimizer_ = Adam();
  std::uint64_t seed_ = 0;
  bool fused_softmax_ = false;
  //! The global row of this process's first input row in the last forward pass.
  std::size_t input_row_offset_ = 0;
  //! Optimizer state of each variable (the slots its optimizer declares), shaped like its shard,
  //! or rank-1 Views of its part where state_shards_ has one.
  std::vector<std::vector<SlotView>> slots_;
  //! Each variable's part when its optimizer state is sharded (ZeRO-1), in variable order.
  std::vector<std::optional<detail::StateShard>> state_shards_;
  //! apply_gradients' views of one variable's slots (kept: no allocation per step).
  std::vector<OptimizerView<T>> slot_views_;
  //! The data-parallel gradient all-reduces of a step (gradient_sync.hpp) and their settings.
  detail::GradientSync gradient_sync_;
  std::optional<GradientSyncOptions> gradient_sync_by_program_;
  //! The metrics' sums of the step under way (start_metrics), read when their all-reduce is done.
  double metrics_sums_[2] = {0, 0};
  // A step's own buffers, kept for the next steps (kdist::ReusableViews: no allocation per step).
  ReusableViews<typename Matrix::view_type> dloss_views_, dloss_moved_;
  ReusableViews<detail::PickedTargets> picked_views_;
  SparseCrossEntropyBuffers<T> xent_buffers_;
};

//! Keras' Sequential on float32, the default dtype.
using Sequential = BasicSequential<float>;

}  // namespace kdist
