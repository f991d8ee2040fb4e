#pragma once
//! \file ops/optimizers.hpp
//! `kdist::SGD` and `kdist::Adam` with Keras 3's defaults and update formulas, operating
//! elementwise on one parameter View, its gradient View and state ("slot") Views of the same shape.
//! Because the update is elementwise, a shard of a variable with the same-shaped shards of its
//! gradient and state is updated exactly like the corresponding elements of the full variable:
//! the optimizer state is sharded exactly like the parameter.
//!
//! One training step: call `update` once per variable, then `finish_step()` once (Keras'
//! `optimizer.iterations += 1`). `update` uses `iterations() + 1` as Keras' local step.

#include <Eigen/Core>
#include <Kokkos_Core.hpp>
#include <cmath>
#include <cstdint>
#include <kdist/detail/kokkos_math.hpp>
#include <kdist/error.hpp>
#include <kdist/ops/backend.hpp>
#include <kdist/ops/detail/views.hpp>
#include <string>
#include <type_traits>

namespace kdist {

//! A zero-initialised View shaped, laid out and placed like `param`: the optimizer state of a
//! (shard of a) variable. Example: `auto m = kdist::make_slot(kernel, "d1/kernel/m");`.
template <class PV>
auto make_slot(const PV& param, const std::string& label) {
  using Slot = Kokkos::View<typename PV::non_const_data_type, typename PV::array_layout,
                            typename PV::memory_space>;
  return Slot(Kokkos::view_alloc(label), param.layout());
}

namespace detail {

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

}  // namespace detail

//! Keras' SGD: without momentum `p -= lr * g`; with momentum `v = momentum * v - lr * g`, then
//! `p += v` (or, Nesterov, `p += momentum * v - lr * g`). Defaults as Keras: lr 0.01, momentum 0.
class SGD {
 public:
  //! Errors: kdist::ValueError if `momentum` is outside [0, 1] (Keras' check) or the learning
  //! rate is negative or not finite.
  explicit SGD(double learning_rate = 0.01, double momentum = 0.0, bool nesterov = false)
      : learning_rate_(learning_rate), momentum_(momentum), nesterov_(nesterov) {
    detail::check_learning_rate("SGD", learning_rate);
    if (!(momentum >= 0.0 && momentum <= 1.0)) {
      throw ValueError("kdist::SGD: momentum is " + std::to_string(momentum) +
                       "; `momentum` must be a float between [0, 1]");
    }
  }

  double learning_rate() const { return learning_rate_; }
  //! Errors: kdist::ValueError for a negative or non-finite rate.
  void set_learning_rate(double lr) {
    detail::check_learning_rate("SGD", lr);
    learning_rate_ = lr;
  }
  double momentum() const { return momentum_; }
  bool nesterov() const { return nesterov_; }
  //! Whether `update` needs a velocity slot (momentum != 0).
  bool needs_velocity() const { return momentum_ != 0.0; }
  //! Completed steps (Keras' `optimizer.iterations`).
  std::int64_t iterations() const { return iterations_; }
  void set_iterations(std::int64_t n) { iterations_ = n; }
  //! Ends a training step (after `update` of every variable).
  void finish_step() { ++iterations_; }

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
    const T lr = static_cast<T>(learning_rate_);
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
  double learning_rate_;
  double momentum_;
  bool nesterov_;
  std::int64_t iterations_ = 0;
};

//! Keras 3's Adam (amsgrad off). With t = iterations() + 1, computed in the parameter's type:
//! `lr_t = lr * sqrt(1 - beta_2^t) / (1 - beta_1^t)`, `m += (g - m) * (1 - beta_1)`,
//! `v += (g^2 - v) * (1 - beta_2)`, `p -= lr_t * m / (sqrt(v) + epsilon)`.
//! Defaults as Keras: lr 0.001, beta_1 0.9, beta_2 0.999, epsilon 1e-7.
class Adam {
 public:
  //! Errors: kdist::ValueError if a beta is outside [0, 1), epsilon is negative, or the learning
  //! rate is negative or not finite.
  explicit Adam(double learning_rate = 0.001, double beta_1 = 0.9, double beta_2 = 0.999,
                double epsilon = 1e-7)
      : learning_rate_(learning_rate), beta_1_(beta_1), beta_2_(beta_2), epsilon_(epsilon) {
    detail::check_learning_rate("Adam", learning_rate);
    check_beta("beta_1", beta_1);
    check_beta("beta_2", beta_2);
    if (!(epsilon >= 0.0)) {
      throw ValueError("kdist::Adam: epsilon is " + std::to_string(epsilon) + "; it must be >= 0");
    }
  }

