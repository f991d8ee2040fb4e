#pragma once
//! \file ops/losses.hpp
//! Local losses of a classifier, as Keras 3 defines them, for a shard of the global batch.
//!
//! Each loss returns the local SUM (in double) of the per-example losses of its rows, and writes
//! the gradient of that sum with respect to its input, multiplied by the caller's `scale`. A
//! trainer passes `scale = 1 / global_batch` and divides the all-reduced sum by the global batch,
//! so the loss and the gradients are those of the mean over the GLOBAL batch, on any mesh.
//!
//! Targets are either integer class labels (a rank-1 View [rows], one-hot implied: Keras'
//! "sparse" losses) or a dense rank-2 View [rows, classes] of the predictions' scalar type.
//! Labels outside [0, classes) are a kdist::ValueError naming the row (Keras would silently count
//! them as a zero target).

#include <Eigen/Core>
#include <Kokkos_Core.hpp>
#include <cmath>
#include <cstdint>
#include <kdist/core/error.hpp>
#include <kdist/ops/backend.hpp>
#include <kdist/ops/detail/kokkos_math.hpp>
#include <kdist/ops/detail/views.hpp>
#include <string>
#include <type_traits>
#include <utility>

namespace kdist::ops {

//! Keras' default fuzz factor (`keras.config.epsilon()`), the clip of cross-entropy on
//! probabilities.
inline constexpr double keras_epsilon = 1e-7;

namespace detail {

template <class TV>
constexpr bool is_labels_v = static_cast<int>(TV::rank) == 1;

template <class R>
constexpr bool is_device_sum_v = Kokkos::is_view<R>::value;

//! Stores a reduction computed on the host into `result` (a double, or a rank-0 View).
template <class R>
void store_sum(R& result, double value) {
  if constexpr (is_device_sum_v<R>) {
    if constexpr (Kokkos::SpaceAccessibility<Kokkos::HostSpace,
                                             typename R::memory_space>::accessible) {
      result() = value;
    } else {
      Kokkos::deep_copy(result, value);  // only an empty block gets here on a device
    }
  } else {
    result = value;
  }
}

//! Checks the target against predictions `p` [rows, classes]; labels in range unless
//! `LabelRange` is false (the `_into` forms: first_invalid_label_into checks them on the device).
template <bool LabelRange = true, class PV, class TV>
void check_target(const char* op, const PV& p, const TV& target) {
  if constexpr (is_labels_v<TV>) {
    static_assert(check_labels<TV>());
    require_length(op, "labels", target, p.extent(0));
    if constexpr (!LabelRange) return;
    const auto classes = static_cast<std::int64_t>(p.extent(1));
    const auto rows = static_cast<std::int64_t>(p.extent(0));
    std::int64_t first_bad = rows;
    if constexpr (runs_on_host_v<TV>) {
      for (std::int64_t i = 0; i < rows; ++i) {
        const auto l = static_cast<std::int64_t>(target(i));
        if (l < 0 || l >= classes) {
          first_bad = i;
          break;
        }
      }
    } else {
      Kokkos::parallel_reduce(
          "kdist::ops::check_labels", range<TV>(target.extent(0)),
          KOKKOS_LAMBDA(const std::int64_t i, std::int64_t& bad) {
            const auto l = static_cast<std::int64_t>(target(i));
            if ((l < 0 || l >= classes) && i < bad) bad = i;
          },
          Kokkos::Min<std::int64_t>(first_bad));
    }
    if (first_bad < rows) {
      auto one = Kokkos::subview(target, std::make_pair(first_bad, first_bad + 1));
      auto host = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), one);
      throw ValueError(std::string("kdist::ops::") + op + ": label " +
                       std::to_string(static_cast<long long>(host(0))) + " at row " +
                       std::to_string(first_bad) + " is out of range [0, " +
                       std::to_string(classes) + ")");
    }
  } else {
    static_assert(check_matrix<TV>() && check_same_scalar<PV, TV>());
    require_shape(op, "the target", target, p.extent(0), p.extent(1));
  }
}

template <bool Grad, class PV, class GV>
void check_grad(const char* op, const PV& p, const GV& g) {
  if constexpr (Grad) {
    static_assert(check_matrix<GV>() && check_same_scalar<PV, GV>());
    static_assert(!std::is_const_v<typename GV::value_type>,
                  "kdist::ops: the gradient View must not be const");
    require_shape(op, "the gradient", g, p.extent(0), p.extent(1));
  }
}

