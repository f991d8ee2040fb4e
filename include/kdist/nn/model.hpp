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
//!
//! This is the Keras facade: the step itself - forward, loss, backward with the gradients' sums,
//! clipping, the optimizer and its (ZeRO-1) state, metrics - is kdist/nn/train/train_step.hpp,
//! and the epoch loop kdist/nn/train/epoch_loop.hpp.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include <Kokkos_Core.hpp>

#include <kdist/nn/array_dataset.hpp>
#include <kdist/nn/explicit_instantiation.hpp>
#include <kdist/nn/layer.hpp>
#include <kdist/nn/layers/dense.hpp>
#include <kdist/nn/layers/dropout.hpp>
#include <kdist/nn/layers/flatten.hpp>
#include <kdist/nn/loss.hpp>
#include <kdist/nn/optimizer.hpp>
#include <kdist/nn/train/epoch_loop.hpp>
#include <kdist/nn/train/gradient_sync.hpp>
#include <kdist/nn/train/metrics.hpp>
#include <kdist/nn/train/step_graph.hpp>
#include <kdist/nn/train/train_step.hpp>
#include <kdist/ops/matmul_precision.hpp>
#include <kdist/parallel/initialize.hpp>
#include <kdist/strategy/data_parallel.hpp>
#include <kdist/strategy/data_sharding.hpp>
#include <kdist/strategy/distribution.hpp>

namespace kdist {

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

//! What Keras' `model.compile` takes besides the distribution, the loss, the optimizer and the
//! seed.
struct CompileOptions {
  //! Keras' steps_per_execution (kdist::Sequential::set_steps_per_execution).
  std::size_t steps_per_execution = 1;
  //! The training step recorded once as a device graph and replayed as one launch per step
  //! (kdist::Sequential::set_device_graph); std::nullopt: `KDIST_DEVICE_GRAPH` decides (unset:
  //! off).
  std::optional<bool> device_graph;
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
    if (input_shape_.size() != 1 && input_shape_.size() != 3 && input_shape_.size() != 4) {
      throw ValueError("kdist::Sequential: the input shape " + detail::shape_repr(input_shape_) +
                       " is none of (features,), (height, width, channels) and (depth, height, "
                       "width, channels)");
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
    compile(std::move(dist), std::move(loss), std::move(optimizer), seed, CompileOptions{});
  }
  //! The same with Keras' other compile arguments. Errors: as above, and kdist::ValueError for
  //! steps_per_execution 0 or a bad KDIST_DEVICE_GRAPH.
  void compile(std::shared_ptr<const Distribution> dist, AnyLoss<T> loss, Optimizer optimizer,
               std::uint64_t seed, const CompileOptions& options);
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
  //! Whether compile() was called (the variables, loss and optimizer exist).
  bool compiled() const noexcept { return dist_ != nullptr; }

  //! Keras' `compile(steps_per_execution=n)`: fit reads the metrics after every n steps (and at
  //! the end of each epoch), and in between they stay on the device - the library's losses on
  //! (batch, outputs) rows add them up there, so a step neither waits for the device nor all-reduces
  //! its loss; the progress line moves every n steps. 1 (the default, as Keras): every step.
  //! Errors: kdist::ValueError for 0.
  //! The training step recorded once as a device graph and replayed as one launch per step
  //! (kdist::detail::StepGraph; Keras' closest is `jit_compile`): after two launched steps of the
  //! same shapes and an audited third, the fourth is recorded, and each later step is one graph
  //! launch; its metrics stay on the device (read after every steps_per_execution steps). A step
  //! that cannot be captured runs launched, and device_graph() says why. On the CPU backends the
  //! same code runs launched.
  void set_device_graph(bool on) { step_.request_device_graph(on); }
  DeviceGraphStatus device_graph() const { return step_.device_graph(); }

  void set_steps_per_execution(std::size_t n) {
    if (n == 0) {
      throw ValueError(
          "kdist::Sequential::set_steps_per_execution: 0 steps; give at least 1 (1: the metrics "
          "are read after every step, as Keras' default)");
    }
    steps_per_execution_ = n;
  }
  std::size_t steps_per_execution() const { return steps_per_execution_; }

