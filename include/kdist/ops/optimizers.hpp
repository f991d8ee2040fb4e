#pragma once
//! \file ops/optimizers.hpp
//! `kdist::SGD`, `kdist::Adam`, `kdist::AdamW` and `kdist::RMSprop` with Keras 3's defaults and
//! update formulas, operating elementwise on one parameter View, its gradient View and state
//! ("slot") Views of the same shape.
//! Because the update is elementwise, a shard of a variable with the same-shaped shards of its
//! gradient and state is updated exactly like the corresponding elements of the full variable:
//! the optimizer state is sharded exactly like the parameter.
//!
//! One training step: call `update` once per variable, then `finish_step()` once (Keras'
//! `optimizer.iterations += 1`). `update` uses `iterations() + 1` as Keras' local step.
//!
//! Each optimizer declares its state once, in `slots()` (kdist::OptimizerSlots: the slot names in
//! the order `update_step` takes them, and Keras' order of them in a `.weights.h5` file): the
//! model creates the slots from it, checkpoints name and count them from it, Keras weights files
//! order them by it. `update_step(param, grad, slots)` is the step of one variable with its slots
//! as declared (what kdist::AnyOptimizer calls; kdist/nn/optimizer.hpp).
//!
//! Each also takes Keras' `global_clipnorm` (`set_global_clipnorm(1.0)`, or
//! `kdist::Adam().with_global_clipnorm(1.0)`): kdist::Sequential then scales all gradients by
//! `clipnorm / max(global_norm, clipnorm)` before the step, the norm taken over every shard of
//! every gradient (kdist/nn/train/gradient_clipping.hpp). `update` itself never clips: a gradient block
//! cannot see the global norm.

#include <Eigen/Core>
#include <Kokkos_Core.hpp>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <kdist/core/error.hpp>
#include <kdist/ops/backend.hpp>
#include <kdist/ops/detail/host_threads.hpp>
#include <kdist/ops/detail/kokkos_math.hpp>
#include <kdist/ops/detail/views.hpp>
#include <optional>
#include <span>
#include <sstream>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

namespace kdist {

//! A zero-initialised View shaped, laid out and placed like `param`: the optimizer state of a
//! (shard of a) variable. Example: `auto m = kdist::make_slot(kernel, "d1/kernel/m");`.
template <class PV>
auto make_slot(const PV& param, const std::string& label) {
  using Slot = Kokkos::View<typename PV::non_const_data_type, typename PV::array_layout,
                            typename PV::memory_space>;
  return Slot(Kokkos::view_alloc(label), param.layout());
}

//! What an optimizer keeps per variable, declared once by the optimizer (its `slots()`) and read
//! by everything that handles optimizer state: kdist::Sequential creates the slots from it,
//! checkpoints name and count them, Keras weights files store them in Keras' order. Each slot is
//! shaped, laid out and sharded like its variable.
//! \code
//! kdist::OptimizerSlots slots() const { return {{"velocity"}}; }  // one slot, Keras' name
//! \endcode
struct OptimizerSlots {
  //! The slots of one variable, in the order `update_step` receives them ("momentum", "velocity").
  std::vector<std::string> names;
  //! Keras' order of the slots in a `.weights.h5` file. Each group is one
  //! `add_optimizer_variables(vars, group)` call of the Keras optimizer's `build`, which creates
  //! the group's slots for each variable in turn: Adam {{"momentum", "velocity"}} (both slots of a
  //! variable, then the next variable's), RMSprop {{"velocity"}, {"momentum"},
  //! {"average_gradient"}} (every velocity first). Empty: one group per slot, in `names` order.
  std::vector<std::vector<std::string>> keras_order = {};