//! Target of row i, column j inside a kernel: one-hot from integer labels, or the target
//! matrix. (A function, not an `if constexpr` in the kernel: nvcc's extended lambdas cannot first
//! capture a variable inside `if constexpr`.)
template <class T, class TV>
KOKKOS_INLINE_FUNCTION T target_at(const TV& target, std::int64_t i, std::int64_t j) {
  if constexpr (is_labels_v<TV>) {
    return static_cast<std::int64_t>(target(i)) == j ? T(1) : T(0);
  } else {
    return target(i, j);
  }
}

//! `g(i, j) = value` when the kernel computes a gradient (Grad), nothing otherwise (g is then the
//! prediction View, possibly const). A function for the reason given at target_at.
template <bool Grad, class GV, class T>
KOKKOS_INLINE_FUNCTION void store_grad(const GV& g, std::int64_t i, std::int64_t j, T value) {
  if constexpr (Grad) {
    g(i, j) = value;
  } else {
    (void)g, (void)i, (void)j, (void)value;
  }
}

// ---- mean squared error -------------------------------------------------------------------------

template <bool Grad, bool Eigen, class PV, class TV, class GV, class T, class R>
void mse_impl(const PV& p, const TV& target, const GV& g, T scale, R& result) {
  const auto cols = static_cast<std::int64_t>(p.extent(1));
  const auto rows = static_cast<std::int64_t>(p.extent(0));
  if (cols == 0 || rows == 0) return store_sum(result, 0.0);
  const T gscale = T(2) * scale / static_cast<T>(cols);
  const double inv_cols = 1.0 / static_cast<double>(cols);
  if constexpr (Eigen) {
    double total = 0.0;
    auto pm = eigen_map(p);
    for (Eigen::Index i = 0; i < pm.rows(); ++i) {
      if constexpr (is_labels_v<TV>) {
        const auto l = static_cast<Eigen::Index>(target(i));
        const T pl = pm(i, l);
        const double sq = static_cast<double>(pm.row(i).squaredNorm()) -
                          static_cast<double>(pl) * pl +
                          static_cast<double>(pl - T(1)) * (pl - T(1));
        total += sq * inv_cols;
        if constexpr (Grad) {
          auto gm = eigen_map(g);
          gm.row(i) = pm.row(i) * gscale;
          gm(i, l) = (pl - T(1)) * gscale;
        }
      } else {
        auto tm = eigen_map(target);
        total += static_cast<double>((pm.row(i) - tm.row(i)).squaredNorm()) * inv_cols;
        if constexpr (Grad) {
          auto gm = eigen_map(g);
          gm.row(i) = (pm.row(i) - tm.row(i)) * gscale;
        }
      }
    }
    store_sum(result, total);
  } else {
    Kokkos::parallel_reduce(
        "kdist::ops::mean_squared_error", range<PV>(p.extent(0)),
        KOKKOS_LAMBDA(const std::int64_t i, double& acc) {
          double row = 0.0;
          for (std::int64_t j = 0; j < cols; ++j) {
            const T d = p(i, j) - target_at<T>(target, i, j);
            row += static_cast<double>(d) * d;
            store_grad<Grad>(g, i, j, d * gscale);
          }
          acc += row * inv_cols;
        },
        result);
  }
}

// ---- softmax cross-entropy from logits (fused)
// ----------------------------------------------------