  //! How data-parallel gradients are summed (kdist/nn/train/gradient_sync.hpp): all-reduces that
  //! overlap the backward pass, small gradients in buckets. Replaces the environment's settings
  //! (KDIST_GRADIENT_OVERLAP, KDIST_GRADIENT_BUCKET_KB). Collective once compiled (every process
  //! calls it, with the same options); before compile it takes effect there. Errors:
  //! kdist::ValueError on every process for options that differ between processes or
  //! bucket_bytes over GradientSyncOptions::max_bucket_bytes.
  void set_gradient_sync(const GradientSyncOptions& options);
  //! Whether the optimizer state of the variable at `path` is sharded over the data-parallel
  //! processes (GradientSyncOptions::shard_optimizer_state), and this process's part of its block
  //! then: {first element, element count}; a small variable owned whole by one process is
  //! {0, its size} there and {0, 0} on the others. Errors: kdist::ValueError for a path that is
  //! no variable's.
  std::optional<std::pair<std::size_t, std::size_t>> optimizer_state_part(std::string_view path);
  //! The gradient sync's options in force (after compile: the program's or the environment's).
  const GradientSyncOptions& gradient_sync() const { return step_.gradient_sync(); }
  //! What the gradient sync started since reset_gradient_sync_counts() (or compile): the
  //! non-blocking all-reduces, the gradients that went through buckets, the bytes.
  const GradientSyncCounts& gradient_sync_counts() const { return step_.gradient_sync_counts(); }
  void reset_gradient_sync_counts() { step_.reset_gradient_sync_counts(); }
  //! Completed training steps (Keras' `optimizer.iterations`): with the seed, what dropout masks
  //! depend on.
  std::int64_t iterations() const { return step_.optimizer().iterations(); }
  //! Sets the step counter (a checkpoint's restore).
  void set_iterations(std::int64_t n) { step_.optimizer().set_iterations(n); }
  //! Sets the optimizer's learning rate (a Keras weights file's restore).
  void set_learning_rate(double lr) { step_.optimizer().set_learning_rate(lr); }
  //! The seed of compile: initial weights, dropout masks and fit's shuffles derive from it.
  std::uint64_t seed() const { return seed_; }
  //! The loss of compile.
  const AnyLoss<T>& loss() const { return step_.loss(); }
  //! The optimizer (SGD, Adam, RMSprop or the user's) with its hyperparameters, its declared
  //! slots and its step counter.
  const Optimizer& optimizer() const { return step_.optimizer(); }
  //! The model's kdist::LossScaleOptimizer, to read or restore its scale; nullptr for others.
  LossScaleOptimizer<T>* loss_scaling() { return step_.optimizer().loss_scaling(); }

  //! Calls f(variable, slots) for every variable, in layer order: `slots` are the optimizer's state
  //! of that variable (as many as `optimizer().slots()` declares, in its order) as distributed
  //! tensors laid out like the variable and sharing the model's blocks (writing into one writes
  //! the model's state).
  //! With the optimizer state sharded (GradientSyncOptions::shard_optimizer_state) the slots are
  //! whole-block copies gathered from the processes' parts, and what f writes into them goes back
  //! into this process's part: then **collective** (every process of the data axis calls it).
  template <class F>
  void for_each_variable_with_slots(F&& f) {
    step_.optimizer_state().for_each_variable_with_slots(layers_, std::forward<F>(f));
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
    kdist::for_each_variable(layers_, std::forward<F>(f));
  }

  //! The input layout for a global batch of `global_batch` examples (the distribution's data
  //! layout).
  RuntimeTensorLayout input_layout(std::size_t global_batch) const {
    require_compiled("input_layout");
    return dist_->get_data_layout(global_shape(global_batch));
  }