  //! The number of slots per variable.
  std::size_t size() const { return names.size(); }
  friend bool operator==(const OptimizerSlots&, const OptimizerSlots&) = default;
};

namespace detail {

//! Keras' order as groups of slot indices (into `slots.names`). Errors: kdist::ValueError naming
//! `who` when keras_order names a slot that is not declared, or leaves one out, or names one twice.
inline std::vector<std::vector<std::size_t>> keras_slot_groups(const OptimizerSlots& slots,
                                                               const std::string& who) {
  std::vector<std::vector<std::size_t>> groups;
  if (slots.keras_order.empty()) {
    for (std::size_t k = 0; k < slots.names.size(); ++k) groups.push_back({k});
    return groups;
  }
  std::vector<int> seen(slots.names.size(), 0);
  for (const auto& group : slots.keras_order) {
    std::vector<std::size_t> g;
    for (const auto& name : group) {
      std::size_t k = 0;
      while (k < slots.names.size() && slots.names[k] != name) ++k;
      if (k == slots.names.size()) {
        throw ValueError(who + ": slots().keras_order names slot '" + name +
                         "', which slots().names does not declare");
      }
      ++seen[k];
      g.push_back(k);
    }
    groups.push_back(std::move(g));
  }
  for (std::size_t k = 0; k < seen.size(); ++k) {
    if (seen[k] != 1) {
      throw ValueError(who + ": slots().keras_order names slot '" + slots.names[k] + "' " +
                       std::to_string(seen[k]) + " times; name each declared slot once");
    }
  }
  return groups;
}

//! update_step given `given` slots where the optimizer declares `declared`.
inline void check_slot_count(const char* op, std::size_t given, std::size_t declared) {
  if (given != declared) {
    throw ValueError(std::string("kdist::") + op + "::update_step: " + std::to_string(given) +
                     " slot(s) given but this " + op + " declares " + std::to_string(declared) +
                     " (slots())");
  }
}

//! Checks that `v` has `p`'s extents and is contiguous; returns the number of elements.
template <class PV, class V>
std::size_t check_slot(const char* op, const char* what, const PV& p, const V& v) {
  static_assert(Kokkos::is_view<V>::value, "kdist optimizers: expected a Kokkos::View");
  static_assert(static_cast<int>(V::rank) == static_cast<int>(PV::rank),
                "kdist optimizers: the gradient and state Views must have the parameter's rank");
  static_assert(std::is_same_v<std::remove_const_t<typename V::value_type>,
                               std::remove_const_t<typename PV::value_type>>,
                "kdist optimizers: the gradient and state Views must have the parameter's "
                "scalar type");
  bool same = true;
  for (unsigned r = 0; r < static_cast<unsigned>(PV::rank); ++r) {
    same = same && v.extent(r) == p.extent(r);
  }
  if (!same) {
    throw ValueError(std::string("kdist::") + op + "::update: " + what + " is " +
                     ops::detail::shape_string(v) + " but the parameter is " +
                     ops::detail::shape_string(p) +
                     "; give it the parameter's shape (kdist::make_slot(param, label) creates "
                     "state Views)");
  }
  if (!v.span_is_contiguous()) {
    throw ValueError(std::string("kdist::") + op + "::update: " + what +
                     " is not contiguous; optimizers update Views whose elements are contiguous");
  }
  return v.size();
}

template <class V>
auto flat_array(const V& v) {
  using T = typename V::value_type;
  using A = Eigen::Array<std::remove_const_t<T>, Eigen::Dynamic, 1>;
  using Target = std::conditional_t<std::is_const_v<T>, const A, A>;
  return Eigen::Map<Target>(v.data(), static_cast<Eigen::Index>(v.size()));
}

template <class V>
auto flat_view(const V& v) {
  return Kokkos::View<typename V::value_type*, typename V::memory_space,
                      Kokkos::MemoryTraits<Kokkos::Unmanaged>>(v.data(), v.size());
}

inline void check_learning_rate(const char* op, double lr) {
  if (!(lr >= 0.0) || !std::isfinite(lr)) {
    throw ValueError(std::string("kdist::") + op + ": learning_rate is " + std::to_string(lr) +
                     "; it must be a finite number >= 0");
  }
}

//! `x` as `std::ostream` prints a double ("0.9", "-1e-07", "nan"): small values such as an epsilon
//! stay readable, unlike `std::to_string`'s fixed six decimals.
inline std::string number_string(double x) {
  std::ostringstream s;
  s << x;
  return s.str();
}

//! Keras' global_clipnorm must be a finite number > 0 (Keras ignores a value <= 0 silently; kdist
//! refuses it).
inline void check_global_clipnorm(const std::string& op, double clipnorm) {
  if (!(clipnorm > 0.0) || !std::isfinite(clipnorm)) {
    throw ValueError("kdist::" + op + ": global_clipnorm is " + number_string(clipnorm) +
                     "; it must be a finite number > 0 (the largest global norm of the gradients "
                     "left unclipped); for no clipping leave it unset (std::nullopt)");
  }
}

//! `p -= p * weight_decay * lr` over a contiguous block (a free function: nvcc takes no
//! KOKKOS_LAMBDA in a protected member function).
template <class Backend, class PV>
void weight_decay_kernel(const PV& param, typename PV::non_const_value_type weight_decay,
                         typename PV::non_const_value_type lr) {
  constexpr bool eigen = ops::detail::check_backend<Backend, PV>();
  const std::size_t n = param.size();
  if (n == 0 || weight_decay == 0) return;
  if constexpr (eigen) {
    auto p = flat_array(param);
    p -= (p * weight_decay) * lr;
  } else {
    auto p = flat_view(param);
    Kokkos::parallel_for(
        "kdist::Optimizer::weight_decay", ops::detail::range<PV>(n),
        KOKKOS_LAMBDA(const std::int64_t i) { p(i) -= p(i) * weight_decay * lr; });
  }
}

//! What every optimizer of the library keeps, as Keras' BaseOptimizer does: the learning rate
//! (checked), the step counter (Keras' `optimizer.iterations`), `global_clipnorm`, and the
//! decoupled `weight_decay` with its exclusions (Keras' `_apply_weight_decay`: `p -= p *
//! weight_decay * lr` before the step, on every variable that `exclude_from_weight_decay` does not
//! name). `Derived` is the optimizer (the with_ builders return one); `who` ("Adam") begins its
//! error messages.
template <class Derived>
class OptimizerBase {
 public:
  double learning_rate() const { return learning_rate_; }
  //! Errors: kdist::ValueError for a negative or non-finite rate.
  void set_learning_rate(double lr) {
    check_learning_rate(who_, lr);
    learning_rate_ = lr;
  }
  //! Completed steps (Keras' `optimizer.iterations`).
  std::int64_t iterations() const { return iterations_; }
  void set_iterations(std::int64_t n) { iterations_ = n; }
  //! Ends a training step (after `update` of every variable).
  void finish_step() { ++iterations_; }
  //! Where the device kernels read the completed steps from instead of taking them as an
  //! argument (nullptr: they take iterations()): the training step's copy of the count in the
  //! memory of the variables (kdist::detail::DeviceIterations), equal to iterations() whenever a
  //! step runs, so that a step captured once as a device graph replays with each step's count.
  //! A copy of the optimizer does not take it (it points into the step that set it).
  void read_iterations_from(const std::int64_t* at) { iterations_at_.at = at; }
  const std::int64_t* iterations_at() const { return iterations_at_.at; }