template <bool Grad, bool Eigen, class ZV, class TV, class GV, class T, class R>
void softmax_xent_impl(const ZV& z, const TV& target, const GV& g, T scale, R& result) {
  const auto cols = static_cast<std::int64_t>(z.extent(1));
  const auto rows = static_cast<std::int64_t>(z.extent(0));
  if (cols == 0 || rows == 0) return store_sum(result, 0.0);
  if constexpr (Eigen) {
    double total = 0.0;
    auto zm = eigen_map(z);
    for (Eigen::Index i = 0; i < zm.rows(); ++i) {
      const T mx = zm.row(i).maxCoeff();
      const T lse = mx + std::log((zm.row(i).array() - mx).exp().sum());
      if constexpr (is_labels_v<TV>) {
        const auto l = static_cast<Eigen::Index>(target(i));
        total += static_cast<double>(lse - zm(i, l));
        if constexpr (Grad) {
          auto gm = eigen_map(g);
          gm.row(i) = ((zm.row(i).array() - lse).exp() * scale).matrix();
          gm(i, l) -= scale;
        }
      } else {
        auto tm = eigen_map(target);
        const T tsum = tm.row(i).sum();
        total += static_cast<double>((tm.row(i).array() * (lse - zm.row(i).array())).sum());
        if constexpr (Grad) {
          auto gm = eigen_map(g);
          gm.row(i) =
              (((zm.row(i).array() - lse).exp() * tsum - tm.row(i).array()) * scale).matrix();
        }
      }
    }
    store_sum(result, total);
  } else {
    Kokkos::parallel_reduce(
        "kdist::ops::softmax_cross_entropy", range<ZV>(z.extent(0)),
        KOKKOS_LAMBDA(const std::int64_t i, double& acc) {
          T mx = z(i, 0);
          for (std::int64_t j = 1; j < cols; ++j) mx = z(i, j) > mx ? z(i, j) : mx;
          T s = 0;
          for (std::int64_t j = 0; j < cols; ++j) s += kdist::detail::kmath::exp(z(i, j) - mx);
          const T lse = mx + kdist::detail::kmath::log(s);
          T tsum = 0;
          double row = 0.0;
          for (std::int64_t j = 0; j < cols; ++j) {
            const T t = target_at<T>(target, i, j);
            tsum += t;
            row += static_cast<double>(t * (lse - z(i, j)));
          }
          if (Grad) {
            for (std::int64_t j = 0; j < cols; ++j) {
              const T t = target_at<T>(target, i, j);
              store_grad<Grad>(g, i, j,
                               (kdist::detail::kmath::exp(z(i, j) - lse) * tsum - t) * scale);
            }
          }
          acc += row;
        },
        result);
  }
}

// ---- cross-entropy from probabilities (Keras: normalise, clip, log)
// --------------------------------

template <bool Grad, bool Eigen, class PV, class TV, class GV, class T, class R>
void xent_impl(const PV& p, const TV& target, const GV& g, T scale, T eps, R& result) {
  const auto cols = static_cast<std::int64_t>(p.extent(1));
  const auto rows = static_cast<std::int64_t>(p.extent(0));
  if (cols == 0 || rows == 0) return store_sum(result, 0.0);
  const T lo = eps;
  const T hi = T(1) - eps;
  // Per row: s = sum p, q = p / s, c = clip(q, eps, 1 - eps), loss = -sum t log c.
  // d loss / d q_j = gq_j = -t_j / c_j where eps < q_j < 1 - eps, else 0;
  // d loss / d p_k = (gq_k - sum_j gq_j q_j) / s.
  if constexpr (Eigen) {
    double total = 0.0;
    auto pm = eigen_map(p);
    for (Eigen::Index i = 0; i < pm.rows(); ++i) {
      const T s = pm.row(i).sum();
      if constexpr (is_labels_v<TV>) {
        const auto l = static_cast<Eigen::Index>(target(i));
        const T q = pm(i, l) / s;
        const T c = q < lo ? lo : (q > hi ? hi : q);
        total -= std::log(static_cast<double>(c));
        if constexpr (Grad) {
          auto gm = eigen_map(g);
          const T gq = (q > lo && q < hi) ? -T(1) / c : T(0);
          // (gq * delta_lk - gq * q) / s
          const T common = -gq * q / s * scale;
          gm.row(i).setConstant(common);
          gm(i, l) += gq / s * scale;
        }
      } else {
        auto tm = eigen_map(target);
        auto q = pm.row(i).array() / s;
        auto c = q.max(lo).min(hi);
        total -= static_cast<double>((tm.row(i).array() * c.log()).sum());
        if constexpr (Grad) {
          auto gm = eigen_map(g);
          auto gq = (q > lo && q < hi).select(-tm.row(i).array() / c, T(0));
          const T dot = (gq * q).sum();
          gm.row(i) = ((gq - dot) / s * scale).matrix();
        }
      }
    }
    store_sum(result, total);
  } else {
    Kokkos::parallel_reduce(
        "kdist::ops::cross_entropy", range<PV>(p.extent(0)),
        KOKKOS_LAMBDA(const std::int64_t i, double& acc) {
          T s = 0;
          for (std::int64_t j = 0; j < cols; ++j) s += p(i, j);
          T dot = 0;
          double row = 0.0;
          for (std::int64_t j = 0; j < cols; ++j) {
            const T t = target_at<T>(target, i, j);
            const T q = p(i, j) / s;
            const T c = q < lo ? lo : (q > hi ? hi : q);
            if (t != T(0))
              row -= static_cast<double>(t) * kdist::detail::kmath::log(static_cast<double>(c));
            const T gq = (q > lo && q < hi) ? -t / c : T(0);
            dot += gq * q;
          }
          if (Grad) {
            for (std::int64_t j = 0; j < cols; ++j) {
              const T t = target_at<T>(target, i, j);
              const T q = p(i, j) / s;
              const T c = q < lo ? lo : (q > hi ? hi : q);
              const T gq = (q > lo && q < hi) ? -t / c : T(0);
              store_grad<Grad>(g, i, j, (gq - dot) / s * scale);
            }
          }
          acc += row;
        },
        result);
  }
}

}  // namespace detail

