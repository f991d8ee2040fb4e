#pragma once
//! \file nn/train/train_step.hpp
//! `detail::TrainStep<T>`: one training step of a stack of layers, and everything it owns: the
//! forward pass, the loss on the output (output_loss.hpp: rows or a language model's logits), the
//! backward pass in which each layer hands its gradients back (kdist::Gradients) and the
//! data-parallel sums of one layer start as soon as its backward returns (gradient_sync.hpp:
//! buckets, overlap, ZeRO-1's reduce-scatters), Keras' global_clipnorm, the optimizer and its
//! state (optimizer_state.hpp), updated last layer first so that each variable waits only for its
//! own sum. kdist::Sequential (kdist/nn/model.hpp) is the Keras facade over it.

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include <Kokkos_Core.hpp>

#include <kdist/core/error.hpp>
#include <kdist/nn/apply_gradient.hpp>
#include <kdist/nn/explicit_instantiation.hpp>
#include <kdist/nn/gradients.hpp>
#include <kdist/nn/layer.hpp>
#include <kdist/nn/loss.hpp>
#include <kdist/nn/optimizer.hpp>
#include <kdist/nn/train/device_iterations.hpp>
#include <kdist/nn/train/gradient_clipping.hpp>
#include <kdist/nn/train/gradient_sync.hpp>
#include <kdist/nn/train/metrics.hpp>
#include <kdist/nn/train/optimizer_state.hpp>
#include <kdist/nn/train/output_loss.hpp>
#include <kdist/nn/train/step_graph.hpp>
#include <kdist/parallel/profiling_region.hpp>
#include <kdist/strategy/distribution.hpp>

namespace kdist::detail {

template <class T>
class TrainStep {
 public:
  //! Takes the loss and the optimizer for `layers` (built) on `dist`, configures the gradient
  //! sync (the program's options, else the environment's; collective) and creates the optimizer
  //! state. Errors: those of GradientSync::configure and OptimizerState::plan.
  void compile(std::vector<AnyLayer<T>>& layers, const Distribution& dist, AnyLoss<T> loss,
               AnyOptimizer<T> optimizer);

  //! Replaces the gradient sync's options; once compiled (`dist` given) reconfigures it and
  //! reshards the optimizer state (collective).
  void set_gradient_sync(std::vector<AnyLayer<T>>& layers, const Distribution* dist,
                         const GradientSyncOptions& options);

  //! One step on `input` (this process's rows) and their targets: forward, loss, backward with
  //! the gradients' sums, clipping, update. Returns the global mean metrics, or nothing when
  //! `metrics_on_device` kept them there (OutputLoss: the library's losses on (batch, outputs)
  //! rows; take_totals() reads them). The step's count is read by its kernels from the device
  //! (DeviceIterations: dropout, Adam) and advanced there by its last kernel.
  template <class YV>
  std::optional<Metrics> train(std::vector<AnyLayer<T>>& layers, const LayerTensor<T>& input,
                               const YV& targets, std::size_t global_batch, StepContext context,
                               bool metrics_on_device = false);

  //! Asks for the step as one device graph (StepGraph), or not.
  void request_device_graph(bool on) { graph_.request(on); }
  DeviceGraphStatus device_graph() const { return graph_.status(); }

  //! The metrics of the steps since the last call (see OutputLoss::take_totals; collective when
  //! some were kept on the device), and dropping them unread.
  typename OutputLoss<T>::Totals take_metric_totals() {
    auto totals = output_loss_.take_totals();
    check_float16_loss(totals.loss);
    return totals;
  }
  void reset_metric_totals() { output_loss_.reset_totals(); }

  //! The loss (and accuracy) of `input` without dropout or update.
  template <class YV>
  Metrics evaluate(std::vector<AnyLayer<T>>& layers, const LayerTensor<T>& input, const YV& targets,
                   std::size_t global_batch, StepContext context);

  //! Runs every layer on `input`; returns the last layer's output as it produced it (the logits
  //! of a final softmax the loss fuses), in T: under a 16-bit policy widened, as Keras' losses
  //! take their inputs in float32.
  LayerTensor<T> forward(std::vector<AnyLayer<T>>& layers, const LayerTensor<T>& input,
                         StepContext context);

