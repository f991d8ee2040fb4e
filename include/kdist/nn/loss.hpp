#pragma once
//! \file nn/loss.hpp
//! The `kdist::LossFunction` concept: what a class needs so that `kdist::Sequential` can train
//! with it, as Keras' `model.compile(loss=...)` takes a `keras.losses.Loss`. A loss sees this
//! process's rows of the model's output and their targets, returns the SUM of their per-example
//! losses and writes the gradient of that sum times `scale` (the model passes 1 / global batch and
//! all-reduces the sums: the mean over the global batch, on any mesh). `AnyLoss<T>` holds any
//! LossFunction by value (type erasure); `kdist::Loss::mean_squared_error` and
//! `kdist::Loss::categorical_crossentropy` name the library's (kdist::losses::MeanSquaredError,
//! kdist::losses::CategoricalCrossentropy), as Keras' strings "mse" and "categorical_crossentropy".
//!
//! \code
//! struct MeanAbsoluteError {
//!   std::string name() const { return "mean_absolute_error"; }
//!   double sum(const kdist::LossInput<float>& pred, const kdist::LossTargets<float>& target,
//!              const kdist::LossGradient<float>& grad, float scale) const { ... }
//! };
//! static_assert(kdist::LossFunction<MeanAbsoluteError>);
//! model.compile(MeanAbsoluteError{}, kdist::Adam());
//! \endcode
//! Optional members, used when present: `sum(pred, labels, grad, scale)` with integer labels
//! (kdist::LossLabels; otherwise the model gives one-hot targets), `sum(pred, target)` without a
//! gradient (evaluation; otherwise a scratch gradient is written), and `sum_from_logits(...)` of
//! both forms (the loss takes the logits of a final softmax, fused and stable).

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>

#include <Kokkos_Core.hpp>

#include <kdist/core/concepts.hpp>
#include <kdist/core/error.hpp>
#include <kdist/nn/explicit_instantiation.hpp>
#include <kdist/ops/losses.hpp>