//! Mean squared error, Keras' `mean(square(pred - target), axis=-1)` per example.
//! Returns the SUM over the rows of `pred` [rows, classes] of the per-example losses, and writes
//! `grad = scale * d(sum)/d(pred) = scale * 2 (pred - target) / classes`. `target`: integer labels
//! [rows] (one-hot implied) or dense [rows, classes]. `grad` may be `pred`.
//! Errors: kdist::ValueError for mismatched shapes or an out-of-range label.
//! Example: `double sum = mean_squared_error(probs, labels, dprobs, 1.0f / global_batch);`
template <class PV, class TV, class GV, class Backend = AutoBackend>
double mean_squared_error(const PV& pred, const TV& target, const GV& grad,
                          detail::scalar_t<PV> scale, Backend = {}) {
  static_assert(detail::check_matrix<PV>());
  constexpr bool eigen = detail::check_backend<Backend, PV, TV, GV>();
  detail::check_target("mean_squared_error", pred, target);
  detail::check_grad<true>("mean_squared_error", pred, grad);
  double sum = 0.0;
  detail::mse_impl<true, eigen>(pred, target, grad, scale, sum);
  return sum;
}

//! Mean squared error without a gradient (evaluation): the sum of the per-example losses.
template <class PV, class TV, class Backend = AutoBackend>
double mean_squared_error(const PV& pred, const TV& target, Backend = {}) {
  static_assert(detail::check_matrix<PV>());
  constexpr bool eigen = detail::check_backend<Backend, PV, TV>();
  detail::check_target("mean_squared_error", pred, target);
  double sum = 0.0;
  detail::mse_impl<false, eigen>(pred, target, pred, detail::scalar_t<PV>(0), sum);
  return sum;
}

//! Softmax cross-entropy from LOGITS, fused and stable (Keras' cross-entropy with
//! `from_logits=True`): per example `sum_j t_j (logsumexp(z) - z_j)`. Returns the sum over the rows
//! and writes `grad = scale * (sum_j t_j * softmax(z) - t)` (= `scale * (softmax(z) - onehot)` for
//! labels). `grad` may be `logits`. Errors: as mean_squared_error.
template <class ZV, class TV, class GV, class Backend = AutoBackend>
double softmax_cross_entropy(const ZV& logits, const TV& target, const GV& grad,
                             detail::scalar_t<ZV> scale, Backend = {}) {
  static_assert(detail::check_matrix<ZV>());
  constexpr bool eigen = detail::check_backend<Backend, ZV, TV, GV>();
  detail::check_target("softmax_cross_entropy", logits, target);
  detail::check_grad<true>("softmax_cross_entropy", logits, grad);
  double sum = 0.0;
  detail::softmax_xent_impl<true, eigen>(logits, target, grad, scale, sum);
  return sum;
}

//! Softmax cross-entropy from logits without a gradient: the sum of the per-example losses.
template <class ZV, class TV, class Backend = AutoBackend>
double softmax_cross_entropy(const ZV& logits, const TV& target, Backend = {}) {
  static_assert(detail::check_matrix<ZV>());
  constexpr bool eigen = detail::check_backend<Backend, ZV, TV>();
  detail::check_target("softmax_cross_entropy", logits, target);
  double sum = 0.0;
  detail::softmax_xent_impl<false, eigen>(logits, target, logits, detail::scalar_t<ZV>(0), sum);
  return sum;
}

