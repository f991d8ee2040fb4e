// Tests of tests/reference_mlp.hpp, the ground truth of the sharded trainers: its initial weights
// follow the documented keying, its gradients match finite differences (double, both losses, with
// dropout), a batch split in row blocks with global row offsets gives the same gradients, the kdist
// ops composed into the same model reproduce it, and training on real Fashion-MNIST reduces the
// loss with SGD and Adam.
// kdist-build-compiler: its Eigen reference trains for minutes unoptimised (tests/bundles.cmake)
#include <gtest/gtest.h>

#include "kokkos_environment.hpp"

#include <Kokkos_Core.hpp>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <iostream>
#include <kdist/ops/activations.hpp>
#include <kdist/ops/dropout.hpp>
#include <kdist/ops/losses.hpp>
#include <kdist/ops/matmul.hpp>
#include <kdist/ops/optimizers.hpp>
#include <kdist/ops/random.hpp>
#include <span>
#include <stdexcept>
#include <vector>

#include "common/fashion_mnist.hpp"
#include "reference_mlp.hpp"

namespace {

using kdist::reference::Loss;
using kdist::reference::MlpConfig;
using kdist::reference::OptimizerConfig;
using kdist::reference::ReferenceMlp;

template <class T>
using Matrix = typename ReferenceMlp<T>::Matrix;

template <class T>
Matrix<T> random_input(std::size_t rows, std::size_t cols) {
  Matrix<T> x(static_cast<Eigen::Index>(rows), static_cast<Eigen::Index>(cols));
  const auto key = kdist::random_key(5, kdist::stream_id("input"));
  for (Eigen::Index i = 0; i < x.rows(); ++i) {
    for (Eigen::Index j = 0; j < x.cols(); ++j) {
      x(i, j) = static_cast<T>(kdist::uniform01(key, static_cast<std::uint64_t>(i * x.cols() + j)));
    }
  }
  return x;
}

std::vector<std::uint8_t> labels_for(std::size_t rows, std::size_t classes) {
  std::vector<std::uint8_t> l(rows);
  for (std::size_t i = 0; i < rows; ++i) l[i] = static_cast<std::uint8_t>((i * 3 + 1) % classes);
  return l;
}

//! A batch of real training images (skips the test if the Debian data is not installed).
struct RealBatch {
  std::vector<std::uint8_t> labels;
  Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> x;
};

bool load_real(RealBatch& b, std::size_t first, std::size_t count) {
  namespace ex = kdist::examples;
  if (!std::filesystem::exists(ex::fashion_mnist_path(ex::Split::train, true))) return false;
  const auto data = ex::load_fashion_mnist(ex::Split::train, first, count);
  b.labels = data.labels;
  b.x = Eigen::Map<const Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>>(
      data.images.data(), static_cast<Eigen::Index>(count), 784);
  return true;
}

TEST(ReferenceMlp, InitialWeightsFollowTheKeying) {
  ReferenceMlp<float> f;
  ReferenceMlp<double> d;
  EXPECT_EQ(f.d1_kernel.rows(), 784);
  EXPECT_EQ(f.d1_kernel.cols(), 200);
  EXPECT_EQ(f.d2_kernel.rows(), 200);
  EXPECT_EQ(f.d2_kernel.cols(), 10);
  EXPECT_EQ(f.d2_bias.cols(), 10);
  EXPECT_EQ((ReferenceMlp<float>::variable_paths()),
            (std::vector<std::string>{"d1/kernel", "d2/kernel", "d2/bias"}));
  const std::uint64_t s1 = kdist::stream_id("d1/kernel");
  for (Eigen::Index i = 0; i < 784; ++i) {
    for (Eigen::Index j = 0; j < 200; ++j) {
      const float w =
          kdist::glorot_uniform(1337, s1, 784, 200, static_cast<std::uint64_t>(i * 200 + j));
      ASSERT_EQ(f.d1_kernel(i, j), w);
      ASSERT_EQ(d.d1_kernel(i, j), static_cast<double>(w));  // same weights in double
    }
  }
  const std::uint64_t s2 = kdist::stream_id("d2/kernel");
  for (Eigen::Index i = 0; i < 200; ++i) {
    for (Eigen::Index j = 0; j < 10; ++j) {
      ASSERT_EQ(f.d2_kernel(i, j),
                kdist::glorot_uniform(1337, s2, 200, 10, static_cast<std::uint64_t>(i * 10 + j)));
    }
  }
  EXPECT_EQ(f.d2_bias.squaredNorm(), 0.0f);
  // Another seed, other weights.
  MlpConfig other;
  other.seed = 7;
  EXPECT_NE(ReferenceMlp<float>(other).d1_kernel(0, 0), f.d1_kernel(0, 0));
}

TEST(ReferenceMlp, RejectsMismatchedInputs) {
  MlpConfig c;
  c.inputs = 12;
  c.hidden = 7;
  c.classes = 4;
  ReferenceMlp<double> m(c);
  EXPECT_THROW(m.forward(random_input<double>(3, 11), false, 0), std::invalid_argument);
  ReferenceMlp<double>::Gradients g;
  const auto labels = labels_for(2, 4);
  EXPECT_THROW(m.compute_gradients(random_input<double>(3, 12), labels, 0, g),
               std::invalid_argument);
}

//! Central finite differences of the loss w.r.t. every variable element, against the gradients.
void check_gradients(Loss loss) {
  MlpConfig c;
  c.inputs = 12;
  c.hidden = 7;
  c.classes = 4;
  c.loss = loss;
  c.seed = 11;
  ReferenceMlp<double> m(c);
  // Non-zero biases so their gradient is exercised off the initial point.
  for (Eigen::Index j = 0; j < m.d2_bias.cols(); ++j)
    m.d2_bias(j) = 0.1 * static_cast<double>(j) - 0.15;
  const auto x = random_input<double>(6, 12);
  const auto labels = labels_for(6, 4);
  const std::uint64_t step = 3, row_offset = 5;
  const double divisor = 20.0;  // a "global batch" larger than this shard
  ReferenceMlp<double>::Gradients g;
  m.compute_gradients(x, labels, step, g, true, divisor, row_offset);
  auto loss_at = [&] {
    const auto& p = m.forward(x, true, step, row_offset);
    return m.loss_sum(p, labels) / divisor;
  };
  const double h = 1e-6;
  auto fd = [&](auto& param, const auto& grad, const char* name) {
    for (Eigen::Index i = 0; i < param.rows(); ++i) {
      for (Eigen::Index j = 0; j < param.cols(); ++j) {
        const double keep = param(i, j);
        param(i, j) = keep + h;
        const double up = loss_at();
        param(i, j) = keep - h;
        const double down = loss_at();
        param(i, j) = keep;
        EXPECT_NEAR(grad(i, j), (up - down) / (2 * h), 1e-8) << name << "(" << i << "," << j << ")";
      }
    }
  };
  fd(m.d1_kernel, g.d1_kernel, "d1/kernel");
  fd(m.d2_kernel, g.d2_kernel, "d2/kernel");
  fd(m.d2_bias, g.d2_bias, "d2/bias");
  // Dropout really was on: some hidden units of the batch were dropped, so some d1 kernel columns
  // get gradient from fewer rows; at least the gradient is not identically zero.
  EXPECT_GT(g.d1_kernel.norm(), 0.0);
}

TEST(ReferenceMlp, GradientsMatchFiniteDifferencesCrossEntropy) {
  check_gradients(Loss::categorical_crossentropy);
}

TEST(ReferenceMlp, GradientsMatchFiniteDifferencesMse) {
  check_gradients(Loss::mean_squared_error);
}

TEST(ReferenceMlp, RowBlocksWithGlobalOffsetsGiveTheFullBatchGradients) {
  // The data-parallel property: two shards of the batch, each with its global row offset and the
  // global batch as divisor, sum to the full batch's gradients (dropout masks included).
  MlpConfig c;
  c.inputs = 30;
  c.hidden = 20;
  c.classes = 10;
  ReferenceMlp<double> m(c);
  const auto x = random_input<double>(16, 30);
  const auto labels = labels_for(16, 10);
  ReferenceMlp<double>::Gradients full, a, b;
  const double loss = m.compute_gradients(x, labels, 9, full, true);
  const double la =
      m.compute_gradients(x.topRows(8), std::span(labels).first(8), 9, a, true, 16.0, 0);
  const double lb =
      m.compute_gradients(x.bottomRows(8), std::span(labels).last(8), 9, b, true, 16.0, 8);
  EXPECT_NEAR(la + lb, loss, 1e-14);
  EXPECT_LT((a.d1_kernel + b.d1_kernel - full.d1_kernel).norm(), 1e-14);
  EXPECT_LT((a.d2_kernel + b.d2_kernel - full.d2_kernel).norm(), 1e-14);
  EXPECT_LT((a.d2_bias + b.d2_bias - full.d2_bias).norm(), 1e-14);
  // Without the offset the second shard would draw the first shard's mask: different gradients.
  ReferenceMlp<double>::Gradients wrong;
  m.compute_gradients(x.bottomRows(8), std::span(labels).last(8), 9, wrong, true, 16.0, 0);
  EXPECT_GT((wrong.d1_kernel - b.d1_kernel).norm(), 1e-6);
}

TEST(ReferenceMlp, KdistOpsComposeToTheReference) {
  // The seeds' model written with kdist::ops on Kokkos Views (what a one-device trainer does)
  // gives the reference's loss, gradients and Adam step, on a real batch when available.
  using T = float;
  const std::size_t batch = 64, in = 784, hid = 200, cls = 10;
  RealBatch real;
  Matrix<T> x;
  std::vector<std::uint8_t> labels;
  if (load_real(real, 1000, batch)) {
    x = real.x;
    labels = real.labels;
  } else {
    x = random_input<T>(batch, in);
    labels = labels_for(batch, cls);
  }
  for (Loss loss : {Loss::categorical_crossentropy, Loss::mean_squared_error}) {
    SCOPED_TRACE(loss == Loss::mean_squared_error ? "mse" : "cross-entropy");
    MlpConfig c;
    c.loss = loss;
    ReferenceMlp<T> ref(c);
    const std::uint64_t step = 4;
    ReferenceMlp<T>::Gradients g;
    const double ref_loss = ref.compute_gradients(x, labels, step, g, true);

    using M = Kokkos::View<T**, Kokkos::LayoutRight, Kokkos::HostSpace>;
    using V = Kokkos::View<T*, Kokkos::LayoutRight, Kokkos::HostSpace>;
    M X("X", batch, in), W1("W1", in, hid), W2("W2", hid, cls), H("H", batch, hid),
        D("D", batch, hid), P("P", batch, cls), dP("dP", batch, cls), dZ("dZ", batch, cls),
        dD("dD", batch, hid), dW1("dW1", in, hid), dW2("dW2", hid, cls);
    V b2("b2", cls), db2("db2", cls);
    Kokkos::View<std::uint8_t*, Kokkos::LayoutRight, Kokkos::HostSpace> L("L", batch);
    for (std::size_t i = 0; i < batch; ++i) {
      L(i) = labels[i];
      for (std::size_t j = 0; j < in; ++j)
        X(i, j) = x(static_cast<Eigen::Index>(i), static_cast<Eigen::Index>(j));
    }
    const auto k1 = kdist::random_key(c.seed, kdist::stream_id("d1/kernel"));
    const auto k2 = kdist::random_key(c.seed, kdist::stream_id("d2/kernel"));
    for (std::size_t i = 0; i < in; ++i)
      for (std::size_t j = 0; j < hid; ++j)
        W1(i, j) = kdist::glorot_uniform(k1, in, hid, i * hid + j);
    for (std::size_t i = 0; i < hid; ++i)
      for (std::size_t j = 0; j < cls; ++j)
        W2(i, j) = kdist::glorot_uniform(k2, hid, cls, i * cls + j);

    namespace ops = kdist::ops;
    const T scale = T(1) / static_cast<T>(batch);
    ops::DropoutParams dp{c.seed, kdist::stream_id("dropout"), step, c.dropout_rate};
    ops::matmul(X, W1, H);
    ops::relu_inplace(H);
    ops::dropout(H, D, dp);
    ops::matmul(D, W2, P);
    ops::bias_add(P, b2);
    ops::softmax_inplace(P);
    const double sum = loss == Loss::mean_squared_error ? ops::mean_squared_error(P, L, dP, scale)
                                                        : ops::cross_entropy(P, L, dP, scale);
    EXPECT_NEAR(sum / static_cast<double>(batch), ref_loss, 1e-5 * ref_loss);
    ops::softmax_backward(P, dP, dZ);
    ops::matmul(D, dZ, dW2, ops::Op::transpose, ops::Op::none);
    ops::bias_grad(dZ, db2);
    ops::matmul(dZ, W2, dD, ops::Op::none, ops::Op::transpose);
    ops::dropout_backward(dD, dD, dp);
    ops::relu_backward_inplace(H, dD);
    ops::matmul(X, dD, dW1, ops::Op::transpose, ops::Op::none);

    auto rel = [](const auto& view, const auto& eig) {
      double num = 0, den = 0;
      for (Eigen::Index i = 0; i < eig.rows(); ++i) {
        for (Eigen::Index j = 0; j < eig.cols(); ++j) {
          const double a = view.rank == 1 ? static_cast<double>(view.data()[j])
                                          : static_cast<double>(view.data()[i * eig.cols() + j]);
          num += (a - eig(i, j)) * (a - eig(i, j));
          den += static_cast<double>(eig(i, j)) * eig(i, j);
        }
      }
      return std::sqrt(num / std::max(den, 1e-30));
    };
    EXPECT_LT(rel(dW1, g.d1_kernel), 1e-5);
    EXPECT_LT(rel(dW2, g.d2_kernel), 1e-5);
    EXPECT_LT(rel(db2, g.d2_bias), 1e-5);

    // One Adam step on both sides.
    kdist::Adam adam;
    auto m1 = kdist::make_slot(W1, "m1"), v1 = kdist::make_slot(W1, "v1");
    auto m2 = kdist::make_slot(W2, "m2"), v2 = kdist::make_slot(W2, "v2");
    auto mb = kdist::make_slot(b2, "mb"), vb = kdist::make_slot(b2, "vb");
    adam.update(W1, dW1, m1, v1);
    adam.update(W2, dW2, m2, v2);
    adam.update(b2, db2, mb, vb);
    adam.finish_step();
    ref.apply_gradients(g);
    EXPECT_EQ(ref.iterations(), 1u);
    // Adam's first step moves each element by ~lr * sign(g): compare the moves.
    double worst = 0;
    for (std::size_t j = 0; j < cls; ++j) {
      worst = std::max(
          worst, std::fabs(static_cast<double>(b2(j)) - ref.d2_bias(static_cast<Eigen::Index>(j))));
    }
    for (std::size_t i = 0; i < hid; ++i) {
      for (std::size_t j = 0; j < cls; ++j) {
        worst = std::max(worst, std::fabs(static_cast<double>(W2(i, j)) -
                                          ref.d2_kernel(static_cast<Eigen::Index>(i),
                                                        static_cast<Eigen::Index>(j))));
      }
    }
    EXPECT_LT(worst, 2e-5);  // 2% of the step where a gradient element is near 0
  }
}

double train(Loss loss, OptimizerConfig opt, int steps, double& first, double& last) {
  RealBatch b;
  if (!load_real(b, 0, 256)) return -1;
  MlpConfig c;
  c.loss = loss;
  ReferenceMlp<float> m(c, opt);
  first = m.train_step(b.x, b.labels);
  double sum_last = 0;
  for (int s = 1; s < steps; ++s) {
    const double l = m.train_step(b.x, b.labels);
    if (s >= steps - 10) sum_last += l;
  }
  last = sum_last / 10;
  EXPECT_EQ(m.iterations(), static_cast<std::uint64_t>(steps));
  return m.evaluate(b.x, b.labels).second;
}

TEST(ReferenceMlp, AdamReducesTheLossOnARealBatch) {
  double first = 0, last = 0;
  OptimizerConfig adam;  // Keras defaults
  const double acc = train(Loss::categorical_crossentropy, adam, 200, first, last);
  if (acc < 0) GTEST_SKIP() << "apt-get install dataset-fashion-mnist";
  std::cout << "  Adam, cross-entropy: loss " << first << " -> " << last << ", accuracy " << acc
            << "\n";
  EXPECT_GT(first, 1.8);  // ~ln(10) at glorot init
  EXPECT_LT(last, 0.35 * first);
  EXPECT_GT(acc, 0.9);
}

TEST(ReferenceMlp, SgdReducesTheLossOnARealBatch) {
  double first = 0, last = 0;
  OptimizerConfig sgd;
  sgd.kind = OptimizerConfig::Kind::sgd;
  sgd.learning_rate = 0.01;  // Keras' default
  sgd.momentum = 0.9;
  const double acc = train(Loss::categorical_crossentropy, sgd, 200, first, last);
  if (acc < 0) GTEST_SKIP() << "apt-get install dataset-fashion-mnist";
  std::cout << "  SGD(momentum 0.9), cross-entropy: loss " << first << " -> " << last
            << ", accuracy " << acc << "\n";
  EXPECT_LT(last, 0.5 * first);
  EXPECT_GT(acc, 0.8);
}

TEST(ReferenceMlp, AdamReducesMseOnARealBatch) {
  double first = 0, last = 0;
  const double acc = train(Loss::mean_squared_error, OptimizerConfig{}, 200, first, last);
  if (acc < 0) GTEST_SKIP() << "apt-get install dataset-fashion-mnist";
  std::cout << "  Adam, mse: loss " << first << " -> " << last << ", accuracy " << acc << "\n";
  EXPECT_LT(last, 0.5 * first);
  EXPECT_GT(acc, 0.8);
}

}  // namespace