namespace kdist {

//! Keras' `loss="mse"` and `loss="categorical_crossentropy"` (sparse when the targets are
//! integer labels): the names of the library's losses (kdist::losses).
//! `sparse_categorical_crossentropy` takes integer targets: one label per example for (batch,
//! classes) outputs (then it is categorical_crossentropy of the one-hot labels), and (batch,
//! sequence) token ids for a language model's (batch, sequence, vocabulary) LOGITS, where
//! kdist::Sequential computes it vocabulary-parallel (kdist/nn/sparse_categorical_crossentropy.hpp;
//! Keras' SparseCategoricalCrossentropy(from_logits=True)).
enum class Loss { mean_squared_error, categorical_crossentropy, sparse_categorical_crossentropy };

//! This process's rows of the model's output, as a loss sees them.
template <class T>
using LossInput = Kokkos::View<const T**, Kokkos::LayoutRight>;
//! Their targets, one row of values per example.
template <class T>
using LossTargets = Kokkos::View<const T**, Kokkos::LayoutRight>;
//! Their targets as integer class labels, one per example (one-hot implied).
using LossLabels = Kokkos::View<const std::int32_t*, Kokkos::LayoutRight>;
//! Where a loss writes `scale * d(sum)/d(output)`, shaped like LossInput.
template <class T>
using LossGradient = Kokkos::View<T**, Kokkos::LayoutRight>;
//! Where a loss that can leave its sum on the device writes it (its optional `sum_into`): a
//! training step that keeps its metrics there (kdist::detail::OutputLoss) reads it later.
using LossSum = Kokkos::View<double, Kokkos::LayoutRight>;

//! The requirements on a loss of outputs of scalars `T`.
template <class L, class T = float>
concept LossFunction = std::copy_constructible<L> &&
    requires(const L& loss, const LossInput<T>& pred, const LossTargets<T>& target,
             const LossGradient<T>& grad, T scale) {
  //! Keras' name ("mean_squared_error"); a checkpoint records it.
  { loss.name() } -> std::convertible_to<std::string>;
  //! The sum over the rows of the per-example losses; writes scale * d(sum)/d(pred) into grad.
  { loss.sum(pred, target, grad, scale) } -> std::convertible_to<double>;
};

namespace error {
//! A Sequential (kdist::AnyLoss) given a type `L` that does not satisfy kdist::LossFunction on
//! scalars `T`: it needs name() and sum(pred, target, grad, scale) -> double (kdist/nn/loss.hpp).
template <class L, class T>
struct type_is_not_a_loss_on;
}  // namespace error

namespace losses {

//! Keras' `keras.losses.MeanSquaredError` ("mse"): per example `mean(square(pred - target))`
//! (kdist::ops::mean_squared_error).
struct MeanSquaredError {
  std::string name() const { return "mean_squared_error"; }
  template <class PV, class YV, class GV, class S>
  double sum(const PV& pred, const YV& target, const GV& grad, S scale) const {
    return ops::mean_squared_error(pred, target, grad, scale);
  }
  template <class PV, class YV>
  double sum(const PV& pred, const YV& target) const {
    return ops::mean_squared_error(pred, target);
  }
  template <class PV, class YV, class GV, class S>
  void sum_into(const PV& pred, const YV& target, const GV& grad, S scale,
                const LossSum& out) const {
    ops::mean_squared_error_into(pred, target, grad, scale, out);
  }
};

//! Keras' `keras.losses.CategoricalCrossentropy` (and the sparse one with integer labels) on
//! probabilities, clipped as Keras does (kdist::ops::cross_entropy); after a final softmax it
//! takes the logits instead, fused and stable (kdist::ops::softmax_cross_entropy).
struct CategoricalCrossentropy {
  std::string name() const { return "categorical_crossentropy"; }
  template <class PV, class YV, class GV, class S>
  double sum(const PV& pred, const YV& target, const GV& grad, S scale) const {
    return ops::cross_entropy(pred, target, grad, scale);
  }
  template <class PV, class YV>
  double sum(const PV& pred, const YV& target) const {
    return ops::cross_entropy(pred, target);
  }
  template <class ZV, class YV, class GV, class S>
  double sum_from_logits(const ZV& logits, const YV& target, const GV& grad, S scale) const {
    return ops::softmax_cross_entropy(logits, target, grad, scale);
  }
  template <class ZV, class YV>
  double sum_from_logits(const ZV& logits, const YV& target) const {
    return ops::softmax_cross_entropy(logits, target);
  }
  template <class PV, class YV, class GV, class S>
  void sum_into(const PV& pred, const YV& target, const GV& grad, S scale,
                const LossSum& out) const {
    ops::cross_entropy_into(pred, target, grad, scale, out);
  }
  template <class ZV, class YV, class GV, class S>
  void sum_from_logits_into(const ZV& logits, const YV& target, const GV& grad, S scale,
                            const LossSum& out) const {
    ops::softmax_cross_entropy_into(logits, target, grad, scale, out);
  }
};

//! Keras' sparse categorical cross-entropy: integer targets (see kdist::Loss); on (batch,
//! classes) outputs with labels it computes what CategoricalCrossentropy does.
struct SparseCategoricalCrossentropy : CategoricalCrossentropy {
  std::string name() const { return "sparse_categorical_crossentropy"; }
  //! It also takes a language model's (batch, sequence, vocabulary) logits with (batch, sequence)
  //! token ids: the training step computes it vocabulary-parallel, never gathering the logits
  //! (kdist::sparse_categorical_crossentropy).
  static constexpr bool takes_sequence_logits = true;
};

}  // namespace losses

namespace detail {

//! One-hot rows of `classes` columns from integer labels. Errors: kdist::ValueError for a label
//! outside [0, classes), naming the row and `who`.
template <class T>
LossTargets<T> one_hot(const LossLabels& labels, std::size_t classes, const std::string& who) {
  const auto rows = static_cast<std::int64_t>(labels.extent(0));
  const auto n = static_cast<std::int64_t>(classes);
  using Space = Kokkos::DefaultExecutionSpace;
  std::int64_t first_bad = rows;
  Kokkos::parallel_reduce(
      "kdist::one_hot::check", Kokkos::RangePolicy<Space>(0, rows),
      KOKKOS_LAMBDA(const std::int64_t i, std::int64_t& bad) {
        const auto l = static_cast<std::int64_t>(labels(i));
        if ((l < 0 || l >= n) && i < bad) bad = i;
      },
      Kokkos::Min<std::int64_t>(first_bad));
  if (first_bad < rows) {
    throw ValueError(who + ": the label at row " + std::to_string(first_bad) +
                     " is out of range [0, " + std::to_string(classes) + ")");
  }
  Kokkos::View<T**, Kokkos::LayoutRight> out("kdist::one_hot", labels.extent(0), classes);
  Kokkos::parallel_for(
      "kdist::one_hot", Kokkos::RangePolicy<Space>(0, rows),
      KOKKOS_LAMBDA(const std::int64_t i) { out(i, labels(i)) = T(1); });
  return out;
}

}  // namespace detail

//! Any `LossFunction` of outputs of scalars `T`, held by value (copying copies the loss).
template <class T>
class AnyLoss {
 public:
  using value_type = T;