  //! One training step on this process's rows `x_local` (its block of the global batch under
  //! input_layout: a rank-2 View for (features,) examples, rank-4 for (h, w, c), rank-5 for (d, h,
  //! w, c)) and their
  //! targets (integer labels, one per row, or a (rows, outputs) View of T). Returns the global
  //! mean loss (and accuracy with labels), the same on every process. Views of another memory
  //! space than the model's (host rows of a model on a GPU) or layout are copied into its memory
  //! first, on each call; LayoutRight Views of its memory are used as they are.
  template <class XV, class YV>
  Metrics train_step(const XV& x_local, const YV& targets, std::size_t global_batch) {
    require_compiled("train_step");
    const StepContext context{true, seed_, static_cast<std::uint64_t>(iterations()), false};
    step_.reset_metric_totals();
    const auto m = step_.train(layers_, input_tensor(x_local, global_batch),
                               detail::step_targets(targets), global_batch, context);
    if (m) return *m;
    const auto t = step_.take_metric_totals();  // a step that kept its metrics on the device
    const double n = t.examples ? static_cast<double>(t.examples) : 1.0;
    return {t.loss / n, t.has_accuracy ? t.correct / n : 0.0, t.examples, t.has_accuracy};
  }

  //! One training step on a distributed input `x` in any layout of the model's mesh - a field in
  //! the blocks a simulation holds it in (kdist::from_local_blocks), never gathered - and this
  //! process's targets: for a model that gives fields, its block of the target field as the output
  //! is laid out (a View of the output's rank), or whole rows as train_step(x_local, ...) takes
  //! them. The global batch is x's first extent. Collective.
  template <class DataType, class YV>
  Metrics train_step(const DistributedTensor<DataType>& x, const YV& targets) {
    require_compiled("train_step");
    const StepContext context{true, seed_, static_cast<std::uint64_t>(iterations()), false};
    step_.reset_metric_totals();
    const auto m = step_.train(layers_, checked_input(x), detail::step_targets(targets),
                               x.shape()[0], context);
    if (m) return *m;
    const auto t = step_.take_metric_totals();
    const double n = t.examples ? static_cast<double>(t.examples) : 1.0;
    return {t.loss / n, t.has_accuracy ? t.correct / n : 0.0, t.examples, t.has_accuracy};
  }
  //! The loss of a distributed input `x` against this process's targets (as train_step(x, ...)
  //! takes them), without dropout or update. Collective.
  template <class DataType, class YV>
  Metrics evaluate_batch(const DistributedTensor<DataType>& x, const YV& targets) {
    require_compiled("evaluate_batch");
    const StepContext context{false, seed_, static_cast<std::uint64_t>(iterations()), false};
    return step_.evaluate(layers_, checked_input(x), detail::step_targets(targets), x.shape()[0],
                          context);
  }
  //! The last layer's output for a distributed input `x`, in the layout it was computed in.
  template <class DataType>
  LayerTensor<T> predict_step(const DistributedTensor<DataType>& x) {
    require_compiled("predict_step");
    const StepContext context{false, seed_, static_cast<std::uint64_t>(iterations()), false};
    return step_.forward(layers_, checked_input(x), context);
  }

  //! Keras' `model.predict` on this process's rows `x_local` of a global batch of `global_batch`
  //! examples: the last layer's output as it produced it, in its layout (no dropout; a language
  //! model's logits). Collective: every process calls it.
  template <class XV>
  LayerTensor<T> predict_step(const XV& x_local, std::size_t global_batch) {
    require_compiled("predict_step");
    const StepContext context{false, seed_, static_cast<std::uint64_t>(iterations()), false};
    return step_.forward(layers_, input_tensor(x_local, global_batch), context);
  }

  //! Whether predict_step gives the logits of the last layer's softmax rather than its
  //! probabilities (Keras' predict): a final softmax that a cross-entropy loss takes fused, which
  //! kdist::ops::softmax turns into Keras' output.
  bool predicts_logits() const {
    require_compiled("predicts_logits");
    return loss().fuses_softmax() && layers_.back().ends_in_softmax();
  }