  const AnyLoss<T>& loss() const noexcept { return output_loss_.loss(); }
  const AnyOptimizer<T>& optimizer() const noexcept { return optimizer_; }
  AnyOptimizer<T>& optimizer() noexcept { return optimizer_; }
  OptimizerState<T>& optimizer_state() noexcept { return state_; }
  const GradientSyncOptions& gradient_sync() const noexcept { return sync_.options(); }
  const GradientSyncCounts& gradient_sync_counts() const noexcept { return sync_.counts(); }
  void reset_gradient_sync_counts() noexcept { sync_.reset_counts(); }

 private:
  //! What the step's kernels take from the host by address or value that may change between
  //! calls: the input's and the targets' blocks, the global batch, the learning rate and weight
  //! decay. A recorded step replays only while they stay the same.
  template <class YV>
  const StepGraphKey& graph_key(const LayerTensor<T>& input, const YV& targets,
                                std::size_t global_batch) {
    StepGraphKey& key = key_;  // its memory kept from step to step
    key.clear();
    std::visit(
        [&](const auto& t) {
          key.push_back(reinterpret_cast<std::uintptr_t>(t.local().data()));
          for (std::size_t d = 0; d < t.rank; ++d) key.push_back(t.local().extent(d));
        },
        input);
    key.push_back(reinterpret_cast<std::uintptr_t>(targets.data()));
    for (std::size_t d = 0; d < static_cast<std::size_t>(YV::rank); ++d) {
      key.push_back(targets.extent(d));
    }
    key.push_back(global_batch);
    for (const double v : {optimizer_.learning_rate(), optimizer_.weight_decay()}) {
      std::uint64_t bits = 0;
      std::memcpy(&bits, &v, sizeof bits);
      key.push_back(bits);
    }
    return key;
  }
  //! Why the step cannot be captured by what the host knows ("" when it can).
  std::string graph_host_reason() const;

  //! The name of the first layer that computes in float16 ("" for none).
  static std::string first_float16_layer(std::vector<AnyLayer<T>>& layers);
  //! A loss that is not finite in a model computing in float16 without loss scaling: Keras' advice
  //! for "mixed_float16" as an error (the loss is the global one: every process ends alike).
  void check_float16_loss(double loss) const;

  static std::size_t first_row(const LayerTensor<T>& input) {
    return std::visit([](const auto& t) { return t.offsets()[0]; }, input);
  }

  //! The layers' backward passes, last first; the gradients each hands back are resolved as soon
  //! as its backward returns (their sums start there, and complete in apply_gradients). Errors:
  //! ValueError when a layer that is not the first gives no input gradient (an Embedding: token
  //! ids have none, so it must come first).
  void backward(std::vector<AnyLayer<T>>& layers, const LayerTensor<T>& dout);