//! Cross-entropy from PROBABILITIES exactly as Keras 3 computes `categorical_crossentropy` /
//! `sparse_categorical_crossentropy` with `from_logits=False`: each row is divided by its sum,
//! clipped to [epsilon, 1 - epsilon], and the loss is `-sum_j t_j log(clipped_j)`. Returns the sum
//! over the rows and writes `grad = scale * d(sum)/d(probs)` (through the normalisation; zero where
//! the clip is active). `grad` may be `probs`. Errors: as mean_squared_error.
template <class PV, class TV, class GV, class Backend = AutoBackend>
double cross_entropy(const PV& probs, const TV& target, const GV& grad, detail::scalar_t<PV> scale,
                     double epsilon = keras_epsilon, Backend = {}) {
  static_assert(detail::check_matrix<PV>());
  constexpr bool eigen = detail::check_backend<Backend, PV, TV, GV>();
  using T = detail::scalar_t<PV>;
  detail::check_target("cross_entropy", probs, target);
  detail::check_grad<true>("cross_entropy", probs, grad);
  double sum = 0.0;
  detail::xent_impl<true, eigen>(probs, target, grad, scale, static_cast<T>(epsilon), sum);
  return sum;
}

//! Cross-entropy from probabilities without a gradient: the sum of the per-example losses.
template <class PV, class TV, class Backend = AutoBackend>
double cross_entropy(const PV& probs, const TV& target, double epsilon = keras_epsilon,
                     Backend = {}) {
  static_assert(detail::check_matrix<PV>());
  constexpr bool eigen = detail::check_backend<Backend, PV, TV>();
  using T = detail::scalar_t<PV>;
  detail::check_target("cross_entropy", probs, target);
  double sum = 0.0;
  detail::xent_impl<false, eigen>(probs, target, probs, T(0), static_cast<T>(epsilon), sum);
  return sum;
}

// ---- the same, the sum left on the device ---------------------------------------------------
// A training step that runs as one device graph (kdist::detail::StepGraph) keeps its loss where
// the kernels put it: each `_into` form writes the sum into `out` (a rank-0 View of double in the
// memory of the Views) without waiting for it, and leaves the range of integer labels to
// first_invalid_label_into (checked when the step's metrics are read). On the host they compute
// what the forms above return.

template <class PV, class TV, class GV, class OV, class Backend = AutoBackend>
void mean_squared_error_into(const PV& pred, const TV& target, const GV& grad,
                             detail::scalar_t<PV> scale, const OV& out, Backend = {}) {
  static_assert(detail::check_matrix<PV>() && detail::is_device_sum_v<OV>);
  constexpr bool eigen = detail::check_backend<Backend, PV, TV, GV>();
  detail::check_target<eigen>("mean_squared_error", pred, target);
  detail::check_grad<true>("mean_squared_error", pred, grad);
  OV result = out;
  detail::mse_impl<true, eigen>(pred, target, grad, scale, result);
}

template <class ZV, class TV, class GV, class OV, class Backend = AutoBackend>
void softmax_cross_entropy_into(const ZV& logits, const TV& target, const GV& grad,
                                detail::scalar_t<ZV> scale, const OV& out, Backend = {}) {
  static_assert(detail::check_matrix<ZV>() && detail::is_device_sum_v<OV>);
  constexpr bool eigen = detail::check_backend<Backend, ZV, TV, GV>();
  detail::check_target<eigen>("softmax_cross_entropy", logits, target);
  detail::check_grad<true>("softmax_cross_entropy", logits, grad);
  OV result = out;
  detail::softmax_xent_impl<true, eigen>(logits, target, grad, scale, result);
}

template <class PV, class TV, class GV, class OV, class Backend = AutoBackend>
void cross_entropy_into(const PV& probs, const TV& target, const GV& grad,
                        detail::scalar_t<PV> scale, const OV& out, double epsilon = keras_epsilon,
                        Backend = {}) {
  static_assert(detail::check_matrix<PV>() && detail::is_device_sum_v<OV>);
  constexpr bool eigen = detail::check_backend<Backend, PV, TV, GV>();
  using T = detail::scalar_t<PV>;
  detail::check_target<eigen>("cross_entropy", probs, target);
  detail::check_grad<true>("cross_entropy", probs, grad);
  OV result = out;
  detail::xent_impl<true, eigen>(probs, target, grad, scale, static_cast<T>(epsilon), result);
}