  //! Loss (and accuracy) of the rows `x_local` (no dropout, no update).
  template <class XV, class YV>
  Metrics evaluate_batch(const XV& x_local, const YV& targets, std::size_t global_batch) {
    require_compiled("evaluate_batch");
    const StepContext context{false, seed_, static_cast<std::uint64_t>(iterations()), false};
    return step_.evaluate(layers_, input_tensor(x_local, global_batch),
                          detail::step_targets(targets), global_batch, context);
  }

  //! Keras' `model.fit`: `options.epochs` epochs over `data` in global batches of
  //! `options.batch_size`, each process reading its rows (kdist::BatchPlan). Prints Keras'
  //! "Epoch i/n" and progress lines on process 0 when verbose. Returns each epoch's mean metrics.
  //! Errors: ValueError for examples of another shape than the model's input, targets that do not
  //! fit the output, a batch the data shards do not divide; those of train_step.
  History fit(const ArrayDataset<T>& data, const FitOptions& options = {});

  //! Keras' `model.evaluate`: the mean loss (and accuracy) over every example of `data`, in
  //! global batches of `options.batch_size`, in order, without dropout.
  Metrics evaluate(const ArrayDataset<T>& data, const EvaluateOptions& options = {});

 private:
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

  //! `x` as the first layer's input, its example shape checked against the model's.
  template <class DataType>
  LayerTensor<T> checked_input(const DistributedTensor<DataType>& x) const {
    using Tensor = DistributedTensor<DataType>;
    static_assert(std::is_constructible_v<LayerTensor<T>, Tensor>,
                  "kdist::Sequential: the input is a DistributedTensor of the model's scalars, of "
                  "rank 2 to 5");
    const Shape example(x.shape().begin() + 1, x.shape().end());
    if (example != input_shape_) {
      throw ValueError("kdist::Sequential: an input of shape " + detail::shape_repr(x.shape()) +
                       " given to a model of input shape " + detail::shape_repr(input_shape_));
    }
    return LayerTensor<T>(x);
  }

  //! The input as a distributed tensor: this process's rows under the data layout.
  template <class XV>
  LayerTensor<T> input_tensor(const XV& x_local, std::size_t global_batch) const {
    constexpr std::size_t rank = static_cast<std::size_t>(XV::rank);
    static_assert(rank == 2 || rank == 4 || rank == 5,
                  "kdist::Sequential: x_local must be a rank-2 (batch, features), rank-4 (batch, "
                  "height, width, channels) or rank-5 (batch, depth, height, width, channels) "
                  "Kokkos::View");
    static_assert(std::is_same_v<typename XV::non_const_value_type, T>,
                  "kdist::Sequential: x_local's values must be of the model's scalar type");
    using Local =
        typename DistributedTensor<typename detail::dynamic_data_type<T, rank>::type>::view_type;
    if constexpr (std::is_same_v<typename XV::memory_space, typename Local::memory_space> &&
                  !std::is_same_v<typename XV::array_layout, Kokkos::LayoutLeft>) {
      return rows_tensor(x_local, global_batch);  // the rows themselves (a strided View if dense)
    } else {
      // rows in another memory space (host rows of a model on a GPU) or column-major: copied into
      // the model's memory once per call (a loader that fills device Views saves the copy)
      const auto there =
          Kokkos::create_mirror_view_and_copy(typename Local::memory_space(), x_local);
      if constexpr (Kokkos::is_always_assignable<Local, std::decay_t<decltype(there)>>::value) {
        return rows_tensor(Local(there), global_batch);  // row-major already: one copy
      } else {
        Kokkos::LayoutRight extents;
        for (std::size_t d = 0; d < rank; ++d) extents.dimension[d] = there.extent(d);
        Local rows(Kokkos::view_alloc(Kokkos::WithoutInitializing, "kdist::inputs"), extents);
        Kokkos::deep_copy(rows, there);
        return rows_tensor(rows, global_batch);
      }
    }
  }

