#pragma once
//! \file reference_mlp.hpp
//! A plain single-process Eigen implementation of the seeds' model, the ground truth the sharded
//! trainers are compared with and the baseline of their benchmarks:
//!
//!     Flatten -> Dense(200, relu, use_bias=False, name "d1") -> Dropout(0.4) (layer "dropout")
//!             -> Dense(10, softmax, name "d2")
//!
//! It uses no kdist kernel, only kdist/ops/random.hpp for the random numbers, with this keying (the
//! contract a distributed implementation must follow to reproduce it bit for bit):
//!
//!  - "d1/kernel" [inputs, hidden]: element (i, j) =
//!    `glorot_uniform(seed, stream_id("d1/kernel"), inputs, hidden, i * hidden + j)` (a float,
//!    converted to T). "d2/kernel" [hidden, classes] likewise with `stream_id("d2/kernel")`,
//!    fan_in = hidden, fan_out = classes. "d2/bias" [classes] = 0.
//!  - Dropout at training step `step` (the optimizer's iterations before the update: 0 for the
//!    first step) keeps element (r, j) of the hidden activation [global batch, hidden], r the row
//!    in the GLOBAL batch, iff `dropout_keep(seed, stream_id("dropout"), step, r * hidden + j,
//!    rate)`; kept elements are divided by (1 - rate) (in T).
//!  - Losses as Keras 3 computes them on the softmax output (from_logits=False):
//!    mean squared error against the one-hot label, or sparse categorical cross-entropy
//!    (row / row sum, clip to [1e-7, 1 - 1e-7], -log). The loss is the mean over the batch;
//!    gradients are those of that mean (or of sum / `divisor` when a divisor is given).
//!  - SGD and Adam exactly as Keras 3 (see kdist/ops/optimizers.hpp), in T.

#include <Eigen/Core>
#include <cmath>
#include <cstdint>
#include <kdist/ops/random.hpp>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace kdist::reference {

//! The loss the model is compiled with.
enum class Loss {
  mean_squared_error,        //!< compile(loss = "mse") on one-hot labels
  categorical_crossentropy,  //!< compile(loss = "sparse_categorical_crossentropy")
};

//! Sizes, dropout rate, seed and loss of the model.
struct MlpConfig {
  std::size_t inputs = 784;   //!< flattened image size
  std::size_t hidden = 200;   //!< units of "d1"
  std::size_t classes = 10;   //!< units of "d2"
  double dropout_rate = 0.4;  //!< rate of the Dropout layer
  std::uint64_t seed = 1337;  //!< seed of initialisers and dropout
  Loss loss = Loss::categorical_crossentropy;
};

//! The optimizer of train_step.
struct OptimizerConfig {
  enum class Kind { sgd, adam } kind = Kind::adam;
  double learning_rate = 0.001;  //!< Keras defaults: Adam 0.001, SGD 0.01
  double momentum = 0.0;         //!< SGD only
  bool nesterov = false;         //!< SGD only
  double beta_1 = 0.9;
  double beta_2 = 0.999;
  double epsilon = 1e-7;
};

template <class T>
class ReferenceMlp {
 public:
  using Matrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  using RowVector = Eigen::Matrix<T, 1, Eigen::Dynamic>;

  //! Gradients of the loss with respect to every variable.
  struct Gradients {
    Matrix d1_kernel;
    Matrix d2_kernel;
    RowVector d2_bias;
  };

  Matrix d1_kernel;   //!< "d1/kernel" [inputs, hidden]
  Matrix d2_kernel;   //!< "d2/kernel" [hidden, classes]
  RowVector d2_bias;  //!< "d2/bias" [classes]