  //! Keras' `global_clipnorm`: std::nullopt (the default) for no clipping.
  std::optional<double> global_clipnorm() const { return global_clipnorm_; }
  //! Sets it (std::nullopt: no clipping). Errors: kdist::ValueError for a value that is not a
  //! finite number > 0.
  void set_global_clipnorm(std::optional<double> clipnorm) {
    if (clipnorm) check_global_clipnorm(who_, *clipnorm);
    global_clipnorm_ = clipnorm;
  }
  //! A copy with global_clipnorm set, for one expression: `kdist::Adam(1e-3).with_global_clipnorm(1.0)`.
  //! Errors: as set_global_clipnorm.
  Derived with_global_clipnorm(double clipnorm) const {
    Derived copy = static_cast<const Derived&>(*this);
    copy.set_global_clipnorm(clipnorm);
    return copy;
  }

  //! Keras' `weight_decay` (0, the default of every optimizer but AdamW: no decay).
  double weight_decay() const { return weight_decay_; }
  //! Errors: kdist::ValueError for a negative or non-finite value.
  void set_weight_decay(double weight_decay) {
    check_weight_decay(who_, weight_decay);
    weight_decay_ = weight_decay;
  }
  //! A copy with weight_decay set, for one expression: `kdist::SGD(0.1).with_weight_decay(1e-4)`
  //! (Keras' `SGD(learning_rate=0.1, weight_decay=1e-4)`). Errors: as set_weight_decay.
  Derived with_weight_decay(double weight_decay) const {
    Derived copy = static_cast<const Derived&>(*this);
    copy.set_weight_decay(weight_decay);
    return copy;
  }
  //! Keras' `exclude_from_weight_decay(var_names=...)`: a variable whose name (the last part of
  //! its path: "kernel", "bias") contains any of `var_names` is not decayed. kdist matches plain
  //! substrings where Keras reads each name as a regular expression (the same for names without
  //! regex characters). Replaces an earlier list; an empty list excludes nothing. Errors:
  //! kdist::ValueError for an empty string (it would match every variable).
  void exclude_from_weight_decay(std::vector<std::string> var_names) {
    for (const auto& n : var_names) {
      if (n.empty()) {
        throw ValueError(std::string("kdist::") + who_ +
                         "::exclude_from_weight_decay: an empty name matches every variable; to "
                         "turn weight decay off use weight_decay 0");
      }
    }
    excluded_ = std::move(var_names);
  }
  //! The names given to exclude_from_weight_decay.
  const std::vector<std::string>& excluded_from_weight_decay() const { return excluded_; }
  //! Whether the variable at `variable_path` ("d1/bias") is decayed: weight_decay > 0 and its
  //! name contains none of the excluded names (Keras' `_use_weight_decay`).
  bool uses_weight_decay(std::string_view variable_path) const {
    if (weight_decay_ == 0.0) return false;
    const auto slash = variable_path.rfind('/');
    const std::string_view name =
        slash == std::string_view::npos ? variable_path : variable_path.substr(slash + 1);
    for (const auto& n : excluded_) {
      if (name.find(n) != std::string_view::npos) return false;
    }
    return true;
  }

 protected:
  //! Errors: kdist::ValueError for a negative or non-finite learning rate or weight decay.
  OptimizerBase(const char* who, double learning_rate, double weight_decay = 0.0)
      : who_(who), learning_rate_(learning_rate), weight_decay_(weight_decay) {
    check_learning_rate(who, learning_rate);
    check_weight_decay(who, weight_decay);
  }
  const char* who() const { return who_; }
  //! Appends ("global_clipnorm", value) to a config when it is set.
  void add_global_clipnorm_to(std::vector<std::pair<std::string, double>>& config) const {
    if (global_clipnorm_) config.emplace_back("global_clipnorm", *global_clipnorm_);
  }
  //! Keras' decoupled weight decay of one variable's block, `p -= p * weight_decay * lr`, in a pass
  //! of its own (Adam fuses it into its step), before the step as Keras' apply() does.
  template <class PV, class Backend>
  void apply_weight_decay(const PV& param, Backend) const {
    using T = std::remove_const_t<typename PV::value_type>;
    weight_decay_kernel<Backend>(param, static_cast<T>(weight_decay_),
                                 static_cast<T>(learning_rate_));
  }

 private:
  static void check_weight_decay(const char* who, double weight_decay) {
    if (!(weight_decay >= 0.0) || !std::isfinite(weight_decay)) {
      throw ValueError(std::string("kdist::") + who + ": weight_decay is " +
                       number_string(weight_decay) +
                       "; it must be a finite number >= 0 (0: no decay; Keras' AdamW takes 0.004)");
    }
  }