  //! input_tensor of rows in the model's memory, row-major.
  template <class XV>
  LayerTensor<T> rows_tensor(const XV& x_local, std::size_t global_batch) const {
    constexpr std::size_t rank = static_cast<std::size_t>(XV::rank);
    if constexpr (rank == 4) {
      // Volumes as fit loads them: (batch, depth * height, width, channels), the same memory
      // (one epoch loop for images and volumes: kdist::detail::BatchLoader).
      if (input_shape_.size() == 4 && x_local.extent(1) == input_shape_[0] * input_shape_[1] &&
          x_local.extent(2) == input_shape_[2] && x_local.extent(3) == input_shape_[3]) {
        if (!x_local.span_is_contiguous()) {
          throw ValueError("kdist::Sequential: a batch of volumes must be contiguous");
        }
        const Shape s = global_shape(global_batch);
        using Volumes = DistributedTensor<T*****>;
        const typename Volumes::view_type local(x_local.data(), x_local.extent(0), input_shape_[0],
                                                input_shape_[1], input_shape_[2], input_shape_[3]);
        return Volumes::from_local(local, {s[0], s[1], s[2], s[3], s[4]},
                                   dist_->get_data_layout(s));
      }
    }
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
    using Tensor = DistributedTensor<typename detail::dynamic_data_type<T, rank>::type>;
    typename Tensor::view_type local = x_local;
    typename Tensor::shape_type shape{};
    std::copy(s.begin(), s.end(), shape.begin());
    return Tensor::from_local(local, shape, dist_->get_data_layout(s));
  }

  void check_data(const ArrayDataset<T>& data, const char* what) const {
    if (data.example_shape() != input_shape_) {
      throw ValueError(std::string("kdist::Sequential::") + what + ": examples of shape " +
                       detail::shape_repr(data.example_shape()) +
                       " given to a model of input shape " + detail::shape_repr(input_shape_));
    }
    // (batch, outputs) rows, a language model's token ids (one per position), or a field's values
    // (height * width * channels, or with depth)
    std::size_t outputs = output_shape_.at(0);
    if (output_shape_.size() >= 3) {
      for (std::size_t d = 1; d < output_shape_.size(); ++d) outputs *= output_shape_[d];
    }
    if (!data.has_labels() && data.target_width() != outputs) {
      throw ValueError(std::string("kdist::Sequential::") + what + ": targets of " +
                       std::to_string(data.target_width()) + " values per example for a model of " +
                       std::to_string(outputs) + " outputs");
    }
  }

  //! One epoch of `data` (training when `train`); returns the epoch's mean metrics.
  //! A loader of `data` for the batches of `plan` (examples of rank R - 1).
  template <std::size_t R>
  static detail::BatchLoader<T, R> loader_for(const ArrayDataset<T>& data, const BatchPlan& plan,
                                              std::size_t epoch) {
    const std::size_t rows =
        plan.steps_per_epoch() ? plan.local_indices(plan.order(epoch), 0).size() : 0;
    return detail::BatchLoader<T, R>(data, rows);
  }

  //! fit's epochs, with one loader for all of them: its buffers keep their addresses, so a step
  //! recorded as a device graph replays from one epoch to the next.
  template <std::size_t R>
  History fit_epochs(const ArrayDataset<T>& data, const BatchPlan& plan,
                     const FitOptions& options) {
    History history;
    const bool print = options.verbose > 0 && process_id() == 0;
    auto loader = loader_for<R>(data, plan, options.initial_epoch);
    for (std::size_t e = options.initial_epoch; e < options.epochs; ++e) {
      if (print) std::printf("Epoch %zu/%zu\n", e + 1, options.epochs);
      history.epochs.push_back(
          run_epoch(loader, data, plan, e, options.steps_per_epoch, true, print));
      if (options.on_epoch_end) options.on_epoch_end(e + 1, history.epochs.back());
    }
    return history;
  }