  explicit ReferenceMlp(MlpConfig config = {}, OptimizerConfig opt = {})
      : config_(config), opt_(opt) {
    d1_kernel = glorot(config.inputs, config.hidden, "d1/kernel");
    d2_kernel = glorot(config.hidden, config.classes, "d2/kernel");
    d2_bias = RowVector::Zero(static_cast<Eigen::Index>(config.classes));
    for (Matrix* m : {&m_d1_, &v_d1_}) *m = Matrix::Zero(d1_kernel.rows(), d1_kernel.cols());
    for (Matrix* m : {&m_d2_, &v_d2_}) *m = Matrix::Zero(d2_kernel.rows(), d2_kernel.cols());
    for (RowVector* m : {&m_b2_, &v_b2_}) *m = RowVector::Zero(d2_bias.cols());
  }

  const MlpConfig& config() const { return config_; }
  const OptimizerConfig& optimizer() const { return opt_; }
  //! Completed training steps (Keras' optimizer.iterations); the dropout step of the next one.
  std::uint64_t iterations() const { return iterations_; }

  //! The variables' Keras paths, in model order.
  static std::vector<std::string> variable_paths() { return {"d1/kernel", "d2/kernel", "d2/bias"}; }

  //! Forward pass of x [batch, inputs]; returns the softmax probabilities [batch, classes].
  //! `training` applies dropout at `step`; `row_offset` is the global batch row of x's row 0.
  const Matrix& forward(const Matrix& x, bool training, std::uint64_t step,
                        std::uint64_t row_offset = 0) {
    if (static_cast<std::size_t>(x.cols()) != config_.inputs) {
      throw std::invalid_argument("ReferenceMlp::forward: x has " + std::to_string(x.cols()) +
                                  " columns, expected " + std::to_string(config_.inputs));
    }
    hidden_.noalias() = x * d1_kernel;
    hidden_ = hidden_.cwiseMax(T(0));
    dropped_ = hidden_;
    training_ = training;
    step_ = step;
    row_offset_ = row_offset;
    if (training && config_.dropout_rate > 0.0) {
      const RandomKey key = random_key(config_.seed, stream_id("dropout"), step);
      const auto rate = static_cast<float>(config_.dropout_rate);
      const T keep = T(1) - static_cast<T>(config_.dropout_rate);
      const auto h = static_cast<std::uint64_t>(config_.hidden);
      for (Eigen::Index i = 0; i < dropped_.rows(); ++i) {
        for (Eigen::Index j = 0; j < dropped_.cols(); ++j) {
          const std::uint64_t index =
              (row_offset + static_cast<std::uint64_t>(i)) * h + static_cast<std::uint64_t>(j);
          dropped_(i, j) = dropout_keep(key, index, rate) ? dropped_(i, j) / keep : T(0);
        }
      }
    }
    probs_.noalias() = dropped_ * d2_kernel;
    probs_.rowwise() += d2_bias;
    for (Eigen::Index i = 0; i < probs_.rows(); ++i) {
      const T mx = probs_.row(i).maxCoeff();
      probs_.row(i) = (probs_.row(i).array() - mx).exp().matrix();
      probs_.row(i) /= probs_.row(i).sum();
    }
    return probs_;
  }

  //! The loss of each row of `probs` against `labels`, summed (Keras' per-example losses).
  double loss_sum(const Matrix& probs, std::span<const std::uint8_t> labels) const {
    double total = 0.0;
    for (Eigen::Index i = 0; i < probs.rows(); ++i) {
      const auto l = static_cast<Eigen::Index>(labels[static_cast<std::size_t>(i)]);
      if (config_.loss == Loss::mean_squared_error) {
        double s = 0.0;
        for (Eigen::Index j = 0; j < probs.cols(); ++j) {
          const double d = static_cast<double>(probs(i, j)) - (j == l ? 1.0 : 0.0);
          s += d * d;
        }
        total += s / static_cast<double>(probs.cols());
      } else {
        const T q = probs(i, l) / probs.row(i).sum();
        total -= std::log(static_cast<double>(clip(q)));
      }
    }
    return total;
  }