  //! Keras' categorical cross-entropy.
  AnyLoss() : AnyLoss(losses::CategoricalCrossentropy{}) {}
  //! The library's loss of that name.
  AnyLoss(Loss loss)  // NOLINT(google-explicit-constructor): Keras' loss="mse" spelling
      : AnyLoss(loss == Loss::mean_squared_error ? AnyLoss(losses::MeanSquaredError{})
                : loss == Loss::sparse_categorical_crossentropy
                    ? AnyLoss(losses::SparseCategoricalCrossentropy{})
                    : AnyLoss(losses::CategoricalCrossentropy{})) {}
  //! Holds a copy of `loss`. A type that is not a kdist::LossFunction on T does not compile
  //! (kdist::error::type_is_not_a_loss_on<L, T>); see the concept for what it needs.
  template <DifferentFrom<AnyLoss> L>
  requires DifferentFrom<L, Loss>  // the library's losses by name: the constructor above
  AnyLoss(L&& loss)                // NOLINT: implicit, as AnyLayer
      : self_(make_model<std::remove_cvref_t<L>>(std::forward<L>(loss))) {}
  AnyLoss(const AnyLoss& other) : self_(other.self_->clone()) {}
  AnyLoss(AnyLoss&&) noexcept = default;
  AnyLoss& operator=(const AnyLoss& other) {
    if (this != &other) self_ = other.self_->clone();
    return *this;
  }
  AnyLoss& operator=(AnyLoss&&) noexcept = default;

  //! Keras' name of the loss ("categorical_crossentropy").
  std::string name() const { return self_->name(); }
  //! Whether it takes the logits of a final softmax instead (it has sum_from_logits).
  bool fuses_softmax() const { return self_->fuses_softmax(); }
  //! Whether it is the loss of a language model's (batch, sequence, vocabulary) logits (it
  //! declares `takes_sequence_logits`, as losses::SparseCategoricalCrossentropy does).
  bool takes_sequence_logits() const { return self_->takes_sequence_logits(); }
  //! The sum of the per-example losses of the rows of `pred` (the logits of a final softmax when
  //! `from_logits`); writes scale * d(sum)/d(pred) into `*grad` unless `grad` is null.
  double sum(const LossInput<T>& pred, const LossTargets<T>& target, const LossGradient<T>* grad,
             T scale, bool from_logits = false) const {
    return self_->sum(pred, target, grad, scale, from_logits);
  }
  //! The same with integer labels (one per row).
  double sum(const LossInput<T>& pred, const LossLabels& labels, const LossGradient<T>* grad,
             T scale, bool from_logits = false) const {
    return self_->sum(pred, labels, grad, scale, from_logits);
  }

  //! The sum as sum() with a gradient, left in `out` on the device without waiting for it (labels
  //! in range are then the caller's to check: ops::first_invalid_label_into), when the loss can
  //! (the library's: an optional `sum_into` / `sum_from_logits_into`); false, and nothing done,
  //! when it cannot.
  bool sum_into(const LossInput<T>& pred, const LossTargets<T>& target, const LossGradient<T>& grad,
                T scale, bool from_logits, const LossSum& out) const {
    return self_->sum_into(pred, target, grad, scale, from_logits, out);
  }
  //! Whether sum_into can (the loss has sum_into, or sum_from_logits_into when `from_logits`).
  bool keeps_sum_on_device(bool from_logits) const {
    return self_->keeps_sum_on_device(from_logits);
  }
  bool sum_into(const LossInput<T>& pred, const LossLabels& labels, const LossGradient<T>& grad,
                T scale, bool from_logits, const LossSum& out) const {
    return self_->sum_into(pred, labels, grad, scale, from_logits, out);
  }

  //! The loss as its own type, or nullptr if it holds another type.
  template <class L>
  const L* get_if() const {
    auto* m = dynamic_cast<const Model<L>*>(self_.get());
    return m ? &m->loss : nullptr;
  }