  const char* who_;
  double learning_rate_;
  double weight_decay_;
  std::int64_t iterations_ = 0;
  //! read_iterations_from's pointer; copies start without it.
  struct NotCopied {
    const std::int64_t* at = nullptr;
    NotCopied() = default;
    NotCopied(const NotCopied&) noexcept {}
    NotCopied& operator=(const NotCopied&) noexcept {
      at = nullptr;
      return *this;
    }
  } iterations_at_;
  std::optional<double> global_clipnorm_;
  std::vector<std::string> excluded_;
};

//! Keras' Adam step size at step `t` (1 for the first): `lr * sqrt(1 - beta_2^t) / (1 - beta_1^t)`,
//! in `T`; on the host and in the kernels that read `t` from device memory alike.
template <class T>
KOKKOS_INLINE_FUNCTION T adam_step_size(T lr, T beta_1, T beta_2, T t) {
  using kdist::detail::kmath::pow;
  using kdist::detail::kmath::sqrt;
  return lr * sqrt(T(1) - pow(beta_2, t)) / (T(1) - pow(beta_1, t));
}

//! The Adam step of Keras (kdist::Adam, kdist::AdamW) with `alpha` the bias-corrected step size
//! (on the device, computed by each thread from the completed steps at `iterations_at` when it is
//! given, with betas 1 - one_minus_b1 and 1 - one_minus_b2: see adam_step_size); with `decay`,
//! first Keras' decoupled weight decay `p -= p * weight_decay * lr`
//! (BaseOptimizer._apply_weight_decay), in the same pass.
template <class Backend, class PV, class GV, class MV, class VV>
void adam_kernel(const PV& param, const GV& grad, const MV& m, const VV& v, std::size_t n,
                 typename PV::non_const_value_type alpha, const std::int64_t* iterations_at,
                 typename PV::non_const_value_type beta_1, typename PV::non_const_value_type beta_2,
                 typename PV::non_const_value_type one_minus_b1,
                 typename PV::non_const_value_type one_minus_b2,
                 typename PV::non_const_value_type eps, bool decay,
                 typename PV::non_const_value_type weight_decay,
                 typename PV::non_const_value_type lr) {
  using T = typename PV::non_const_value_type;
  constexpr bool eigen = ops::detail::check_backend<Backend, PV, GV, MV, VV>();
  if (n == 0) return;
  if constexpr (eigen) {
    auto pa = flat_array(param);
    auto ga = flat_array(grad);
    auto ma = flat_array(m);
    auto va = flat_array(v);
    // Blocks of 2048 elements (32 KiB of the four arrays in float): the statements below read
    // and write each block while it is in cache, one pass over memory instead of three, and the
    // rank's threads (OMP_NUM_THREADS) share the blocks.
    ops::detail::for_host_blocks(n, 2048, [&](std::uint64_t begin, std::uint64_t count) {
      const auto b = static_cast<Eigen::Index>(begin);
      const auto c = static_cast<Eigen::Index>(count);
      auto p = pa.segment(b, c);
      auto mm = ma.segment(b, c);
      auto vv = va.segment(b, c);
      const auto g = ga.segment(b, c);
      if (decay) p -= (p * weight_decay) * lr;
      mm += (g - mm) * one_minus_b1;
      vv += (g.square() - vv) * one_minus_b2;
      p -= (mm * alpha) / (vv.sqrt() + eps);
    });
  } else {
    auto p = flat_view(param);
    auto g = flat_view(grad);
    auto mf = flat_view(m);
    auto vf = flat_view(v);
    Kokkos::parallel_for(
        "kdist::Adam::update", ops::detail::range<PV>(n), KOKKOS_LAMBDA(const std::int64_t i) {
          const T a = iterations_at != nullptr
                          ? adam_step_size(lr, beta_1, beta_2, static_cast<T>(*iterations_at + 1))
                          : alpha;
          T pi = p(i);
          if (decay) pi -= pi * weight_decay * lr;
          const T gi = g(i);
          const T mi = mf(i) + (gi - mf(i)) * one_minus_b1;
          const T vi = vf(i) + (gi * gi - vf(i)) * one_minus_b2;
          mf(i) = mi;
          vf(i) = vi;
          p(i) = pi - (mi * a) / (kdist::detail::kmath::sqrt(vi) + eps);
        });
  }
}

}  // namespace detail

//! Keras' SGD: without momentum `p -= lr * g`; with momentum `v = momentum * v - lr * g`, then
//! `p += v` (or, Nesterov, `p += momentum * v - lr * g`). Defaults as Keras: lr 0.01, momentum 0.
class SGD : public detail::OptimizerBase<SGD> {
 public:
  //! Errors: kdist::ValueError if `momentum` is outside [0, 1] (Keras' check) or the learning
  //! rate is negative or not finite.
  explicit SGD(double learning_rate = 0.01, double momentum = 0.0, bool nesterov = false)
      : OptimizerBase("SGD", learning_rate), momentum_(momentum), nesterov_(nesterov) {
    if (!(momentum >= 0.0 && momentum <= 1.0)) {
      throw ValueError("kdist::SGD: momentum is " + std::to_string(momentum) +
                       "; `momentum` must be a float between [0, 1]");
    }
  }

  double momentum() const { return momentum_; }
  bool nesterov() const { return nesterov_; }
  //! Whether `update` needs a velocity slot (momentum != 0).
  bool needs_velocity() const { return momentum_ != 0.0; }
  //! The class name, as checkpoints record it (Keras writes it in snake case: "sgd").
  std::string name() const { return "SGD"; }
  //! Its state: with momentum, one slot, Keras' "momentum" (the velocity); else none.
  OptimizerSlots slots() const {
    return needs_velocity() ? OptimizerSlots{{"momentum"}} : OptimizerSlots{};
  }
  //! How many state Views `update` needs per variable: 1 (the velocity) with momentum, else 0.
  std::size_t slot_count() const { return slots().size(); }
  //! Keras' config, as checkpoints record it.
  std::vector<std::pair<std::string, double>> hyperparameters() const {
    std::vector<std::pair<std::string, double>> config = {{"learning_rate", learning_rate()},
                                                          {"momentum", momentum_},
                                                          {"nesterov", nesterov_ ? 1.0 : 0.0}};
    if (weight_decay() != 0.0) config.emplace_back("weight_decay", weight_decay());
    add_global_clipnorm_to(config);
    return config;
  }
  //! One variable's step with its slots as slots() declares them (none, or the velocity), decayed
  //! first when the weight decay is not 0.
  template <class PV, class GV, class SV>
  void update_step(const PV& param, const GV& grad, std::span<const SV> state) const {
    step(param, grad, state, weight_decay() != 0.0);
  }
  //! The step of the variable at `variable_path`: decayed first unless exclude_from_weight_decay
  //! names it (what kdist::Sequential calls).
  template <class PV, class GV, class SV>
  void update_step(const PV& param, const GV& grad, std::span<const SV> state,
                   std::string_view variable_path) const {
    step(param, grad, state, uses_weight_decay(variable_path));
  }