  double learning_rate() const { return learning_rate_; }
  //! Errors: kdist::ValueError for a negative or non-finite rate.
  void set_learning_rate(double lr) {
    detail::check_learning_rate("Adam", lr);
    learning_rate_ = lr;
  }
  double beta_1() const { return beta_1_; }
  double beta_2() const { return beta_2_; }
  double epsilon() const { return epsilon_; }
  //! Completed steps (Keras' `optimizer.iterations`).
  std::int64_t iterations() const { return iterations_; }
  void set_iterations(std::int64_t n) { iterations_ = n; }
  //! Ends a training step (after `update` of every variable).
  void finish_step() { ++iterations_; }

  //! The bias-corrected step size of the current step, `lr * sqrt(1 - b2^t) / (1 - b1^t)`, in `T`.
  template <class T>
  T step_size() const {
    const T t = static_cast<T>(iterations_ + 1);
    const T b1p = std::pow(static_cast<T>(beta_1_), t);
    const T b2p = std::pow(static_cast<T>(beta_2_), t);
    return static_cast<T>(learning_rate_) * std::sqrt(T(1) - b2p) / (T(1) - b1p);
  }

  //! Updates `param` from `grad` and its first/second moment slots `m`, `v` (same shape; create
  //! them with kdist::make_slot). Errors: kdist::ValueError for a shape mismatch or a
  //! non-contiguous View.
  template <class PV, class GV, class MV, class VV, class Backend = ops::AutoBackend>
  void update(const PV& param, const GV& grad, const MV& m, const VV& v, Backend = {}) const {
    static_assert(!std::is_const_v<typename PV::value_type> &&
                      !std::is_const_v<typename MV::value_type> &&
                      !std::is_const_v<typename VV::value_type>,
                  "kdist::Adam::update: the parameter and state Views must not be const");
    constexpr bool eigen = ops::detail::check_backend<Backend, PV, GV, MV, VV>();
    using T = std::remove_const_t<typename PV::value_type>;
    const std::size_t n = detail::check_slot("Adam", "the gradient", param, grad);
    detail::check_slot("Adam", "the parameter", param, param);
    detail::check_slot("Adam", "m (first moment)", param, m);
    detail::check_slot("Adam", "v (second moment)", param, v);
    const T alpha = step_size<T>();
    const T one_minus_b1 = static_cast<T>(1.0 - beta_1_);
    const T one_minus_b2 = static_cast<T>(1.0 - beta_2_);
    const T eps = static_cast<T>(epsilon_);
    if (n == 0) return;
    if constexpr (eigen) {
      auto pa = detail::flat_array(param);
      auto ga = detail::flat_array(grad);
      auto ma = detail::flat_array(m);
      auto va = detail::flat_array(v);
      ma += (ga - ma) * one_minus_b1;
      va += (ga.square() - va) * one_minus_b2;
      pa -= (ma * alpha) / (va.sqrt() + eps);
    } else {
      auto p = detail::flat_view(param);
      auto g = detail::flat_view(grad);
      auto mf = detail::flat_view(m);
      auto vf = detail::flat_view(v);
      Kokkos::parallel_for(
          "kdist::Adam::update", ops::detail::range<PV>(n), KOKKOS_LAMBDA(const std::int64_t i) {
            const T gi = g(i);
            const T mi = mf(i) + (gi - mf(i)) * one_minus_b1;
            const T vi = vf(i) + (gi * gi - vf(i)) * one_minus_b2;
            mf(i) = mi;
            vf(i) = vi;
            p(i) -= (mi * alpha) / (kdist::detail::kmath::sqrt(vi) + eps);
          });
    }
  }

 private:
  static void check_beta(const char* name, double beta) {
    if (!(beta >= 0.0 && beta < 1.0)) {
      throw ValueError(std::string("kdist::Adam: ") + name + " is " + std::to_string(beta) +
                       "; it must be in [0, 1)");
    }
  }

  double learning_rate_;
  double beta_1_;
  double beta_2_;
  double epsilon_;
  std::int64_t iterations_ = 0;
};

}  // namespace kdist