 private:
  struct Concept {
    virtual ~Concept() = default;
    virtual std::unique_ptr<Concept> clone() const = 0;
    virtual std::string name() const = 0;
    virtual bool fuses_softmax() const = 0;
    virtual bool takes_sequence_logits() const = 0;
    virtual double sum(const LossInput<T>&, const LossTargets<T>&, const LossGradient<T>*, T,
                       bool) const = 0;
    virtual double sum(const LossInput<T>&, const LossLabels&, const LossGradient<T>*, T,
                       bool) const = 0;
    virtual bool sum_into(const LossInput<T>&, const LossTargets<T>&, const LossGradient<T>&, T,
                          bool, const LossSum&) const = 0;
    virtual bool sum_into(const LossInput<T>&, const LossLabels&, const LossGradient<T>&, T, bool,
                          const LossSum&) const = 0;
    virtual bool keeps_sum_on_device(bool from_logits) const = 0;
  };
  template <class L>
  struct Model final : Concept {
    explicit Model(L l) : loss(std::move(l)) {}
    std::unique_ptr<Concept> clone() const override { return std::make_unique<Model>(loss); }
    std::string name() const override { return std::string(loss.name()); }
    bool takes_sequence_logits() const override {
      if constexpr (requires { requires L::takes_sequence_logits; }) {
        return true;
      } else {
        return false;
      }
    }
    bool fuses_softmax() const override {
      return requires(const LossInput<T>& z, const LossTargets<T>& y) {
        loss.sum_from_logits(z, y);
      };
    }
    double sum(const LossInput<T>& pred, const LossTargets<T>& target, const LossGradient<T>* grad,
               T scale, bool from_logits) const override {
      return sum_of(pred, target, grad, scale, from_logits);
    }
    double sum(const LossInput<T>& pred, const LossLabels& labels, const LossGradient<T>* grad,
               T scale, bool from_logits) const override {
      if constexpr (requires(const LossGradient<T>& g) { loss.sum(pred, labels, g, scale); }) {
        return sum_of(pred, labels, grad, scale, from_logits);
      } else {
        const auto target = detail::one_hot<T>(labels, pred.extent(1), "kdist loss " + name());
        return sum_of(pred, target, grad, scale, from_logits);
      }
    }
    bool sum_into(const LossInput<T>& pred, const LossTargets<T>& target,
                  const LossGradient<T>& grad, T scale, bool from_logits,
                  const LossSum& out) const override {
      return into(pred, target, grad, scale, from_logits, out);
    }
    bool sum_into(const LossInput<T>& pred, const LossLabels& labels, const LossGradient<T>& grad,
                  T scale, bool from_logits, const LossSum& out) const override {
      return into(pred, labels, grad, scale, from_logits, out);
    }
    bool keeps_sum_on_device(bool from_logits) const override {
      const LossInput<T> pred;
      const LossTargets<T> target;
      const LossGradient<T> grad;
      const LossSum out;
      if (from_logits) {
        return requires {
          loss.sum_from_logits_into(pred, target, grad, T(1), out);
        };
      }
      return requires {
        loss.sum_into(pred, target, grad, T(1), out);
      };
    }
    template <class Y>
    bool into(const LossInput<T>& pred, const Y& target, const LossGradient<T>& grad, T scale,
              bool from_logits, const LossSum& out) const {
      if (from_logits) {
        if constexpr (requires { loss.sum_from_logits_into(pred, target, grad, scale, out); }) {
          loss.sum_from_logits_into(pred, target, grad, scale, out);
          return true;
        }
        return false;
      }
      if constexpr (requires { loss.sum_into(pred, target, grad, scale, out); }) {
        loss.sum_into(pred, target, grad, scale, out);
        return true;
      }
      return false;
    }
    template <class Y>
    double sum_of(const LossInput<T>& pred, const Y& target, const LossGradient<T>* grad, T scale,
                  bool from_logits) const {
      if constexpr (requires(const LossGradient<T>& g) {
                      loss.sum_from_logits(pred, target, g, scale);
                      loss.sum_from_logits(pred, target);
                    }) {
        if (from_logits) {
          return grad ? loss.sum_from_logits(pred, target, *grad, scale)
                      : loss.sum_from_logits(pred, target);
        }
      }
      if (grad) return static_cast<double>(loss.sum(pred, target, *grad, scale));
      if constexpr (requires { loss.sum(pred, target); }) {
        return static_cast<double>(loss.sum(pred, target));
      } else {
        LossGradient<T> scratch(Kokkos::view_alloc(Kokkos::WithoutInitializing, "kdist::dloss"),
                                pred.extent(0), pred.extent(1));
        return static_cast<double>(loss.sum(pred, target, scratch, T(0)));
      }
    }
    L loss;
  };
  template <class L, class Arg>
  static std::unique_ptr<Concept> make_model(Arg&& loss) {
    static_assert(detail::diagnose<LossFunction<L, T>, error::type_is_not_a_loss_on<L, T>>::value,
                  "kdist::AnyLoss: this type is not a kdist::LossFunction on the model's scalar "
                  "type; it needs name() -> std::string and sum(const kdist::LossInput<T>& pred, "
                  "const kdist::LossTargets<T>& target, const kdist::LossGradient<T>& grad, T "
                  "scale) -> double (kdist/nn/loss.hpp)");
    if constexpr (LossFunction<L, T>) {
      return std::make_unique<Model<L>>(std::forward<Arg>(loss));
    } else {
      return nullptr;
    }
  }

  std::unique_ptr<Concept> self_;
};

}  // namespace kdist

KDIST_EXTERN_CLASS(kdist::AnyLoss)
KDIST_EXTERN_LOSS(MeanSquaredError)
KDIST_EXTERN_LOSS(CategoricalCrossentropy)
KDIST_EXTERN_LOSS(SparseCategoricalCrossentropy)