  //! One step of every variable: with the optimizer's global_clipnorm, every gradient scaled by
  //! Keras' clip_by_global_norm first (in place: the gradients stay clipped), then the checks of
  //! kdist::apply_gradient and the optimizer's update_step on the blocks of the variable, its
  //! gradient and its declared slots, told the variable's path. The variables go last layer
  //! first, the order their gradients' all-reduces started: each waits only for its own. With a
  //! LossScaleOptimizer the gradients are unscaled first, or, when any is not finite on any
  //! process, nothing is stepped. Returns whether the variables were stepped.
  bool apply_gradients(std::vector<AnyLayer<T>>& layers);
  //! Whether every element of every gradient is finite on every process: the per-variable sums of
  //! their squares in double (finite exactly when the elements are: a float's square cannot
  //! overflow a double), summed over the processes (one all-reduce: they all agree) and read on
  //! the host.
  bool gradients_finite(std::vector<AnyLayer<T>>& layers) {
    squared_sums_into_clip_squares(layers, "kdist::LossScaleOptimizer");
    if (clip_squares_host_.extent(0) != clip_squares_.extent(0)) {
      clip_squares_host_ = Kokkos::create_mirror_view(clip_squares_);
    }
    Kokkos::deep_copy(clip_squares_host_, clip_squares_);
    for (std::size_t k = 0; k < clip_squares_host_.extent(0); ++k) {
      if (!std::isfinite(clip_squares_host_(k))) return false;
    }
    return true;
  }
  //! Keras' clip_by_global_norm without the host (GlobalNorm's sum, left on the device): each
  //! gradient's sum of squares into a slot of clip_squares_ (its part when its optimizer state is
  //! sharded, 0 on the processes holding a replica counted elsewhere), on several processes one
  //! all-reduce of those slots (a host call between two pieces of a recorded step), one kernel for
  //! the scale, the gradients scaled by the scale they read on the device.
  void clip_on_device(std::vector<AnyLayer<T>>& layers, double clipnorm) {
    (void)global_clip_scale(0.0, clipnorm);  // checks clipnorm
    squared_sums_into_clip_squares(layers, "kdist::global_norm");
    clip_scale_into(clip_squares_, clipnorm, clip_scale_);
    for_each_variable(layers, [&](auto& v) { scale_block_at(v.grad, clip_scale_.data()); });
  }
  //! Each gradient's sum of squares into its slot of clip_squares_ (its part when its optimizer
  //! state is sharded, 0 on the processes holding a replica counted elsewhere), on several
  //! processes summed over all of them (one all-reduce of the slots: a host call between two
  //! pieces of a recorded step).
  void squared_sums_into_clip_squares(std::vector<AnyLayer<T>>& layers, const char* who) {
    std::size_t n = 0;
    for_each_variable(layers, [&](auto&) { ++n; });
    if (clip_squares_.extent(0) != n) {
      clip_squares_ = Kokkos::View<double*, Kokkos::LayoutRight>("kdist::clip/squares", n);
      clip_scale_ = Kokkos::View<double, Kokkos::LayoutRight>("kdist::clip/scale");
    }
    std::size_t k = 0;
    std::optional<RuntimeDeviceMesh> mesh;
    for_each_variable(layers, [&](auto& v) {
      const auto out = Kokkos::subview(clip_squares_, k);
      if (const auto& shard = state_.shard(k++)) {  // only its part is summed
        counted_squared_sum_into(v.grad, out, who, shard->begin(), shard->size(), shard->mesh_axes);
      } else {
        counted_squared_sum_into(v.grad, out, who);
      }
      if (!mesh) mesh = v.grad.device_mesh();
    });
    if (mesh && mesh->size() > 1) {
      all_reduce(Kokkos::DefaultExecutionSpace(), clip_squares_, ReduceOp::sum,
                 communicators(*mesh).world());
    }
  }

  //! The update of variable `k` (this process's part of it when its state is sharded).
  template <class DataType>
  void update(TrainableVariable<DataType>& v, std::size_t k) {
    using State = OptimizerState<T>;
    sync_.wait_for(v.grad.local().data());
    check_gradient_for(v.value, v.grad);
    auto param = State::template flat<T>(v.value.local());
    auto grad = State::template flat<T>(v.grad.local());
    const auto& shard = state_.shard(k);
    if (shard) {  // this process's part only; the parts are gathered below
      param = OptimizerView<T>(param.data() + shard->begin(), shard->size());
      grad = OptimizerView<T>(grad.data() + shard->begin(), shard->size());
    }
    // a 16-bit variable (kdist/nn/sixteen_bit_variables.hpp): its gradient rounded to its dtype,
    // its slots widened from it, the updated value and slots rounded back to it
    round_to_dtype(grad, v.dtype);
    state_.for_each_update_chunk(
        k, param.size(),
        [&](std::size_t begin, std::size_t count, std::span<const OptimizerView<T>> slots) {
          optimizer_.update_step(OptimizerView<T>(param.data() + begin, count),
                                 OptimizerView<const T>(grad.data() + begin, count), slots, v.path);
        });
    round_to_dtype(param, v.dtype);
    if (shard && shard->owned_whole) {
      sync_.gather_owned(v.value.local().data(), *shard);
    } else if (shard) {
      sync_.all_gather_parts(v.value.local().data(), *shard);
    }
    sync_.progress();  // answer the other processes' all-reduce messages
  }

