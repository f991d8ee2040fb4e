#pragma once
//! \file nn/remat.hpp
//! Rematerialisation (gradient checkpointing) as Keras' `keras.RematScope` and `keras.remat`:
//! a layer created while a `kdist::RematScope` lives drops what its forward pass computed and
//! recomputes it just before its backward pass, trading compute for activation memory.
//!
//! \code
//! std::vector<kdist::Sequential::Layer> layers;
//! {
//!   kdist::RematScope scope("full");         // every layer created here is rematerialised
//!   layers.emplace_back(Residual("block0/mlp", {...}));
//! }
//! {
//!   kdist::RematScope scope("list_of_layers", 1024, {"block1/attn"});
//!   layers.emplace_back(Residual("block1/attn", {...}));   // named: rematerialised
//! }
//! layers.emplace_back(kdist::remat<float>(Dense(256, Activation::gelu, true, "d")));
//! \endcode
//!
//! Modes, as Keras':
//! - "full": every layer created in the scope.
//! - "larger_than": layers whose output (batch included, as Keras counts it) has more than
//!   `output_size_threshold` elements, decided at each call.
//! - "list_of_layers": the layers whose name() is in `layer_names`.
//! - "activations": Keras recomputes the activation functions of layers that have one instead of
//!   keeping their intermediates. kdist's activation kernels keep nothing but their input already
//!   (gelu's backward recomputes its tanh from the pre-activation; relu's reads the output), so
//!   this mode leaves layers as they are.
//! - none (std::nullopt): no rematerialisation for layers created in the scope (nested scopes).
//!
//! How: a rematerialised layer's forward pass runs with a kdist::detail::ViewArena active (its
//! buffers are the arena's, shared by every rematerialised layer of the scope, so the saved
//! activations of all of them take one layer's memory; the arena is the thread's, whichever scope
//! created the layer), keeps only its input, and copies its
//! output out. Its backward pass first runs the forward pass again on the kept input with the same
//! StepContext (dropout masks replay from the same keys, so gradients are bit-identical to running
//! without rematerialisation), then the backward pass, whose buffers are shared the same way
//! (reused once nothing holds them). A rematerialised layer inside another (a Dense in a
//! rematerialised Residual) is recomputed by the outer one and does nothing of its own.

#include <algorithm>
#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include <Kokkos_Core.hpp>

#include <kdist/core/error.hpp>
#include <kdist/nn/layer_buffers.hpp>
#include <kdist/tensor/tensor.hpp>
#include <kdist/tensor/view_arena.hpp>

namespace kdist {

//! Keras' rematerialisation modes (RematScope's `mode`).
enum class RematMode { none, full, activations, larger_than, list_of_layers };

//! What a RematScope says, as Keras' `RematMode` named tuple; `arena` is what the layers it
//! selects share (every scope of a thread gives the same one: ViewArena::for_this_thread).
struct RematSettings {
  RematMode mode = RematMode::none;
  std::size_t output_size_threshold = 1024;
  std::vector<std::string> layer_names;
  std::shared_ptr<detail::ViewArena> arena;
};

//! Keras' `keras.RematScope`: while one lives (on this thread), the layers created are
//! rematerialised as `mode` says (see the file's comment). Scopes nest; the innermost applies.
class RematScope {
 public:
  //! `mode`: "full", "activations", "larger_than", "list_of_layers", or std::nullopt (none).
  //! Errors: kdist::ValueError for another mode (Keras' message).
  explicit RematScope(std::optional<std::string> mode = "full",
                      std::size_t output_size_threshold = 1024,
                      std::vector<std::string> layer_names = {}) {
    settings_.mode = parse(mode);
    settings_.output_size_threshold = output_size_threshold;
    settings_.layer_names = std::move(layer_names);
    settings_.arena = detail::ViewArena::for_this_thread();
    stack().push_back(&settings_);
  }
  RematScope(const RematScope&) = delete;
  RematScope& operator=(const RematScope&) = delete;
  ~RematScope() { stack().pop_back(); }

  const RematSettings& settings() const noexcept { return settings_; }

  //! The innermost live scope's settings on this thread (nullptr: none), as Keras'
  //! get_current_remat_mode().
  static const RematSettings* current() noexcept {
    return stack().empty() ? nullptr : stack().back();
  }