//! The first row whose label lies outside [0, classes) into `first` (a rank-0 View of int64 in
//! the labels' memory; the largest int64 when every label is in range), without waiting for it.
template <class LV, class FV>
void first_invalid_label_into(const LV& labels, std::int64_t classes, const FV& first) {
  static_assert(detail::check_labels<LV>() && Kokkos::is_view<FV>::value);
  const auto rows = static_cast<std::int64_t>(labels.extent(0));
  if constexpr (runs_on_host_v<LV>) {
    std::int64_t bad = Kokkos::reduction_identity<std::int64_t>::min();
    for (std::int64_t i = 0; i < rows; ++i) {
      const auto l = static_cast<std::int64_t>(labels(i));
      if (l < 0 || l >= classes) {
        bad = i;
        break;
      }
    }
    first() = bad;
  } else {
    Kokkos::parallel_reduce(
        "kdist::ops::first_invalid_label", detail::range<LV>(labels.extent(0)),
        KOKKOS_LAMBDA(const std::int64_t i, std::int64_t& bad) {
          const auto l = static_cast<std::int64_t>(labels(i));
          if ((l < 0 || l >= classes) && i < bad) bad = i;
        },
        Kokkos::Min<std::int64_t, typename FV::memory_space>(first));
  }
}

//! The number of rows whose argmax (the first maximum, as numpy's argmax) equals the label:
//! Keras' sparse categorical accuracy times the number of rows. Errors: kdist::ValueError if
//! `labels` does not have one element per row (an out-of-range label simply never matches).
template <class SV, class LV, class Backend = AutoBackend>
std::int64_t count_correct(const SV& scores, const LV& labels, Backend = {}) {
  static_assert(detail::check_matrix<SV>() && detail::check_labels<LV>());
  constexpr bool eigen = detail::check_backend<Backend, SV, LV>();
  detail::require_length("count_correct", "labels", labels, scores.extent(0));
  const auto cols = static_cast<std::int64_t>(scores.extent(1));
  if (cols == 0) return 0;
  std::int64_t correct = 0;
  if constexpr (eigen) {
    auto sm = detail::eigen_map(scores);
    for (Eigen::Index i = 0; i < sm.rows(); ++i) {
      Eigen::Index arg = 0;
      sm.row(i).maxCoeff(&arg);  // first maximum
      if (static_cast<std::int64_t>(arg) == static_cast<std::int64_t>(labels(i))) ++correct;
    }
  } else {
    Kokkos::parallel_reduce(
        "kdist::ops::count_correct", detail::range<SV>(scores.extent(0)),
        KOKKOS_LAMBDA(const std::int64_t i, std::int64_t& acc) {
          std::int64_t arg = 0;
          for (std::int64_t j = 1; j < cols; ++j) {
            if (scores(i, j) > scores(i, arg)) arg = j;
          }
          if (arg == static_cast<std::int64_t>(labels(i))) ++acc;
        },
        correct);
  }
  return correct;
}

//! count_correct into `out` (a rank-0 View of double in the memory of the Views), without waiting
//! for it (see the `_into` forms above).
template <class SV, class LV, class OV, class Backend = AutoBackend>
void count_correct_into(const SV& scores, const LV& labels, const OV& out, Backend b = {}) {
  static_assert(detail::check_matrix<SV>() && detail::check_labels<LV>() &&
                detail::is_device_sum_v<OV>);
  constexpr bool eigen = detail::check_backend<Backend, SV, LV>();
  if constexpr (eigen) {
    OV result = out;
    detail::store_sum(result, static_cast<double>(count_correct(scores, labels, b)));
  } else {
    detail::require_length("count_correct", "labels", labels, scores.extent(0));
    const auto cols = static_cast<std::int64_t>(scores.extent(1));
    Kokkos::parallel_reduce(
        "kdist::ops::count_correct", detail::range<SV>(scores.extent(0)),
        KOKKOS_LAMBDA(const std::int64_t i, double& acc) {
          std::int64_t arg = 0;
          for (std::int64_t j = 1; j < cols; ++j) {
            if (scores(i, j) > scores(i, arg)) arg = j;
          }
          if (arg == static_cast<std::int64_t>(labels(i))) acc += 1.0;
        },
        out);
  }
}

}  // namespace kdist::ops