  //! Forward + backward on x [batch, inputs] with `labels` at dropout step `step`: fills `g` with
  //! the gradients of (sum of per-example losses) / divisor, and returns that value. divisor 0
  //! means the batch size (the batch mean, as Keras).
  double compute_gradients(const Matrix& x, std::span<const std::uint8_t> labels,
                           std::uint64_t step, Gradients& g, bool training = true,
                           double divisor = 0.0, std::uint64_t row_offset = 0) {
    if (labels.size() != static_cast<std::size_t>(x.rows())) {
      throw std::invalid_argument("ReferenceMlp: labels and x rows differ");
    }
    forward(x, training, step, row_offset);
    const double div = divisor > 0.0 ? divisor : static_cast<double>(x.rows());
    const T scale = static_cast<T>(1.0 / div);
    const double loss = loss_sum(probs_, labels) / div;

    // d loss / d probs
    dprobs_.resize(probs_.rows(), probs_.cols());
    const auto classes = probs_.cols();
    for (Eigen::Index i = 0; i < probs_.rows(); ++i) {
      const auto l = static_cast<Eigen::Index>(labels[static_cast<std::size_t>(i)]);
      if (config_.loss == Loss::mean_squared_error) {
        for (Eigen::Index j = 0; j < classes; ++j) {
          dprobs_(i, j) =
              T(2) * (probs_(i, j) - (j == l ? T(1) : T(0))) / static_cast<T>(classes) * scale;
        }
      } else {
        const T s = probs_.row(i).sum();
        const T q = probs_(i, l) / s;
        const T eps = static_cast<T>(1e-7);
        const T gq = (q > eps && q < T(1) - eps) ? -T(1) / q : T(0);
        for (Eigen::Index j = 0; j < classes; ++j) {
          dprobs_(i, j) = gq * ((j == l ? T(1) : T(0)) - q) / s * scale;
        }
      }
    }
    // softmax backward
    dlogits_.resize(probs_.rows(), classes);
    for (Eigen::Index i = 0; i < probs_.rows(); ++i) {
      const T dot = dprobs_.row(i).dot(probs_.row(i));
      dlogits_.row(i) = (probs_.row(i).array() * (dprobs_.row(i).array() - dot)).matrix();
    }
    g.d2_kernel.noalias() = dropped_.transpose() * dlogits_;
    g.d2_bias = dlogits_.colwise().sum();
    dhidden_.noalias() = dlogits_ * d2_kernel.transpose();
    // dropout backward (the forward's mask, recomputed) and relu backward
    const T keep = T(1) - static_cast<T>(config_.dropout_rate);
    const bool dropout = training_ && config_.dropout_rate > 0.0;
    const RandomKey key = random_key(config_.seed, stream_id("dropout"), step_);
    const auto rate = static_cast<float>(config_.dropout_rate);
    const auto h = static_cast<std::uint64_t>(config_.hidden);
    for (Eigen::Index i = 0; i < dhidden_.rows(); ++i) {
      for (Eigen::Index j = 0; j < dhidden_.cols(); ++j) {
        const std::uint64_t index =
            (row_offset_ + static_cast<std::uint64_t>(i)) * h + static_cast<std::uint64_t>(j);
        const bool active = hidden_(i, j) > T(0);
        const bool kept = !dropout || dropout_keep(key, index, rate);
        dhidden_(i, j) = active && kept ? (dropout ? dhidden_(i, j) / keep : dhidden_(i, j)) : T(0);
      }
    }
    g.d1_kernel.noalias() = x.transpose() * dhidden_;
    return loss;
  }