  OutputLoss<T> output_loss_;
  AnyOptimizer<T> optimizer_ = Adam();
  OptimizerState<T> state_;
  //! The data-parallel gradient sums of a step (gradient_sync.hpp) and their settings.
  GradientSync sync_;
  std::optional<GradientSyncOptions> sync_by_program_;
  //! What the layer whose backward runs hands back (its memory kept from step to step).
  Gradients<T> gradients_;
  //! The optimizer's step count in device memory, read by the step's kernels.
  DeviceIterations iterations_;
  //! The last layer's output widened to T for the loss, when it computes in 16 bits.
  WidenedInputs<T> widened_output_;
  //! A layer computing in float16, whose overflow check_float16_loss reports.
  std::string float16_layer_;
  //! The step as one device graph, when asked for, and the last step's key.
  StepGraph graph_;
  StepGraphKey key_;
  //! clip_on_device's per-variable sums of squares and scale.
  Kokkos::View<double*, Kokkos::LayoutRight> clip_squares_;
  Kokkos::View<double, Kokkos::LayoutRight> clip_scale_;
  //! clip_squares_ on the host, for LossScaleOptimizer's finiteness.
  typename Kokkos::View<double*, Kokkos::LayoutRight>::HostMirror clip_squares_host_;
};

// The step's members are defined here, outside the class: not inline, so a translation unit that
// declares TrainStep<float> extern (KDIST_EXTERN_TEMPLATES) instantiates none of them (GCC
// instantiates an extern class's inline members that are used, to inline them), and train and
// evaluate on the targets of KDIST_TRAIN_STEP_TARGETS are taken from the instance library.

template <class T>
void TrainStep<T>::compile(std::vector<AnyLayer<T>>& layers, const Distribution& dist,
                           AnyLoss<T> loss, AnyOptimizer<T> optimizer) {
  const bool fused = loss.fuses_softmax() && layers.back().ends_in_softmax();
  output_loss_.set(std::move(loss), fused);
  optimizer_ = std::move(optimizer);
  sync_.configure(sync_by_program_);
  auto shards = OptimizerState<T>::plan(layers, dist, sync_.options());
  state_.create(layers, optimizer_.slots(), std::move(shards));
  sync_.set_state_shards(state_.registry(layers));
}

template <class T>
void TrainStep<T>::set_gradient_sync(std::vector<AnyLayer<T>>& layers, const Distribution* dist,
                                     const GradientSyncOptions& options) {
  sync_by_program_ = options;
  if (dist == nullptr) return;
  sync_.configure(sync_by_program_);
  state_.reshard(layers, OptimizerState<T>::plan(layers, *dist, sync_.options()));
  sync_.set_state_shards(state_.registry(layers));
}

template <class T>
template <class YV>
std::optional<Metrics> TrainStep<T>::train(std::vector<AnyLayer<T>>& layers,
                                           const LayerTensor<T>& input, const YV& targets,
                                           std::size_t global_batch, StepContext context,
                                           bool metrics_on_device) {
  ProfilingRegion region("kdist::Sequential::train_step");
  float16_layer_ = first_float16_layer(layers);
  iterations_.match(optimizer_.iterations());
  optimizer_.read_iterations_from(iterations_.data());
  context.step_at = iterations_.data();
  const bool on_device = metrics_on_device || graph_.requested();
  if (on_device) context.checks = output_loss_.device_checks();
  const auto launch = [&] {
    const LayerTensor<T> out = forward(layers, input, context);
    auto dout = output_loss_.start(out, targets, global_batch, first_row(input), true, on_device,
                                   context.step_at);
    if (const auto* scaling = optimizer_.loss_scaling()) {  // Keras' scale_loss, on its gradient
      std::visit([&](auto& t) { scale_block(t, scaling->loss_scale()); }, *dout);
    }
    backward(layers, std::move(*dout));
    output_loss_.check_agreed();  // a loss that failed on any process ends every one, here
    if (apply_gradients(layers)) iterations_.advance();
  };
  if (!graph_.requested()) {
    launch();
  } else {
    const std::int64_t before = optimizer_.iterations();
    graph_.run(
        graph_key(input, targets, global_batch), [&] { return graph_host_reason(); }, launch,
        [&] {
          optimizer_.finish_step();
          iterations_.advanced_by_graph();
          output_loss_.replayed(global_batch);
        },
        [&] {
          optimizer_.set_iterations(before);
          iterations_.forget();
          output_loss_.unstage(global_batch);
        });
  }
  if (output_loss_.kept_on_device()) return std::nullopt;
  const Metrics m = output_loss_.finish();
  check_float16_loss(m.loss);
  return m;
}

template <class T>
template <class YV>
Metrics TrainStep<T>::evaluate(std::vector<AnyLayer<T>>& layers, const LayerTensor<T>& input,
                               const YV& targets, std::size_t global_batch, StepContext context) {
  const LayerTensor<T> out = forward(layers, input, context);
  output_loss_.start(out, targets, global_batch, first_row(input), false);
  return output_loss_.finish();
}

template <class T>
LayerTensor<T> TrainStep<T>::forward(std::vector<AnyLayer<T>>& layers, const LayerTensor<T>& input,
                                     StepContext context) {
  context.bfloat16_gathers = sync_.options().bfloat16_gathers;
  ActivationTensor<T> h = input;
  for (std::size_t i = 0; i < layers.size(); ++i) {
    context.output_logits = output_loss_.fused_softmax() && i + 1 == layers.size();
    h = layers[i].forward_autocast(h, context);
  }
  return widened_output_(h);
}

template <class T>
std::string TrainStep<T>::graph_host_reason() const {
  if (optimizer_.loss_scaling() != nullptr) {
    return "a LossScaleOptimizer's step is applied or skipped by the host, which reads whether "
           "the gradients are finite";
  }
  if (!optimizer_.replays_from_device()) {
    return "the optimizer '" + optimizer_.name() +
           "' is not the library's: its kernels may take the step count from the host";
  }
  if (!output_loss_.kept_on_device()) {
    return "the loss '" + output_loss_.loss().name() +
           "' returns its sum to the host each step (the library's losses keep it on the "
           "device)";
  }
  return {};
}

template <class T>
std::string TrainStep<T>::first_float16_layer(std::vector<AnyLayer<T>>& layers) {
  for (const auto& l : layers) {
    if (l.dtype_policy().compute() == DType::float16) return l.name();
  }
  return {};
}

template <class T>
void TrainStep<T>::check_float16_loss(double loss) const {
  if (std::isfinite(loss) || float16_layer_.empty() || optimizer_.loss_scaling() != nullptr) {
    return;
  }
  throw ValueError("kdist::Sequential: the loss is " +
                   std::string(std::isnan(loss) ? "NaN" : "infinite") + " and layer '" +
                   float16_layer_ +
                   "' computes in float16 without loss scaling: float16 overflows above 65504 "
                   "and small gradients underflow to zero; wrap the optimizer in "
                   "kdist::LossScaleOptimizer, as Keras does for \"mixed_float16\", or train "
                   "under \"mixed_bfloat16\" (float32's range)");
}

template <class T>
void TrainStep<T>::backward(std::vector<AnyLayer<T>>& layers, const LayerTensor<T>& dout) {
  ActivationTensor<T> dh = dout;
  sync_.wait_all();  // nothing is left from a step that threw
  gradients_.clear();
  gradients_.set_resolver([this](Gradients<T>& g) { sync_.resolve(g); });
  for (std::size_t i = layers.size(); i-- > 0;) {
    auto dx = layers[i].backward_autocast(dh, i > 0, gradients_);
    sync_.resolve(gradients_);
    sync_.progress();
    if (dx) {
      dh = std::move(*dx);
    } else if (i > 0) {
      throw ValueError("kdist::Sequential: layer '" + layers[i].name() + "' (layer " +
                       std::to_string(i) +
                       ") gives no gradient of its input, so the layers before it cannot "
                       "train; put it first (an Embedding takes token ids, which have none)");
    }
  }
  sync_.flush();
}

template <class T>
bool TrainStep<T>::apply_gradients(std::vector<AnyLayer<T>>& layers) {
  if (auto* scaling = optimizer_.loss_scaling()) {
    sync_.wait_all();  // finiteness needs every gradient's sum
    const bool finite = gradients_finite(layers);
    if (!finite) {
      scaling->advance_scale(false);
      return false;
    }
    const double unscale = 1.0 / scaling->loss_scale();
    for_each_variable(layers, [&](auto& v) { scale_block(v.grad, unscale); });
  }
  if (const auto clipnorm = optimizer_.global_clipnorm()) {
    sync_.wait_all();  // the norm needs every gradient (their sums on host memory)
    clip_on_device(layers, *clipnorm);
  }
  std::size_t k = 0;
  for_each_variable(layers, [&](auto&) { ++k; });
  for (std::size_t l = layers.size(); l-- > 0;) {
    auto refs = layers[l].variables();
    for (std::size_t r = refs.size(); r-- > 0;) {
      std::visit([&](auto* v) { update(*v, --k); }, refs[r]);
    }
  }
  sync_.start_owned_gathers();
  sync_.wait_all();
  optimizer_.finish_step();
  if (auto* scaling = optimizer_.loss_scaling()) scaling->advance_scale(true);
  return true;
}

//! Targets as the step takes them: a View of the default memory space in LayoutRight as a View of
//! const values (no copy), so that labels of `int` and of `const int` are one instance of
//! TrainStep::train; any other View as it is.
template <class YV>
auto step_targets(const YV& targets) {
  using Const = Kokkos::View<typename YV::const_data_type, Kokkos::LayoutRight>;
  if constexpr (std::is_same_v<typename YV::array_layout, Kokkos::LayoutRight> &&
                std::is_same_v<typename YV::memory_space, typename Const::memory_space>) {
    return Const(targets);
  } else {
    return targets;
  }
}

//! The targets whose train and evaluate steps are compiled with TrainStep<T>'s instances
//! (KDIST_EXTERN_TEMPLATES), as step_targets gives them: integer labels (one per row), a language
//! model's token ids (one per position), rows of T (batch, outputs) and fields of T (batch,
//! height, width, channels).
template <class T>
using StepLabels = Kokkos::View<const std::int32_t*, Kokkos::LayoutRight>;
template <class T>
using StepTokenIds = Kokkos::View<const std::int32_t**, Kokkos::LayoutRight>;
template <class T>
using StepRows = Kokkos::View<const T**, Kokkos::LayoutRight>;
template <class T>
using StepFields = Kokkos::View<const T****, Kokkos::LayoutRight>;

}  // namespace kdist::detail