  //! One epoch of fit (`train`) or evaluate. Training with steps_per_execution > 1 (or as a device
  //! graph) keeps the metrics on the device between its reads.
  template <std::size_t R>
  Metrics run_epoch(detail::BatchLoader<T, R>& loader, const ArrayDataset<T>& data,
                    const BatchPlan& plan, std::size_t epoch, std::size_t max_steps, bool train,
                    bool print) {
    const bool on_device = train && steps_per_execution_ > 1;
    const auto step = [&](const auto& x, const auto& y, std::size_t global) {
      if (train) {
        const StepContext context{true, seed_, static_cast<std::uint64_t>(iterations()), false};
        step_.train(layers_, input_tensor(x, global), detail::step_targets(y), global, context,
                    on_device);
      } else {
        evaluate_batch(x, y, global);
      }
    };
    const auto read = [&] { return step_.take_metric_totals(); };
    step_.reset_metric_totals();
    const std::size_t every = train ? steps_per_execution_ : 1;
    return detail::run_epoch<R>(loader, data, plan, epoch, max_steps, train, print, every, step,
                                read);
  }

  Shape input_shape_;
  Shape output_shape_;
  std::vector<Layer> layers_;
  std::shared_ptr<const Distribution> dist_;
  std::uint64_t seed_ = 0;
  std::size_t steps_per_execution_ = 1;  //!< set_steps_per_execution
  //! The training step: the loss, the optimizer and its state, the gradient sync.
  detail::TrainStep<T> step_;
};

// The members that build or run the training machinery are defined here, outside the class: not
// inline, so a translation unit that declares BasicSequential<float> extern (KDIST_EXTERN_TEMPLATES)
// does not instantiate them (GCC instantiates an extern class's inline members, to inline them);
// docs/design.md "Explicit instantiation".

template <class T>
void BasicSequential<T>::compile(std::shared_ptr<const Distribution> dist, AnyLoss<T> loss,
                                 AnyOptimizer<T> optimizer, std::uint64_t seed,
                                 const CompileOptions& options) {
  set_steps_per_execution(options.steps_per_execution);
  set_device_graph(options.device_graph ? *options.device_graph : device_graph_from_environment());
  if (!dist) throw ValueError("kdist::Sequential::compile: the distribution is null");
  (void)optimizer.keras_slot_groups();  // a declaration that does not add up fails here
  (void)ops::matmul_precision();        // a bad KDIST_MATMUL_PRECISION fails here, on a CPU run too
  dist_ = std::move(dist);
  seed_ = seed;
  Shape shape = input_shape_;
  for (auto& l : layers_) shape = l.build(shape, *dist_, seed_);
  output_shape_ = shape;
  step_.compile(layers_, *dist_, std::move(loss), std::move(optimizer));
}

template <class T>
void BasicSequential<T>::set_gradient_sync(const GradientSyncOptions& options) {
  step_.set_gradient_sync(layers_, dist_.get(), options);
}

template <class T>
std::optional<std::pair<std::size_t, std::size_t>> BasicSequential<T>::optimizer_state_part(
    std::string_view path) {
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
  const auto& shard = step_.optimizer_state().shard(*at);
  if (!shard) return std::nullopt;
  return std::pair{shard->begin(), shard->size()};
}

template <class T>
History BasicSequential<T>::fit(const ArrayDataset<T>& data, const FitOptions& options) {
  require_compiled("fit");
  check_data(data, "fit");
  BatchPlan plan(
      data.size(), options.batch_size, *dist_,
      {.drop_remainder = options.drop_remainder, .shuffle = options.shuffle, .seed = seed_});
  if (input_shape_.size() == 1) return fit_epochs<2>(data, plan, options);
  return fit_epochs<4>(data, plan, options);
}

template <class T>
Metrics BasicSequential<T>::evaluate(const ArrayDataset<T>& data, const EvaluateOptions& options) {
  require_compiled("evaluate");
  check_data(data, "evaluate");
  BatchPlan plan(data.size(), options.batch_size, *dist_, {.drop_remainder = false});
  const bool print = options.verbose > 0 && process_id() == 0;
  if (input_shape_.size() == 1) {
    auto loader = loader_for<2>(data, plan, 0);
    return run_epoch(loader, data, plan, 0, 0, false, print);
  }
  auto loader = loader_for<4>(data, plan, 0);
  return run_epoch(loader, data, plan, 0, 0, false, print);
}

//! Keras' Sequential on float32, the default dtype.
using Sequential = BasicSequential<float>;

}  // namespace kdist

KDIST_EXTERN_CLASS(kdist::BasicSequential)