  //! Updates `param` from `grad` (momentum 0). Errors: kdist::ValueError if the optimizer has
  //! momentum (use the overload with a velocity), or for a shape mismatch.
  template <class PV, class GV, class Backend = ops::AutoBackend>
  requires(!Kokkos::is_view<Backend>::value) void update(const PV& param, const GV& grad,
                                                         Backend b = {}) const {
    if (needs_velocity()) {
      throw ValueError("kdist::SGD::update: this SGD has momentum " + std::to_string(momentum_) +
                       "; pass a velocity View (kdist::make_slot(param, label))");
    }
    update(param, grad, param, b);
  }

  //! Updates `param` from `grad` with its `velocity` slot (unused, and may be any View of the
  //! parameter's shape, when momentum is 0). Errors: kdist::ValueError for a shape mismatch.
  template <class PV, class GV, class MV, class Backend = ops::AutoBackend>
  requires(Kokkos::is_view<MV>::value) void update(const PV& param, const GV& grad,
                                                   const MV& velocity, Backend = {}) const {
    static_assert(!std::is_const_v<typename PV::value_type>,
                  "kdist::SGD::update: the parameter View must not be const");
    constexpr bool eigen = ops::detail::check_backend<Backend, PV, GV, MV>();
    using T = std::remove_const_t<typename PV::value_type>;
    const std::size_t n = detail::check_slot("SGD", "the gradient", param, grad);
    detail::check_slot("SGD", "the parameter", param, param);
    if (needs_velocity()) detail::check_slot("SGD", "the velocity", param, velocity);
    const T lr = static_cast<T>(learning_rate());
    const T mu = static_cast<T>(momentum_);
    const bool momentum = needs_velocity();
    const bool nesterov = nesterov_;
    if (n == 0) return;
    if constexpr (eigen) {
      auto p = detail::flat_array(param);
      auto g = detail::flat_array(grad);
      if (!momentum) {
        p -= g * lr;
      } else {
        auto m = detail::flat_array(velocity);
        m = m * mu - g * lr;
        if (nesterov)
          p += m * mu - g * lr;
        else
          p += m;
      }
    } else {
      auto p = detail::flat_view(param);
      auto g = detail::flat_view(grad);
      auto m = detail::flat_view(velocity);
      Kokkos::parallel_for(
          "kdist::SGD::update", ops::detail::range<PV>(n), KOKKOS_LAMBDA(const std::int64_t i) {
            if (!momentum) {
              p(i) -= g(i) * lr;
            } else {
              const T v = m(i) * mu - g(i) * lr;
              m(i) = v;
              p(i) += nesterov ? v * mu - g(i) * lr : v;
            }
          });
    }
  }

 private:
  template <class PV, class GV, class SV>
  void step(const PV& param, const GV& grad, std::span<const SV> state, bool decay) const {
    detail::check_slot_count("SGD", state.size(), slot_count());
    if (decay) apply_weight_decay(param, ops::AutoBackend{});
    if (needs_velocity()) {
      update(param, grad, state[0]);
    } else {
      update(param, grad);
    }
  }

  double momentum_;
  bool nesterov_;
};

namespace detail {

//! Keras 3's Adam step and its decoupled weight decay, shared by kdist::Adam and kdist::AdamW
//! (Keras' AdamW is Adam with a weight decay: its own class only for its defaults and name). With
//! t = iterations() + 1, computed in the parameter's type: `p -= p * weight_decay * lr` when the
//! variable is decayed (Keras' BaseOptimizer._apply_weight_decay, before the step), then
//! `lr_t = lr * sqrt(1 - beta_2^t) / (1 - beta_1^t)`, `m += (g - m) * (1 - beta_1)`,
//! `v += (g^2 - v) * (1 - beta_2)`, `p -= lr_t * m / (sqrt(v) + epsilon)`, in one pass. Slots:
//! "momentum" (m) and "velocity" (v), both of a variable in turn in a Keras file. The decay is
//! elementwise too, so a shard decays exactly like the corresponding elements of the full variable.
template <class Derived>
class AdamFamily : public OptimizerBase<Derived> {
  using Base = OptimizerBase<Derived>;

 public:
  double beta_1() const { return beta_1_; }
  double beta_2() const { return beta_2_; }
  double epsilon() const { return epsilon_; }
  //! Its state: Keras' "momentum" (m) and "velocity" (v), both of a variable in turn in a Keras
  //! file (`add_optimizer_variables(vars, ["momentum", "velocity"])`).
  OptimizerSlots slots() const { return {{"momentum", "velocity"}, {{"momentum", "velocity"}}}; }
  //! How many state Views `update` needs per variable: 2 (`m` and `v`).
  std::size_t slot_count() const { return slots().size(); }

  //! One variable's step with its slots as slots() declares them (m, v), decayed when the
  //! weight decay is not 0.
  template <class PV, class GV, class SV>
  void update_step(const PV& param, const GV& grad, std::span<const SV> state) const {
    check_slot_count(this->who(), state.size(), slot_count());
    step(param, grad, state[0], state[1], this->weight_decay() != 0.0, ops::AutoBackend{});
  }
  //! The step of the variable at `variable_path`: decayed unless exclude_from_weight_decay names
  //! it (what kdist::Sequential calls).
  template <class PV, class GV, class SV>
  void update_step(const PV& param, const GV& grad, std::span<const SV> state,
                   std::string_view variable_path) const {
    check_slot_count(this->who(), state.size(), slot_count());
    step(param, grad, state[0], state[1], this->uses_weight_decay(variable_path),
         ops::AutoBackend{});
  }