//! TrainStep<T>::train and ::evaluate on the targets kdist::detail::Y<T> (one of the above).
#define KDIST_DETAIL_TRAIN_STEP_ON(T, how, Y)                                                     \
  how std::optional<kdist::Metrics> kdist::detail::TrainStep<T>::train<kdist::detail::Y<T>>(      \
      std::vector<kdist::AnyLayer<T>>&, const kdist::LayerTensor<T>&, const kdist::detail::Y<T>&, \
      std::size_t, kdist::StepContext, bool);                                                     \
  how kdist::Metrics kdist::detail::TrainStep<T>::evaluate<kdist::detail::Y<T>>(                  \
      std::vector<kdist::AnyLayer<T>>&, const kdist::LayerTensor<T>&, const kdist::detail::Y<T>&, \
      std::size_t, kdist::StepContext);
#define KDIST_TRAIN_STEP_TARGETS(F) F(StepLabels) F(StepTokenIds) F(StepRows) F(StepFields)
#define KDIST_DETAIL_EXTERN_TRAIN_STEP_ON(Y) KDIST_EXTERN_MEMBERS(KDIST_DETAIL_TRAIN_STEP_ON, Y)

KDIST_EXTERN_CLASS(kdist::detail::TrainStep)
KDIST_TRAIN_STEP_TARGETS(KDIST_DETAIL_EXTERN_TRAIN_STEP_ON)