 private:
  static RematMode parse(const std::optional<std::string>& mode) {
    if (!mode) return RematMode::none;
    if (*mode == "full") return RematMode::full;
    if (*mode == "activations") return RematMode::activations;
    if (*mode == "larger_than") return RematMode::larger_than;
    if (*mode == "list_of_layers") return RematMode::list_of_layers;
    throw ValueError("kdist::RematScope: invalid mode '" + *mode +
                     "'. Supported modes are: 'full', 'activations', 'larger_than', "
                     "'list_of_layers', or std::nullopt (none)");
  }
  static std::vector<const RematSettings*>& stack() {
    thread_local std::vector<const RematSettings*> s;
    return s;
  }

  RematSettings settings_;
};

namespace detail {

//! A layer's rematerialisation: what kdist::AnyLayer runs around a layer's forward and backward
//! passes when the layer was created in a RematScope that selects it. `Tensor` is the layers'
//! std::variant of distributed tensors (kdist::LayerTensor<T>), `Context` kdist::StepContext.
template <class T, class Tensor, class Context>
class Rematerializer {
 public:
  //! For a layer named `name` created under `settings`; nullopt when the settings leave it alone.
  static std::optional<Rematerializer> select(const RematSettings* settings,
                                              const std::string& name) {
    if (settings == nullptr) return std::nullopt;
    switch (settings->mode) {
      case RematMode::full:
      case RematMode::larger_than:
        return Rematerializer(*settings);
      case RematMode::list_of_layers: {
        const auto& names = settings->layer_names;
        if (std::find(names.begin(), names.end(), name) == names.end()) return std::nullopt;
        return Rematerializer(*settings);
      }
      case RematMode::activations:  // see the file's comment
      case RematMode::none:
        break;
    }
    return std::nullopt;
  }

  //! The layer's output per example (what build returned), for "larger_than".
  void built(std::vector<std::size_t> output_shape) { output_shape_ = std::move(output_shape); }

  template <class L>
  Tensor forward(L& layer, const Tensor& x, const Context& context) {
    active_ = ViewArena::current() == nullptr && selects(x);
    if (!active_) return layer.forward(x, context);
    x_ = x;
    context_ = context;
    Tensor y;
    {
      const ViewArena::Use use(settings_.arena.get(), ViewArena::Mode::replay);
      y = layer.forward(x, context);
    }
    return std::visit([&](const auto& t) { return Tensor(copy_out(t)); }, y);
  }

  //! Recomputes the forward pass, calls `prepare()` (what the layer keeps is there again: the
  //! autocast rounds it as it rounds what it keeps), then runs the backward pass.
  template <class L, class Gradients, class Prepare = void (*)()>
  std::optional<Tensor> backward(
      L& layer, const Tensor& dy, bool need_input_grad, Gradients& grads,
      const Prepare& prepare = [] {}) {
    if (!active_) {
      prepare();
      return layer.backward(dy, need_input_grad, grads);
    }
    if (!x_) {
      throw ValueError(
          "kdist: a rematerialised layer's backward pass came before its forward "
          "pass (or twice after one)");
    }
    {
      const ViewArena::Use use(settings_.arena.get(), ViewArena::Mode::replay);
      (void)layer.forward(*x_, context_);
    }
    prepare();
    std::optional<Tensor> dx;
    {
      const ViewArena::Use use(settings_.arena.get(), ViewArena::Mode::shared);
      dx = layer.backward(dy, need_input_grad, grads);
    }
    x_.reset();  // the layer before may write over it in the next step (one kept buffer, not two)
    return dx;
  }

  const RematSettings& settings() const noexcept { return settings_; }

 private:
  explicit Rematerializer(const RematSettings& settings) : settings_(settings) {}

  //! Whether this call is rematerialised: always but under "larger_than", where the output (batch
  //! included) must have more elements than the threshold.
  bool selects(const Tensor& x) const {
    if (settings_.mode != RematMode::larger_than) return true;
    std::size_t size = std::visit([](const auto& t) { return t.shape()[0]; }, x);
    for (const std::size_t d : output_shape_) size *= d;
    return size > settings_.output_size_threshold;
  }

  //! The segment's output, out of the arena (which the next rematerialised layer writes over).
  template <class Distributed>
  Distributed copy_out(const Distributed& y) {
    const auto local = outputs_.get_like("kdist::remat/output", y.local());
    Kokkos::deep_copy(typename decltype(local)::execution_space(), local, y.local());
    return Distributed::from_local(local, y.shape(), y.layout(), y.partial_axes());
  }

  RematSettings settings_;
  std::vector<std::size_t> output_shape_;
  bool active_ = false;
  std::optional<Tensor> x_;
  Context context_{};
  LayerBuffers<T> outputs_;  // copies start empty: a copied layer keeps its own
};

}  // namespace detail
}  // namespace kdist