  //! The bias-corrected step size of the current step, `lr * sqrt(1 - b2^t) / (1 - b1^t)`, in `T`.
  template <class T>
  T step_size() const {
    return adam_step_size(static_cast<T>(this->learning_rate()), static_cast<T>(beta_1_),
                          static_cast<T>(beta_2_), static_cast<T>(this->iterations() + 1));
  }

  //! Updates `param` from `grad` and its first/second moment slots `m`, `v` (same shape; create
  //! them with kdist::make_slot), decayed first when the weight decay is not 0. Errors:
  //! kdist::ValueError for a shape mismatch or a non-contiguous View.
  template <class PV, class GV, class MV, class VV, class Backend = ops::AutoBackend>
  void update(const PV& param, const GV& grad, const MV& m, const VV& v, Backend b = {}) const {
    step(param, grad, m, v, this->weight_decay() != 0.0, b);
  }

 protected:
  //! Errors: kdist::ValueError if the learning rate is negative or not finite, weight_decay is
  //! negative or not finite, a beta is outside [0, 1), or epsilon is negative.
  AdamFamily(const char* who, double learning_rate, double weight_decay, double beta_1,
             double beta_2, double epsilon)
      : Base(who, learning_rate, weight_decay),
        beta_1_(beta_1),
        beta_2_(beta_2),
        epsilon_(epsilon) {
    const std::string op = std::string("kdist::") + who + ": ";
    for (const auto& [name, beta] : {std::pair{"beta_1", beta_1}, std::pair{"beta_2", beta_2}}) {
      if (!(beta >= 0.0 && beta < 1.0)) {
        throw ValueError(op + name + " is " + number_string(beta) + "; it must be in [0, 1)");
      }
    }
    if (!(epsilon >= 0.0)) {
      throw ValueError(op + "epsilon is " + number_string(epsilon) + "; it must be >= 0");
    }
  }

  //! Keras' config, as checkpoints record it; the weight decay when `with_decay` or not 0.
  std::vector<std::pair<std::string, double>> config(bool with_decay) const {
    std::vector<std::pair<std::string, double>> c = {{"learning_rate", this->learning_rate()}};
    if (with_decay || this->weight_decay() != 0.0) {
      c.emplace_back("weight_decay", this->weight_decay());
    }
    c.emplace_back("beta_1", beta_1_);
    c.emplace_back("beta_2", beta_2_);
    c.emplace_back("epsilon", epsilon_);
    this->add_global_clipnorm_to(c);
    return c;
  }

 private:
  template <class PV, class GV, class MV, class VV, class Backend>
  void step(const PV& param, const GV& grad, const MV& m, const VV& v, bool decay, Backend) const {
    static_assert(!std::is_const_v<typename PV::value_type> &&
                      !std::is_const_v<typename MV::value_type> &&
                      !std::is_const_v<typename VV::value_type>,
                  "kdist::Adam / kdist::AdamW update: the parameter and state Views must not "
                  "be const");
    using T = std::remove_const_t<typename PV::value_type>;
    const char* op = this->who();
    const std::size_t n = check_slot(op, "the gradient", param, grad);
    check_slot(op, "the parameter", param, param);
    check_slot(op, "m (first moment)", param, m);
    check_slot(op, "v (second moment)", param, v);
    adam_kernel<Backend>(param, grad, m, v, n, step_size<T>(), this->iterations_at(),
                         static_cast<T>(beta_1_), static_cast<T>(beta_2_),
                         static_cast<T>(1.0 - beta_1_), static_cast<T>(1.0 - beta_2_),
                         static_cast<T>(epsilon_), decay, static_cast<T>(this->weight_decay()),
                         static_cast<T>(this->learning_rate()));
  }