  //! Applies one optimizer step with gradients `g` and advances iterations().
  void apply_gradients(const Gradients& g) {
    if (opt_.kind == OptimizerConfig::Kind::sgd) {
      sgd(d1_kernel, g.d1_kernel, m_d1_);
      sgd(d2_kernel, g.d2_kernel, m_d2_);
      sgd(d2_bias, g.d2_bias, m_b2_);
    } else {
      const T t = static_cast<T>(iterations_ + 1);
      const T alpha = static_cast<T>(opt_.learning_rate) *
                      std::sqrt(T(1) - std::pow(static_cast<T>(opt_.beta_2), t)) /
                      (T(1) - std::pow(static_cast<T>(opt_.beta_1), t));
      adam(d1_kernel, g.d1_kernel, m_d1_, v_d1_, alpha);
      adam(d2_kernel, g.d2_kernel, m_d2_, v_d2_, alpha);
      adam(d2_bias, g.d2_bias, m_b2_, v_b2_, alpha);
    }
    ++iterations_;
  }

  //! One training step on a batch (dropout step = iterations()); returns the batch mean loss.
  double train_step(const Matrix& x, std::span<const std::uint8_t> labels) {
    const double loss = compute_gradients(x, labels, iterations_, grads_);
    apply_gradients(grads_);
    return loss;
  }

  //! Mean loss and accuracy of x without dropout.
  std::pair<double, double> evaluate(const Matrix& x, std::span<const std::uint8_t> labels) {
    const Matrix& p = forward(x, false, 0);
    std::size_t correct = 0;
    for (Eigen::Index i = 0; i < p.rows(); ++i) {
      Eigen::Index arg = 0;
      p.row(i).maxCoeff(&arg);
      if (arg == static_cast<Eigen::Index>(labels[static_cast<std::size_t>(i)])) ++correct;
    }
    const double n = static_cast<double>(x.rows());
    return {loss_sum(p, labels) / n, static_cast<double>(correct) / n};
  }

 private:
  Matrix glorot(std::size_t fan_in, std::size_t fan_out, const char* path) const {
    Matrix w(static_cast<Eigen::Index>(fan_in), static_cast<Eigen::Index>(fan_out));
    const RandomKey key = random_key(config_.seed, stream_id(path), 0);
    for (Eigen::Index i = 0; i < w.rows(); ++i) {
      for (Eigen::Index j = 0; j < w.cols(); ++j) {
        const auto index = static_cast<std::uint64_t>(i) * fan_out + static_cast<std::uint64_t>(j);
        w(i, j) = static_cast<T>(glorot_uniform(key, fan_in, fan_out, index));
      }
    }
    return w;
  }

  static T clip(T q) {
    const T eps = static_cast<T>(1e-7);
    return q < eps ? eps : (q > T(1) - eps ? T(1) - eps : q);
  }

  template <class M>
  void sgd(M& p, const M& g, M& velocity) const {
    const T lr = static_cast<T>(opt_.learning_rate);
    const T mu = static_cast<T>(opt_.momentum);
    if (opt_.momentum == 0.0) {
      p -= g * lr;
    } else {
      velocity = velocity * mu - g * lr;
      if (opt_.nesterov)
        p += velocity * mu - g * lr;
      else
        p += velocity;
    }
  }

  template <class M>
  void adam(M& p, const M& g, M& m, M& v, T alpha) const {
    const T one_minus_b1 = static_cast<T>(1.0 - opt_.beta_1);
    const T one_minus_b2 = static_cast<T>(1.0 - opt_.beta_2);
    const T eps = static_cast<T>(opt_.epsilon);
    m.array() += (g.array() - m.array()) * one_minus_b1;
    v.array() += (g.array().square() - v.array()) * one_minus_b2;
    p.array() -= (m.array() * alpha) / (v.array().sqrt() + eps);
  }

  MlpConfig config_;
  OptimizerConfig opt_;
  std::uint64_t iterations_ = 0;
  bool training_ = false;
  std::uint64_t step_ = 0;
  std::uint64_t row_offset_ = 0;
  Matrix hidden_, dropped_, probs_, dprobs_, dlogits_, dhidden_;
  Gradients grads_;
  Matrix m_d1_, v_d1_, m_d2_, v_d2_;
  RowVector m_b2_, v_b2_;
};

}  // namespace kdist::reference