  double beta_1_;
  double beta_2_;
  double epsilon_;
};

}  // namespace detail

//! Keras 3's Adam (amsgrad off): detail::AdamFamily, without weight decay unless given one
//! (`kdist::Adam(1e-3).with_weight_decay(0.01)`, Keras' `Adam(weight_decay=0.01)`).
//! Defaults as Keras: lr 0.001, beta_1 0.9, beta_2 0.999, epsilon 1e-7.
class Adam : public detail::AdamFamily<Adam> {
 public:
  //! Errors: kdist::ValueError if a beta is outside [0, 1), epsilon is negative, or the learning
  //! rate is negative or not finite.
  explicit Adam(double learning_rate = 0.001, double beta_1 = 0.9, double beta_2 = 0.999,
                double epsilon = 1e-7)
      : AdamFamily("Adam", learning_rate, 0.0, beta_1, beta_2, epsilon) {}
  //! The class name, as checkpoints record it (Keras writes it in snake case: "adam").
  std::string name() const { return "Adam"; }
  //! Keras' config, as checkpoints record it.
  std::vector<std::pair<std::string, double>> hyperparameters() const { return config(false); }
};

//! Keras 3's AdamW (keras/src/optimizers/adamw.py, amsgrad off): Keras' Adam with decoupled weight
//! decay (detail::AdamFamily). Defaults as Keras: lr 0.001, weight_decay 0.004, beta_1 0.9,
//! beta_2 0.999, epsilon 1e-7.
//! \code
//! kdist::AdamW opt(1e-3, 0.01);
//! opt.exclude_from_weight_decay({"bias"});  // every variable named "...bias..." keeps its value
//! model.compile(kdist::Loss::categorical_crossentropy, opt);
//! \endcode
class AdamW : public detail::AdamFamily<AdamW> {
 public:
  //! Errors: kdist::ValueError if the learning rate is negative or not finite, weight_decay is
  //! negative or not finite, a beta is outside [0, 1), or epsilon is negative.
  explicit AdamW(double learning_rate = 0.001, double weight_decay = 0.004, double beta_1 = 0.9,
                 double beta_2 = 0.999, double epsilon = 1e-7)
      : AdamFamily("AdamW", learning_rate, weight_decay, beta_1, beta_2, epsilon) {}
  //! The class name, as checkpoints record it; a Keras weights file writes Keras' name of it,
  //! "adam_w".
  std::string name() const { return "AdamW"; }
  //! Keras' config, as checkpoints record it.
  std::vector<std::pair<std::string, double>> hyperparameters() const { return config(true); }
};

//! Keras 3's RMSprop (keras/src/optimizers/rmsprop.py), computed in the parameter's type:
//! `velocity = rho * velocity + (1 - rho) * g^2`; centered: `average_gradient = rho *
//! average_gradient + (1 - rho) * g` and `denominator = velocity - average_gradient^2 + epsilon`,
//! else `denominator = velocity + epsilon`; `increment = lr * g / sqrt(denominator)`; with
//! momentum > 0: `momentum_buffer = momentum * momentum_buffer + increment` and
//! `p -= momentum_buffer`, else `p -= increment`. No bias correction: the step does not depend
//! on `iterations()`.
//! Defaults as Keras: lr 0.001, rho 0.9, momentum 0, epsilon 1e-7, centered false.
//! Slots per variable (`slot_count()`): velocity; average_gradient if centered; the momentum
//! buffer if momentum > 0 (Keras' `velocity`, `average_gradient` and `momentum` variables).
class RMSprop : public detail::OptimizerBase<RMSprop> {
 public:
  //! Errors: kdist::ValueError if the learning rate is negative or not finite, `rho` is outside
  //! [0, 1), `momentum` is negative or not finite, or `epsilon` is negative or NaN.
  explicit RMSprop(double learning_rate = 0.001, double rho = 0.9, double momentum = 0.0,
                   double epsilon = 1e-7, bool centered = false)
      : OptimizerBase("RMSprop", learning_rate),
        rho_(rho),
        momentum_(momentum),
        epsilon_(epsilon),
        centered_(centered) {
    if (!(rho >= 0.0 && rho < 1.0)) {
      throw ValueError("kdist::RMSprop: rho is " + detail::number_string(rho) +
                       "; it must be in [0, 1)");
    }
    if (!(momentum >= 0.0) || !std::isfinite(momentum)) {
      throw ValueError("kdist::RMSprop: momentum is " + detail::number_string(momentum) +
                       "; it must be a finite number >= 0");
    }
    if (!(epsilon >= 0.0)) {
      throw ValueError("kdist::RMSprop: epsilon is " + detail::number_string(epsilon) +
                       "; it must be >= 0");
    }
  }

  double rho() const { return rho_; }
  double momentum() const { return momentum_; }
  double epsilon() const { return epsilon_; }
  bool centered() const { return centered_; }
  //! Whether `update` needs an average_gradient slot (centered).
  bool needs_average_gradient() const { return centered_; }
  //! Whether `update` needs a momentum buffer slot (momentum > 0).
  bool needs_momentum() const { return momentum_ > 0.0; }
  //! The class name, as checkpoints record it (Keras writes it in snake case: "rm_sprop").
  std::string name() const { return "RMSprop"; }
  //! Its state: "velocity", "average_gradient" if centered, "momentum" if momentum > 0; in a
  //! Keras file every velocity, then every momentum, then every average gradient (Keras' build).
  OptimizerSlots slots() const {
    OptimizerSlots s{{"velocity"}, {{"velocity"}}};
    if (needs_average_gradient()) s.names.push_back("average_gradient");
    if (needs_momentum()) {
      s.names.push_back("momentum");
      s.keras_order.push_back({"momentum"});
    }
    if (needs_average_gradient()) s.keras_order.push_back({"average_gradient"});
    return s;
  }
  //! How many state Views `update` needs per variable: 1 (velocity), + 1 if centered, + 1 if
  //! momentum > 0.
  std::size_t slot_count() const { return slots().size(); }
  //! Keras' config, as checkpoints record it.
  std::vector<std::pair<std::string, double>> hyperparameters() const {
    std::vector<std::pair<std::string, double>> config = {{"learning_rate", learning_rate()},
                                                          {"rho", rho_},
                                                          {"momentum", momentum_},
                                                          {"epsilon", epsilon_},
                                                          {"centered", centered_ ? 1.0 : 0.0}};
    if (weight_decay() != 0.0) config.emplace_back("weight_decay", weight_decay());
    add_global_clipnorm_to(config);
    return config;
  }

  //! One variable's step with its slots as slots() declares them (velocity, [average_gradient],
  //! [momentum]), decayed first when the weight decay is not 0.
  template <class PV, class GV, class SV>
  void update_step(const PV& param, const GV& grad, std::span<const SV> state) const {
    step(param, grad, state, weight_decay() != 0.0);
  }
  //! The step of the variable at `variable_path`: decayed first unless exclude_from_weight_decay
  //! names it (what kdist::Sequential calls).
  template <class PV, class GV, class SV>
  void update_step(const PV& param, const GV& grad, std::span<const SV> state,
                   std::string_view variable_path) const {
    step(param, grad, state, uses_weight_decay(variable_path));
  }
  //! Updates `param` from `grad` with its `velocity` slot (plain RMSprop: not centered, momentum
  //! 0). Errors: kdist::ValueError if the optimizer is centered or has momentum (use the overload
  //! with all slots), or for a shape mismatch.
  template <class PV, class GV, class VV, class Backend = ops::AutoBackend>
  requires(!Kokkos::is_view<Backend>::value) void update(const PV& param, const GV& grad,
                                                         const VV& velocity, Backend b = {}) const {
    if (needs_average_gradient() || needs_momentum()) {
      std::string what = needs_average_gradient() ? "is centered" : "";
      if (needs_momentum()) {
        what += std::string(what.empty() ? "" : " and ") + "has momentum " +
                detail::number_string(momentum_);
      }
      throw ValueError("kdist::RMSprop::update: this RMSprop " + what +
                       "; pass all its slots: update(param, grad, velocity, average_gradient, "
                       "momentum_buffer) (kdist::make_slot(param, label); slot_count() says how "
                       "many are used)");
    }
    update(param, grad, velocity, velocity, velocity, b);
  }

  //! Updates `param` from `grad` with its `velocity`, `average_gradient` (used when centered) and
  //! `momentum_buffer` (used when momentum > 0) slots; an unused slot is not touched and may be
  //! any View of the parameter's rank and scalar type (e.g. `velocity` again). Errors:
  //! kdist::ValueError for a shape mismatch, a non-contiguous View, or two used slots that are the
  //! same memory.
  template <class PV, class GV, class VV, class AV, class MV, class Backend = ops::AutoBackend>
  requires(Kokkos::is_view<MV>::value) void update(const PV& param, const GV& grad,
                                                   const VV& velocity, const AV& average_gradient,
                                                   const MV& momentum_buffer, Backend = {}) const {
    static_assert(
        !std::is_const_v<typename PV::value_type> && !std::is_const_v<typename VV::value_type> &&
            !std::is_const_v<typename AV::value_type> && !std::is_const_v<typename MV::value_type>,
        "kdist::RMSprop::update: the parameter and state Views must not be const");
    constexpr bool eigen = ops::detail::check_backend<Backend, PV, GV, VV, AV, MV>();
    using T = std::remove_const_t<typename PV::value_type>;
    const bool centered = needs_average_gradient();
    const bool use_momentum = needs_momentum();
    const std::size_t n = detail::check_slot("RMSprop", "the gradient", param, grad);
    detail::check_slot("RMSprop", "the parameter", param, param);
    detail::check_slot("RMSprop", "the velocity", param, velocity);
    if (centered) detail::check_slot("RMSprop", "the average_gradient", param, average_gradient);
    if (use_momentum) detail::check_slot("RMSprop", "the momentum buffer", param, momentum_buffer);
    if (n != 0) {
      const void* v = velocity.data();
      const void* a = average_gradient.data();
      const void* m = momentum_buffer.data();
      const void* p = param.data();
      if (v == p || (centered && (a == v || a == p)) ||
          (use_momentum && (m == v || m == p || (centered && m == a)))) {
        throw ValueError(
            "kdist::RMSprop::update: two of the parameter and its used slots (velocity, "
            "average_gradient, momentum buffer) are the same memory; give each slot its own View "
            "(kdist::make_slot(param, label))");
      }
    }
    const T lr = static_cast<T>(learning_rate());
    const T rho = static_cast<T>(rho_);
    const T one_minus_rho = static_cast<T>(1.0 - rho_);
    const T mu = static_cast<T>(momentum_);
    const T eps = static_cast<T>(epsilon_);
    if (n == 0) return;
    if constexpr (eigen) {
      auto pa = detail::flat_array(param);
      auto ga = detail::flat_array(grad);
      auto va = detail::flat_array(velocity);
      auto ma = detail::flat_array(momentum_buffer);
      va = va * rho + ga.square() * one_minus_rho;
      // The same operations in the same order as the Kokkos kernel and Keras.
      auto step = [&](const auto& denominator) {
        if (use_momentum) {
          ma = ma * mu + (ga * lr) / denominator.sqrt();
          pa -= ma;
        } else {
          pa -= (ga * lr) / denominator.sqrt();
        }
      };
      if (centered) {
        auto aa = detail::flat_array(average_gradient);
        aa = aa * rho + ga * one_minus_rho;
        step(va - aa.square() + eps);
      } else {
        step(va + eps);
      }
    } else {
      auto p = detail::flat_view(param);
      auto g = detail::flat_view(grad);
      auto vf = detail::flat_view(velocity);
      auto af = detail::flat_view(average_gradient);
      auto mf = detail::flat_view(momentum_buffer);
      Kokkos::parallel_for(
          "kdist::RMSprop::update", ops::detail::range<PV>(n), KOKKOS_LAMBDA(const std::int64_t i) {
            const T gi = g(i);
            const T vi = vf(i) * rho + (gi * gi) * one_minus_rho;
            vf(i) = vi;
            T denominator = vi + eps;
            if (centered) {
              const T ai = af(i) * rho + gi * one_minus_rho;
              af(i) = ai;
              denominator = vi - ai * ai + eps;
            }
            const T increment = (gi * lr) / kdist::detail::kmath::sqrt(denominator);
            if (use_momentum) {
              const T mi = mf(i) * mu + increment;
              mf(i) = mi;
              p(i) -= mi;
            } else {
              p(i) -= increment;
            }
          });
    }
  }

 private:
  template <class PV, class GV, class SV>
  void step(const PV& param, const GV& grad, std::span<const SV> state, bool decay) const {
    detail::check_slot_count("RMSprop", state.size(), slot_count());
    if (decay) apply_weight_decay(param, ops::AutoBackend{});
    const bool centered = needs_average_gradient();
    const SV& average = centered ? state[1] : state[0];
    const SV& momentum = needs_momentum() ? state[centered ? 2 : 1] : state[0];
    update(param, grad, state[0], average, momentum);
  }

  double rho_;
  double momentum_;
  double epsilon_;
  bool centered_;
};

}  // namespace kdist
