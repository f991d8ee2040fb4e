// Tests of the local kernels (kdist/ops/*.hpp): each against naive loops, through the Eigen path
// and the Kokkos fallback (called explicitly), in float and double; optimizers against
// hand-computed Keras steps; every error path.
#include <gtest/gtest.h>

#include "kokkos_environment.hpp"

#include <Kokkos_Core.hpp>
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <kdist/core/bfloat16.hpp>
#include <kdist/core/float16.hpp>
#include <kdist/ops/activations.hpp>
#include <kdist/ops/attention.hpp>
#include <kdist/ops/dropout.hpp>
#include <kdist/ops/layer_norm.hpp>
#include <kdist/ops/losses.hpp>
#include <kdist/ops/matmul.hpp>
#include <kdist/ops/matmul_precision.hpp>
#include <kdist/ops/optimizers.hpp>
#include <kdist/ops/random.hpp>
#include <kdist/ops/sparse_cross_entropy.hpp>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#if defined(_OPENMP)
#include <omp.h>
#endif

namespace {

namespace ops = kdist::ops;
using ops::Op;

template <class T>
using Mat = Kokkos::View<T**, Kokkos::LayoutRight, Kokkos::HostSpace>;
template <class T>
using Vec = Kokkos::View<T*, Kokkos::LayoutRight, Kokkos::HostSpace>;
using Labels = Kokkos::View<std::uint8_t*, Kokkos::LayoutRight, Kokkos::HostSpace>;

template <class T>
Mat<T> random_matrix(std::size_t rows, std::size_t cols, const char* name, double scale = 1.0) {
  Mat<T> m(std::string(name), rows, cols);
  const auto key = kdist::random_key(99, kdist::stream_id(name));
  for (std::size_t i = 0; i < rows; ++i) {
    for (std::size_t j = 0; j < cols; ++j) {
      m(i, j) = static_cast<T>(scale * kdist::normal(key, i * cols + j));
    }
  }
  return m;
}

template <class T>
Mat<T> clone(const Mat<T>& a) {
  Mat<T> b(a.label() + "_copy", a.extent(0), a.extent(1));
  Kokkos::deep_copy(b, a);
  return b;
}

Labels make_labels(std::size_t rows, std::size_t classes) {
  Labels l("labels", rows);
  for (std::size_t i = 0; i < rows; ++i) l(i) = static_cast<std::uint8_t>((i * 7 + 3) % classes);
  return l;
}

template <class T>
double tolerance() {
  return std::is_same_v<T, float> ? 2e-5 : 1e-12;
}

//! Max |a - b| / max(1, |b|) over all elements.
template <class A, class B>
double max_diff(const A& a, const B& b) {
  EXPECT_EQ(a.extent(0), b.extent(0));
  EXPECT_EQ(a.extent(1), b.extent(1));
  double d = 0.0;
  for (std::size_t i = 0; i < a.extent(0); ++i) {
    for (std::size_t j = 0; j < a.extent(1); ++j) {
      const double x = static_cast<double>(a(i, j));
      const double y = static_cast<double>(b(i, j));
      d = std::max(d, std::fabs(x - y) / std::max(1.0, std::fabs(y)));
    }
  }
  return d;
}

template <class F>
void for_each_backend(F&& f) {
  {
    SCOPED_TRACE("automatic backend (matmul: " + ops::host_gemm_library() + ")");
    f(ops::backend::automatic);
  }
  {
    SCOPED_TRACE("Eigen backend");
    f(ops::backend::eigen);
  }
  {
    SCOPED_TRACE("Kokkos backend");
    f(ops::backend::kokkos);
  }
  {
    SCOPED_TRACE("automatic backend");
    f(ops::backend::automatic);
  }
}

template <class T>
class Ops : public ::testing::Test {};
using Scalars = ::testing::Types<float, double>;
TYPED_TEST_SUITE(Ops, Scalars);

// ---- backend selection ------------------------------------------------------------------------

TEST(Backend, HostGemmLibraryIsTheOneKdistWasBuiltWith) {
#if defined(KDIST_ENABLE_CBLAS)
  EXPECT_NE(ops::host_gemm_library().find("BLAS"), std::string::npos) << ops::host_gemm_library();
  // One thread per rank unless asked (ctest sets neither OPENBLAS_NUM_THREADS nor OMP_NUM_THREADS).
  Mat<float> A("A", 2, 2), B("B", 2, 2), C("C", 2, 2);
  ops::matmul(A, B, C);
#if defined(OPENBLAS_VERSION)
  if (!std::getenv("OPENBLAS_NUM_THREADS") && !std::getenv("OMP_NUM_THREADS")) {
    EXPECT_EQ(openblas_get_num_threads(), 1);
    EXPECT_EQ(ops::host_gemm_threads(), 1);
  }
#endif
#else
  EXPECT_EQ(ops::host_gemm_library(), "Eigen");
#endif
}

// Threads per rank (test_ops.threads_per_rank runs this with OMP_NUM_THREADS=2): OpenBLAS' OpenMP
// variant gives the rank's GEMMs that many threads, and the product is the one-thread product.
TEST(ThreadsPerRank, OmpNumThreadsSetsTheHostGemmThreads) {
  const char* omp = std::getenv("OMP_NUM_THREADS");
  if (omp == nullptr || std::getenv("OPENBLAS_NUM_THREADS") != nullptr) {
    GTEST_SKIP() << "runs as test_ops.threads_per_rank, with OMP_NUM_THREADS=2";
  }
#if defined(KDIST_ENABLE_CBLAS) && defined(OPENBLAS_VERSION)
  if (openblas_get_parallel() == 0) {
    GTEST_SKIP() << "OpenBLAS is its serial variant: threads per rank need "
                    "libopenblas-openmp-dev (or -pthread-dev)";
  }
  const int asked = std::atoi(omp);
  EXPECT_EQ(ops::host_gemm_threads(), std::min(asked, openblas_get_num_procs()));
  Mat<float> A("A", 301, 257), B("B", 257, 263), C("C", 301, 263), C1("C1", 301, 263);
  for (std::size_t i = 0; i < A.size(); ++i) A.data()[i] = float(int(i * 37 % 101) - 50) / 64.0f;
  for (std::size_t i = 0; i < B.size(); ++i) B.data()[i] = float(int(i * 53 % 97) - 48) / 64.0f;
  ops::matmul(A, B, C);
  openblas_set_num_threads(1);
  ops::matmul(A, B, C1);
  openblas_set_num_threads(asked);
  for (std::size_t i = 0; i < C.size(); ++i) {
    ASSERT_NEAR(C.data()[i], C1.data()[i], 1e-4f * (1.0f + std::abs(C1.data()[i]))) << i;
  }
#else
  EXPECT_EQ(ops::host_gemm_threads(), 1);
#endif
#if defined(_OPENMP)
  // The host kernels that share their blocks among the threads (Adam's update, dropout, GELU,
  // attention's heads, layer norm, the cross-entropy's row kernels) give the one-thread bits.
  EXPECT_EQ(ops::detail::host_kernel_threads(), asked);
  const auto x = random_matrix<float>(512, 1024, "x");
  const auto grad = random_matrix<float>(512, 1024, "grad");
  const ops::DropoutParams params{1337, kdist::stream_id("dropout"), 3, 0.4};
  using Mask = Kokkos::View<std::uint8_t*, Kokkos::LayoutRight, Kokkos::HostSpace>;
  using Heads = Kokkos::View<float****, Kokkos::LayoutRight, Kokkos::HostSpace>;
  const auto heads = [](const char* name) {  // (batch 2, seq 48, heads 4, head_dim 16)
    Heads h(std::string(name), 2, 48, 4, 16);
    const auto key = kdist::random_key(5, kdist::stream_id(name));
    for (std::size_t i = 0; i < h.size(); ++i) h.data()[i] = kdist::uniform01(key, i) - 0.5f;
    return h;
  };
  const Heads q = heads("q"), k = heads("k"), v = heads("v"), dout = heads("dout");
  using Vec = Kokkos::View<float*, Kokkos::LayoutRight, Kokkos::HostSpace>;
  const auto gamma = random_matrix<float>(1, 1024, "gamma");
  const auto beta = random_matrix<float>(1, 1024, "beta");
  const Vec gamma_v(gamma.data(), 1024), beta_v(beta.data(), 1024);
  Kokkos::View<int*, Kokkos::HostSpace> targets("targets", 512);
  for (std::size_t i = 0; i < 512; ++i) targets(i) = int(i * 131 % 1500);  // some off this block
  struct Out {
    Mat<float> param, y, dx, gelu, dgelu, norm, dnorm, st, dlogits;
    Vec mean, rstd, dgamma, dbeta, row_max;
    Mask mask;
    Heads probs, out, dq, dk, dv;
  };
  const auto run = [&](int threads) {
    omp_set_num_threads(threads);
    Out o{clone(x),
          Mat<float>("y", 512, 1024),
          Mat<float>("dx", 512, 1024),
          Mat<float>("gelu", 512, 1024),
          Mat<float>("dgelu", 512, 1024),
          Mat<float>("norm", 512, 1024),
          Mat<float>("dnorm", 512, 1024),
          Mat<float>("st", 512, 2),
          Mat<float>("dlogits", 512, 1024),
          Vec("mean", 512),
          Vec("rstd", 512),
          Vec("dgamma", 1024),
          Vec("dbeta", 1024),
          Vec("row_max", 512),
          Mask("mask", 512 * 1024),
          Heads("probs", 2, 4, 48, 48),
          Heads("out", 2, 48, 4, 16),
          Heads("dq", 2, 48, 4, 16),
          Heads("dk", 2, 48, 4, 16),
          Heads("dv", 2, 48, 4, 16)};
    kdist::Adam adam;
    auto m_slot = kdist::make_slot(o.param, "m"), v_slot = kdist::make_slot(o.param, "v");
    for (int s = 0; s < 2; ++s) {
      adam.update(o.param, grad, m_slot, v_slot);
      adam.finish_step();
    }
    ops::dropout(x, o.y, o.mask, params);
    ops::dropout_backward(grad, o.dx, o.mask, 0.4);
    ops::gelu(x, o.gelu);
    ops::gelu_backward(x, grad, o.dgelu);
    ops::attention_forward(q, k, v, o.probs, o.out, 0.25f, true);
    ops::attention_backward(q, k, v, o.probs, dout, o.dq, o.dk, o.dv, 0.25f, true);
    ops::layer_norm_forward(x, gamma_v, beta_v, 1e-5, o.norm, o.mean, o.rstd);
    ops::layer_norm_backward_input(x, grad, gamma_v, o.mean, o.rstd, o.dnorm);
    ops::layer_norm_backward_params(x, grad, o.mean, o.rstd, o.dgamma, o.dbeta);
    ops::row_max(x, o.row_max);
    ops::sum_exp_and_target(x, o.row_max, targets, 100, o.st);
    ops::sparse_xent_grad(x, o.row_max, o.st, targets, 100, 0.5f, o.dlogits);
    return o;
  };
  const Out one = run(1);
  const Out many = run(asked);
  EXPECT_EQ(max_diff(one.param, many.param), 0.0);
  EXPECT_EQ(max_diff(one.y, many.y), 0.0);
  EXPECT_EQ(max_diff(one.dx, many.dx), 0.0);
  EXPECT_EQ(std::memcmp(one.mask.data(), many.mask.data(), one.mask.size()), 0);
  EXPECT_EQ(max_diff(one.gelu, many.gelu), 0.0);
  EXPECT_EQ(max_diff(one.dgelu, many.dgelu), 0.0);
  EXPECT_EQ(max_diff(one.norm, many.norm), 0.0);
  EXPECT_EQ(max_diff(one.dnorm, many.dnorm), 0.0);
  EXPECT_EQ(max_diff(one.st, many.st), 0.0);
  EXPECT_EQ(max_diff(one.dlogits, many.dlogits), 0.0);
  for (auto [a, b] : {std::pair{one.mean, many.mean}, std::pair{one.rstd, many.rstd},
                      std::pair{one.dgamma, many.dgamma}, std::pair{one.dbeta, many.dbeta},
                      std::pair{one.row_max, many.row_max}}) {
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0) << a.label();
  }
  for (auto [a, b] :
       {std::pair{one.probs, many.probs}, std::pair{one.out, many.out}, std::pair{one.dq, many.dq},
        std::pair{one.dk, many.dk}, std::pair{one.dv, many.dv}}) {
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0) << a.label();
  }
#endif
}

TEST(Backend, AutomaticPicksEigenOnHostMemory) {
  static_assert(ops::uses_eigen_v<ops::AutoBackend, Mat<float>, Mat<const float>>);
  static_assert(ops::uses_eigen_v<ops::EigenBackend, Mat<float>>);
  static_assert(!ops::uses_eigen_v<ops::KokkosBackend, Mat<float>>);
  static_assert(ops::runs_on_host_v<Mat<double>>);
}

// ---- matmul -----------------------------------------------------------------------------------

template <class T>
Mat<T> naive_matmul(const Mat<T>& A, const Mat<T>& B, const Mat<T>& C0, Op op_a, Op op_b, T alpha,
                    T beta) {
  const bool ta = op_a == Op::transpose, tb = op_b == Op::transpose;
  const std::size_t m = ta ? A.extent(1) : A.extent(0);
  const std::size_t k = ta ? A.extent(0) : A.extent(1);
  const std::size_t n = tb ? B.extent(0) : B.extent(1);
  Mat<T> C("naive", m, n);
  for (std::size_t i = 0; i < m; ++i) {
    for (std::size_t j = 0; j < n; ++j) {
      long double s = 0;
      for (std::size_t p = 0; p < k; ++p) {
        s += static_cast<long double>(ta ? A(p, i) : A(i, p)) * (tb ? B(j, p) : B(p, j));
      }
      C(i, j) = static_cast<T>(alpha * static_cast<T>(s) + (beta == T(0) ? T(0) : beta * C0(i, j)));
    }
  }
  return C;
}

TYPED_TEST(Ops, MatmulAllTransposesAndScalars) {
  using T = TypeParam;
  const std::size_t m = 7, k = 5, n = 3;
  for (Op op_a : {Op::none, Op::transpose}) {
    for (Op op_b : {Op::none, Op::transpose}) {
      auto A = op_a == Op::none ? random_matrix<T>(m, k, "A") : random_matrix<T>(k, m, "At");
      auto B = op_b == Op::none ? random_matrix<T>(k, n, "B") : random_matrix<T>(n, k, "Bt");
      auto C0 = random_matrix<T>(m, n, "C0");
      for (auto scalars : {std::pair<T, T>{1, 0}, {T(1.5), T(0.5)}, {T(-2), T(1)}}) {
        const T alpha = scalars.first;  // not a structured binding: clang 14 cannot capture one
        const T beta = scalars.second;
        const auto expected = naive_matmul(A, B, C0, op_a, op_b, alpha, beta);
        for_each_backend([&](auto backend) {
          auto C = clone(C0);
          ops::matmul(A, B, C, op_a, op_b, alpha, beta, backend);
          EXPECT_LT(max_diff(C, expected), tolerance<T>() * 10)
              << "op_a " << int(op_a) << " op_b " << int(op_b) << " alpha " << alpha;
        });
      }
    }
  }
}

TYPED_TEST(Ops, MatmulBetaZeroIgnoresGarbageInC) {
  using T = TypeParam;
  auto A = random_matrix<T>(4, 6, "A");
  auto B = random_matrix<T>(6, 5, "B");
  auto C0 = random_matrix<T>(4, 5, "C0");
  const auto expected = naive_matmul(A, B, C0, Op::none, Op::none, T(1), T(0));
  for_each_backend([&](auto backend) {
    Mat<T> C("C", 4, 5);
    Kokkos::deep_copy(C, std::numeric_limits<T>::quiet_NaN());
    ops::matmul(A, B, C, Op::none, Op::none, T(1), T(0), backend);
    EXPECT_LT(max_diff(C, expected), tolerance<T>() * 10);
  });
}

TYPED_TEST(Ops, MatmulDenseLayerShapesEigenMatchesKokkos) {
  using T = TypeParam;
  // Dense forward, dW = X^T dY and dX = dY W^T at the seeds' sizes.
  auto X = random_matrix<T>(64, 784, "X");
  auto W = random_matrix<T>(784, 200, "W", 0.05);
  auto dY = random_matrix<T>(64, 200, "dY");
  Mat<T> y1("y1", 64, 200), y2("y2", 64, 200), g1("g1", 784, 200), g2("g2", 784, 200);
  Mat<T> x1("x1", 64, 784), x2("x2", 64, 784);
  ops::matmul(X, W, y1, Op::none, Op::none, T(1), T(0), ops::backend::eigen);
  ops::matmul(X, W, y2, Op::none, Op::none, T(1), T(0), ops::backend::kokkos);
  ops::matmul(X, dY, g1, Op::transpose, Op::none, T(1), T(0), ops::backend::eigen);
  ops::matmul(X, dY, g2, Op::transpose, Op::none, T(1), T(0), ops::backend::kokkos);
  ops::matmul(dY, W, x1, Op::none, Op::transpose, T(1), T(0), ops::backend::eigen);
  ops::matmul(dY, W, x2, Op::none, Op::transpose, T(1), T(0), ops::backend::kokkos);
  const double tol = std::is_same_v<T, float> ? 2e-4 : 1e-11;
  EXPECT_LT(max_diff(y1, y2), tol);
  EXPECT_LT(max_diff(g1, g2), tol);
  EXPECT_LT(max_diff(x1, x2), tol);
}

TYPED_TEST(Ops, MatmulOnRowSubviewsAndPaddedViews) {
  using T = TypeParam;
  auto big = random_matrix<T>(10, 6, "big");
  auto A = Kokkos::subview(big, std::make_pair(2, 6), Kokkos::ALL);  // rows 2..5, LayoutRight
  static_assert(std::is_same_v<typename decltype(A)::array_layout, Kokkos::LayoutRight>);
  auto B = random_matrix<T>(6, 20, "B");
  Mat<T> Acopy("Acopy", 4, 6);
  Kokkos::deep_copy(Acopy, A);
  Mat<T> none("none", 4, 20);
  const auto expected = naive_matmul(Acopy, B, none, Op::none, Op::none, T(1), T(0));
  // A padded result View: its row stride exceeds its columns (the strided Eigen maps).
  Mat<T> C(Kokkos::view_alloc(std::string("C"), Kokkos::AllowPadding), 4, 20);
#if KOKKOS_VERSION < 40000
  ASSERT_GT(static_cast<std::size_t>(C.stride(0)), C.extent(1)) << "Kokkos did not pad";
#endif
  for_each_backend([&](auto backend) {
    ops::matmul(A, B, C, Op::none, Op::none, T(1), T(0), backend);
    EXPECT_LT(max_diff(C, expected), tolerance<T>() * 10);
    // Row-wise kernels on the padded View too.
    Mat<T> packed("packed", 4, 20);
    Kokkos::deep_copy(packed, C);
    ops::softmax_inplace(C, backend);
    ops::softmax_inplace(packed, backend);
    EXPECT_EQ(max_diff(C, packed), 0.0);
    ops::relu_inplace(C, backend);
  });
}

TEST(OpsErrors, MatmulShapeMismatchAndAliasing) {
  auto A = random_matrix<float>(4, 5, "A");
  auto B = random_matrix<float>(6, 3, "B");
  Mat<float> C("C", 4, 3);
  try {
    ops::matmul(A, B, C);
    FAIL() << "no throw";
  } catch (const kdist::ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("op(A) is 4x5 and op(B) is 6x3"), std::string::npos)
        << e.what();
  }
  auto B2 = random_matrix<float>(5, 3, "B2");
  Mat<float> Cbad("Cbad", 3, 3);
  try {
    ops::matmul(A, B2, Cbad);
    FAIL() << "no throw";
  } catch (const kdist::ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("C is 3x3, but op(A) * op(B) is 4x3"), std::string::npos)
        << e.what();
  }
  auto S = random_matrix<float>(4, 4, "S");
  auto I = random_matrix<float>(4, 4, "I");
  EXPECT_THROW(ops::matmul(S, I, S), kdist::ValueError);
  EXPECT_THROW(ops::matmul(I, S, S, Op::none, Op::none, 1.0f, 0.0f, ops::backend::kokkos),
               kdist::ValueError);
}

// ---- activations ------------------------------------------------------------------------------

TYPED_TEST(Ops, ReluAndBackward) {
  using T = TypeParam;
  auto x = random_matrix<T>(9, 13, "x");
  x(0, 0) = T(0);
  auto dy = random_matrix<T>(9, 13, "dy");
  for_each_backend([&](auto backend) {
    Mat<T> y("y", 9, 13);
    ops::relu(x, y, backend);
    auto inplace = clone(x);
    ops::relu_inplace(inplace, backend);
    Mat<T> dx("dx", 9, 13);
    ops::relu_backward(y, dy, dx, backend);
    auto dinplace = clone(dy);
    ops::relu_backward_inplace(y, dinplace, backend);
    for (std::size_t i = 0; i < 9; ++i) {
      for (std::size_t j = 0; j < 13; ++j) {
        const T expect = x(i, j) > T(0) ? x(i, j) : T(0);
        EXPECT_EQ(y(i, j), expect);
        EXPECT_EQ(inplace(i, j), expect);
        const T dexpect = x(i, j) > T(0) ? dy(i, j) : T(0);  // gradient 0 at x == 0
        EXPECT_EQ(dx(i, j), dexpect);
        EXPECT_EQ(dinplace(i, j), dexpect);
      }
    }
  });
}

TYPED_TEST(Ops, SoftmaxStableAndBackward) {
  using T = TypeParam;
  auto x = random_matrix<T>(6, 10, "x", 3.0);
  for (std::size_t j = 0; j < 10; ++j) x(5, j) = T(1000) + T(j);  // would overflow exp naively
  auto dy = random_matrix<T>(6, 10, "dy");
  // naive: exp(x - max) / sum in long double
  Mat<T> expect("expect", 6, 10), dexpect("dexpect", 6, 10);
  for (std::size_t i = 0; i < 6; ++i) {
    long double mx = x(i, 0), s = 0;
    for (std::size_t j = 0; j < 10; ++j) mx = std::max<long double>(mx, x(i, j));
    for (std::size_t j = 0; j < 10; ++j) s += std::exp(static_cast<long double>(x(i, j)) - mx);
    for (std::size_t j = 0; j < 10; ++j) {
      expect(i, j) = static_cast<T>(std::exp(static_cast<long double>(x(i, j)) - mx) / s);
    }
  }
  for (std::size_t i = 0; i < 6; ++i) {
    // dx_j = sum_k dy_k dy_k/dx_j with d y_k / d x_j = y_k (delta_kj - y_j)
    for (std::size_t j = 0; j < 10; ++j) {
      long double s = 0;
      for (std::size_t k = 0; k < 10; ++k) {
        s += static_cast<long double>(dy(i, k)) * expect(i, k) * ((k == j ? 1 : 0) - expect(i, j));
      }
      dexpect(i, j) = static_cast<T>(s);
    }
  }
  for_each_backend([&](auto backend) {
    Mat<T> y("y", 6, 10);
    ops::softmax(x, y, backend);
    EXPECT_LT(max_diff(y, expect), tolerance<T>());
    for (std::size_t i = 0; i < 6; ++i) {
      T s = 0;
      for (std::size_t j = 0; j < 10; ++j) s += y(i, j);
      EXPECT_NEAR(s, 1.0, tolerance<T>());
    }
    auto inplace = clone(x);
    ops::softmax_inplace(inplace, backend);
    EXPECT_LT(max_diff(inplace, expect), tolerance<T>());
    Mat<T> dx("dx", 6, 10);
    ops::softmax_backward(y, dy, dx, backend);
    EXPECT_LT(max_diff(dx, dexpect), tolerance<T>());
    auto dinplace = clone(dy);
    ops::softmax_backward(y, dinplace, dinplace, backend);
    EXPECT_LT(max_diff(dinplace, dexpect), tolerance<T>());
  });
}

TYPED_TEST(Ops, BiasAddAndGrad) {
  using T = TypeParam;
  auto y0 = random_matrix<T>(8, 5, "y0");
  auto dy = random_matrix<T>(8, 5, "dy");
  Vec<T> b("b", 5);
  for (std::size_t j = 0; j < 5; ++j) b(j) = static_cast<T>(0.25 * double(j) - 0.5);
  for_each_backend([&](auto backend) {
    auto y = clone(y0);
    ops::bias_add(y, b, backend);
    for (std::size_t i = 0; i < 8; ++i) {
      for (std::size_t j = 0; j < 5; ++j) EXPECT_EQ(y(i, j), y0(i, j) + b(j));
    }
    Vec<T> db("db", 5);
    Kokkos::deep_copy(db, T(123));  // overwritten, not accumulated
    ops::bias_grad(dy, db, backend);
    for (std::size_t j = 0; j < 5; ++j) {
      long double s = 0;
      for (std::size_t i = 0; i < 8; ++i) s += dy(i, j);
      EXPECT_NEAR(db(j), static_cast<double>(s), tolerance<T>() * 10);
    }
    Mat<T> empty("empty", 0, 5);
    ops::bias_grad(empty, db, backend);
    for (std::size_t j = 0; j < 5; ++j) EXPECT_EQ(db(j), T(0));
  });
}

// Bias + ReLU fused (issue 21): bitwise the separate kernels' results, each backend, in both
// directions, on shapes that are not multiples of a SIMD width.
TYPED_TEST(Ops, BiasReluFusedIsBitwiseTheSeparateKernels) {
  using T = TypeParam;
  // (Not a structured binding: clang 14 cannot capture one in the lambdas below.)
  for (const auto& shape : {std::pair<std::size_t, std::size_t>{67, 37}, {128, 200}, {1, 3}}) {
    const std::size_t rows = shape.first, cols = shape.second;
    auto z0 = random_matrix<T>(rows, cols, "z0");
    auto d0 = random_matrix<T>(rows, cols, "d0");
    Vec<T> b("b", cols);
    for (std::size_t j = 0; j < cols; ++j) b(j) = static_cast<T>(0.01 * double(j % 50) - 0.25);
    for_each_backend([&](auto backend) {
      auto separate = clone(z0);
      ops::bias_add(separate, b, backend);
      ops::relu_inplace(separate, backend);
      auto fused = clone(z0);
      ops::bias_add_relu(fused, b, backend);
      std::size_t zeros = 0;
      for (std::size_t i = 0; i < rows; ++i) {
        for (std::size_t j = 0; j < cols; ++j) {
          ASSERT_EQ(fused(i, j), separate(i, j)) << i << "," << j;
          zeros += fused(i, j) == T(0);
        }
      }
      if (rows * cols > 100) {  // the mask does something
        EXPECT_GT(zeros, rows * cols / 10);
      }
      auto d_separate = clone(d0);
      Vec<T> db_separate("db_separate", cols);
      ops::relu_backward_inplace(separate, d_separate, backend);
      ops::bias_grad(d_separate, db_separate, backend);
      auto d_fused = clone(d0);
      Vec<T> db_fused("db_fused", cols);
      Kokkos::deep_copy(db_fused, T(123));  // overwritten, not accumulated
      ops::relu_backward_bias_grad(fused, d_fused, db_fused, backend);
      for (std::size_t j = 0; j < cols; ++j) {
        ASSERT_EQ(db_fused(j), db_separate(j)) << j;
        for (std::size_t i = 0; i < rows; ++i) ASSERT_EQ(d_fused(i, j), d_separate(i, j));
      }
    });
  }
}

TEST(OpsErrors, ActivationShapeMismatch) {
  Mat<float> x("x", 3, 4), y("y", 4, 3), d("d", 3, 4);
  Vec<float> b("b", 3);
  auto has = [](auto&& f, const char* text) {
    try {
      f();
      ADD_FAILURE() << "no throw, expected " << text;
    } catch (const kdist::ValueError& e) {
      EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << e.what();
    }
  };
  has([&] { ops::relu(x, y); }, "kdist::ops::relu: y is 4x3, expected 3x4");
  has([&] { ops::relu_backward(x, y, d); }, "kdist::ops::relu_backward: dy is 4x3, expected 3x4");
  has([&] { ops::relu_backward(x, d, y); }, "kdist::ops::relu_backward: dx is 4x3, expected 3x4");
  has([&] { ops::softmax(x, y); }, "kdist::ops::softmax: y is 4x3, expected 3x4");
  has([&] { ops::softmax_backward(x, y, d); }, "kdist::ops::softmax_backward: dy is 4x3");
  has([&] { ops::softmax_backward(x, d, y); }, "kdist::ops::softmax_backward: dx is 4x3");
  has([&] { ops::bias_add(x, b); }, "kdist::ops::bias_add: the bias has 3 elements, expected 4");
  has([&] { ops::bias_grad(x, b); }, "kdist::ops::bias_grad: db has 3 elements, expected 4");
  has([&] { ops::bias_add_relu(x, b); },
      "kdist::ops::bias_add_relu: the bias has 3 elements, expected 4");
  has([&] { ops::relu_backward_bias_grad(x, y, b); },
      "kdist::ops::relu_backward_bias_grad: d is 4x3, expected 3x4");
  has([&] { ops::relu_backward_bias_grad(x, d, b); },
      "kdist::ops::relu_backward_bias_grad: db has 3 elements, expected 4");
}

// ---- losses -----------------------------------------------------------------------------------

//! Naive per-example losses and gradient of (sum * scale), in long double.
template <class T>
struct Naive {
  double sum = 0;
  Mat<T> grad;
};

template <class T>
Mat<T> one_hot(const Labels& l, std::size_t classes) {
  Mat<T> t("onehot", l.extent(0), classes);
  for (std::size_t i = 0; i < l.extent(0); ++i) t(i, l(i)) = T(1);
  return t;
}

template <class T>
Naive<T> naive_mse(const Mat<T>& p, const Mat<T>& t, T scale) {
  Naive<T> r{0, Mat<T>("g", p.extent(0), p.extent(1))};
  const auto c = static_cast<long double>(p.extent(1));
  for (std::size_t i = 0; i < p.extent(0); ++i) {
    long double s = 0;
    for (std::size_t j = 0; j < p.extent(1); ++j) {
      const long double d = static_cast<long double>(p(i, j)) - t(i, j);
      s += d * d;
      r.grad(i, j) = static_cast<T>(2 * d / c * scale);
    }
    r.sum += static_cast<double>(s / c);
  }
  return r;
}

template <class T>
Naive<T> naive_softmax_xent(const Mat<T>& z, const Mat<T>& t, T scale) {
  Naive<T> r{0, Mat<T>("g", z.extent(0), z.extent(1))};
  for (std::size_t i = 0; i < z.extent(0); ++i) {
    long double mx = z(i, 0), s = 0, tsum = 0;
    for (std::size_t j = 0; j < z.extent(1); ++j) mx = std::max<long double>(mx, z(i, j));
    for (std::size_t j = 0; j < z.extent(1); ++j) s += std::exp(z(i, j) - mx);
    const long double lse = mx + std::log(s);
    for (std::size_t j = 0; j < z.extent(1); ++j) {
      r.sum += static_cast<double>(t(i, j) * (lse - z(i, j)));
      tsum += t(i, j);
    }
    for (std::size_t j = 0; j < z.extent(1); ++j) {
      r.grad(i, j) = static_cast<T>((std::exp(z(i, j) - lse) * tsum - t(i, j)) * scale);
    }
  }
  return r;
}

template <class T>
Naive<T> naive_xent(const Mat<T>& p, const Mat<T>& t, T scale) {
  // Keras: q = p / sum p; c = clip(q, eps, 1 - eps); loss = -sum t log c.
  Naive<T> r{0, Mat<T>("g", p.extent(0), p.extent(1))};
  const long double eps = static_cast<T>(1e-7), hi = T(1) - static_cast<T>(1e-7);
  const std::size_t n = p.extent(1);
  for (std::size_t i = 0; i < p.extent(0); ++i) {
    long double s = 0;
    for (std::size_t j = 0; j < n; ++j) s += p(i, j);
    std::vector<long double> gq(n), q(n);
    long double dot = 0;
    for (std::size_t j = 0; j < n; ++j) {
      q[j] = p(i, j) / s;
      const long double c = std::clamp(q[j], eps, hi);
      r.sum -= static_cast<double>(t(i, j) * std::log(c));
      gq[j] = (q[j] > eps && q[j] < hi) ? -t(i, j) / c : 0;
      dot += gq[j] * q[j];
    }
    for (std::size_t j = 0; j < n; ++j) r.grad(i, j) = static_cast<T>((gq[j] - dot) / s * scale);
  }
  return r;
}

template <class T>
Mat<T> probabilities(std::size_t rows, std::size_t cols, const char* name) {
  auto z = random_matrix<T>(rows, cols, name, 2.0);
  ops::softmax_inplace(z);
  return z;
}

TYPED_TEST(Ops, MeanSquaredErrorLabelsAndDense) {
  using T = TypeParam;
  const std::size_t rows = 12, classes = 10;
  auto p = probabilities<T>(rows, classes, "p");
  auto labels = make_labels(rows, classes);
  auto dense = random_matrix<T>(rows, classes, "target");
  const T scale = T(1) / T(256);
  const auto n_labels = naive_mse(p, one_hot<T>(labels, classes), scale);
  const auto n_dense = naive_mse(p, dense, scale);
  for_each_backend([&](auto backend) {
    Mat<T> g("g", rows, classes);
    EXPECT_NEAR(ops::mean_squared_error(p, labels, g, scale, backend), n_labels.sum,
                1e-5 * n_labels.sum);
    EXPECT_LT(max_diff(g, n_labels.grad), tolerance<T>());
    EXPECT_NEAR(ops::mean_squared_error(p, labels, backend), n_labels.sum, 1e-5 * n_labels.sum);
    EXPECT_NEAR(ops::mean_squared_error(p, dense, g, scale, backend), n_dense.sum,
                1e-5 * n_dense.sum);
    EXPECT_LT(max_diff(g, n_dense.grad), tolerance<T>());
    EXPECT_NEAR(ops::mean_squared_error(p, dense, backend), n_dense.sum, 1e-5 * n_dense.sum);
    auto inplace = clone(p);  // grad may be pred
    ops::mean_squared_error(inplace, labels, inplace, scale, backend);
    EXPECT_LT(max_diff(inplace, n_labels.grad), tolerance<T>());
  });
}

TYPED_TEST(Ops, SoftmaxCrossEntropyFromLogits) {
  using T = TypeParam;
  const std::size_t rows = 12, classes = 10;
  auto z = random_matrix<T>(rows, classes, "z", 3.0);
  for (std::size_t j = 0; j < classes; ++j) z(0, j) = T(500) - T(j);  // stable for large logits
  auto labels = make_labels(rows, classes);
  auto soft = probabilities<T>(rows, classes, "soft");  // soft targets summing to 1
  const T scale = T(1) / T(64);
  const auto n_labels = naive_softmax_xent(z, one_hot<T>(labels, classes), scale);
  const auto n_soft = naive_softmax_xent(z, soft, scale);
  for_each_backend([&](auto backend) {
    Mat<T> g("g", rows, classes);
    const double s = ops::softmax_cross_entropy(z, labels, g, scale, backend);
    EXPECT_TRUE(std::isfinite(s));
    EXPECT_NEAR(s, n_labels.sum, 1e-5 * n_labels.sum);
    EXPECT_LT(max_diff(g, n_labels.grad), tolerance<T>());
    EXPECT_NEAR(ops::softmax_cross_entropy(z, labels, backend), n_labels.sum, 1e-5 * n_labels.sum);
    EXPECT_NEAR(ops::softmax_cross_entropy(z, soft, g, scale, backend), n_soft.sum,
                1e-5 * n_soft.sum);
    EXPECT_LT(max_diff(g, n_soft.grad), tolerance<T>());
    EXPECT_NEAR(ops::softmax_cross_entropy(z, soft, backend), n_soft.sum, 1e-5 * n_soft.sum);
  });
}

TYPED_TEST(Ops, CrossEntropyFromProbabilitiesAsKeras) {
  using T = TypeParam;
  const std::size_t rows = 12, classes = 10;
  auto p = probabilities<T>(rows, classes, "p");
  auto labels = make_labels(rows, classes);
  // Row 1: the label's probability is 0 -> clipped to 1e-7, loss -log(1e-7), no gradient there.
  p(1, labels(1)) = T(0);
  // Row 2: not normalised (Keras divides by the row sum first).
  for (std::size_t j = 0; j < classes; ++j) p(2, j) *= T(3);
  auto dense = probabilities<T>(rows, classes, "dense");
  const T scale = T(1) / T(32);
  const auto n_labels = naive_xent(p, one_hot<T>(labels, classes), scale);
  const auto n_dense = naive_xent(p, dense, scale);
  for_each_backend([&](auto backend) {
    Mat<T> g("g", rows, classes);
    const double s = ops::cross_entropy(p, labels, g, scale, ops::keras_epsilon, backend);
    EXPECT_NEAR(s, n_labels.sum, 1e-5 * n_labels.sum);
    EXPECT_LT(max_diff(g, n_labels.grad), tolerance<T>());
    EXPECT_NEAR(ops::cross_entropy(p, labels, ops::keras_epsilon, backend), n_labels.sum,
                1e-5 * n_labels.sum);
    EXPECT_NEAR(ops::cross_entropy(p, dense, g, scale, ops::keras_epsilon, backend), n_dense.sum,
                1e-5 * n_dense.sum);
    EXPECT_LT(max_diff(g, n_dense.grad), tolerance<T>());
    EXPECT_NEAR(ops::cross_entropy(p, dense, ops::keras_epsilon, backend), n_dense.sum,
                1e-5 * n_dense.sum);
  });
  // The clipped row contributes -log(eps) (eps in T, as Keras clips in the variable's dtype).
  Mat<T> one("one", 1, classes);
  for (std::size_t j = 0; j < classes; ++j) one(0, j) = p(1, j);
  Labels l1("l1", 1);
  l1(0) = labels(1);
  EXPECT_NEAR(ops::cross_entropy(one, l1), -std::log(static_cast<double>(static_cast<T>(1e-7))),
              1e-6);
}

TYPED_TEST(Ops, FusedAndUnfusedCrossEntropyAgree) {
  using T = TypeParam;
  // softmax -> cross_entropy -> softmax_backward == softmax_cross_entropy from logits.
  const std::size_t rows = 16, classes = 10;
  auto z = random_matrix<T>(rows, classes, "z");
  auto labels = make_labels(rows, classes);
  const T scale = T(1) / T(rows);
  Mat<T> p("p", rows, classes), gp("gp", rows, classes), gz("gz", rows, classes);
  Mat<T> fused("fused", rows, classes);
  ops::softmax(z, p);
  const double s1 = ops::cross_entropy(p, labels, gp, scale);
  ops::softmax_backward(p, gp, gz);
  const double s2 = ops::softmax_cross_entropy(z, labels, fused, scale);
  const bool single = std::is_same_v<T, float>;
  EXPECT_NEAR(s1, s2, single ? 1e-4 : 1e-10);
  EXPECT_LT(max_diff(gz, fused), single ? 1e-5 : 1e-12);
}

TEST(Ops, LossGradientsMatchFiniteDifferences) {
  using T = double;
  const std::size_t rows = 5, classes = 6;
  auto z = random_matrix<T>(rows, classes, "z");
  auto labels = make_labels(rows, classes);
  auto p = probabilities<T>(rows, classes, "p");
  const T scale = 0.37;
  const double h = 1e-6;
  auto check = [&](auto loss, Mat<T> x, const char* name) {
    Mat<T> g("g", rows, classes);
    loss(x, g);
    Mat<T> dummy("dummy", rows, classes);
    for (std::size_t i = 0; i < rows; ++i) {
      for (std::size_t j = 0; j < classes; ++j) {
        const T keep = x(i, j);
        x(i, j) = keep + h;
        const double up = loss(x, dummy);
        x(i, j) = keep - h;
        const double down = loss(x, dummy);
        x(i, j) = keep;
        EXPECT_NEAR(g(i, j), scale * (up - down) / (2 * h), 1e-7) << name << " " << i << "," << j;
      }
    }
  };
  check([&](const Mat<T>& x,
            const Mat<T>& g) { return ops::mean_squared_error(x, labels, g, scale); },
        clone(p), "mse");
  check([&](const Mat<T>& x,
            const Mat<T>& g) { return ops::softmax_cross_entropy(x, labels, g, scale); },
        clone(z), "softmax_cross_entropy");
  check([&](const Mat<T>& x, const Mat<T>& g) { return ops::cross_entropy(x, labels, g, scale); },
        clone(p), "cross_entropy");
}

TYPED_TEST(Ops, CountCorrect) {
  using T = TypeParam;
  Mat<T> s("s", 4, 3);
  Labels l("l", 4);
  // row 0: argmax 2 (label 2, correct); row 1: tie between 0 and 1 -> first (0), label 1: wrong;
  // row 2: tie -> 0, label 0: correct; row 3: argmax 1, label 9 (out of range): never matches.
  const T v[4][3] = {{0, 1, 2}, {5, 5, 1}, {3, 3, 3}, {0, 4, 1}};
  const std::uint8_t lab[4] = {2, 1, 0, 9};
  for (std::size_t i = 0; i < 4; ++i) {
    l(i) = lab[i];
    for (std::size_t j = 0; j < 3; ++j) s(i, j) = v[i][j];
  }
  for_each_backend([&](auto backend) { EXPECT_EQ(ops::count_correct(s, l, backend), 2); });
}

TEST(OpsErrors, LossErrors) {
  Mat<float> p("p", 4, 3), g("g", 4, 3), gbad("gbad", 3, 4), tbad("tbad", 4, 2);
  Labels l("l", 4), lshort("lshort", 3);
  l(0) = 0;
  l(1) = 1;
  l(2) = 3;  // out of range for 3 classes
  l(3) = 2;
  auto has = [](auto&& f, const char* text) {
    try {
      f();
      ADD_FAILURE() << "no throw, expected " << text;
    } catch (const kdist::ValueError& e) {
      EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << e.what();
    }
  };
  for_each_backend([&](auto b) {
    has([&] { ops::mean_squared_error(p, l, g, 1.0f, b); },
        "kdist::ops::mean_squared_error: label 3 at row 2 is out of range [0, 3)");
    has([&] { ops::softmax_cross_entropy(p, l, g, 1.0f, b); },
        "kdist::ops::softmax_cross_entropy: label 3 at row 2 is out of range [0, 3)");
    has([&] { ops::cross_entropy(p, l, g, 1.0f, 1e-7, b); },
        "kdist::ops::cross_entropy: label 3 at row 2 is out of range [0, 3)");
  });
  l(2) = 2;
  has([&] { ops::mean_squared_error(p, lshort, g, 1.0f); },
      "kdist::ops::mean_squared_error: labels has 3 elements, expected 4");
  has([&] { ops::mean_squared_error(p, tbad, g, 1.0f); },
      "kdist::ops::mean_squared_error: the target is 4x2, expected 4x3");
  has([&] { ops::mean_squared_error(p, l, gbad, 1.0f); },
      "kdist::ops::mean_squared_error: the gradient is 3x4, expected 4x3");
  has([&] { ops::softmax_cross_entropy(p, l, gbad, 1.0f); },
      "kdist::ops::softmax_cross_entropy: the gradient is 3x4");
  has([&] { ops::softmax_cross_entropy(p, tbad); }, "the target is 4x2");
  has([&] { ops::cross_entropy(p, l, gbad, 1.0f); }, "kdist::ops::cross_entropy: the gradient");
  has([&] { ops::cross_entropy(p, lshort); }, "kdist::ops::cross_entropy: labels has 3 elements");
  has([&] { ops::count_correct(p, lshort); }, "kdist::ops::count_correct: labels has 3 elements");
}

// ---- dropout ----------------------------------------------------------------------------------

TYPED_TEST(Ops, DropoutMaskScaleAndShardInvariance) {
  using T = TypeParam;
  const std::size_t rows = 16, cols = 20;
  auto x = random_matrix<T>(rows, cols, "x");
  ops::DropoutParams params;
  params.seed = 1337;
  params.stream = kdist::stream_id("dropout");
  params.step = 5;
  params.rate = 0.4;
  for_each_backend([&](auto backend) {
    Mat<T> y("y", rows, cols);
    ops::dropout(x, y, params, backend);
    std::size_t kept = 0;
    for (std::size_t i = 0; i < rows; ++i) {
      for (std::size_t j = 0; j < cols; ++j) {
        const bool keep = kdist::dropout_keep(1337, params.stream, 5, i * cols + j, 0.4f);
        kept += keep;
        EXPECT_EQ(y(i, j), keep ? x(i, j) / (T(1) - T(0.4)) : T(0));
      }
    }
    EXPECT_GT(kept, rows * cols / 2 - 40);
    EXPECT_LT(kept, rows * cols / 2 + 80);
    // A shard (rows 4..11, cols 5..14) with its offsets draws the full tensor's elements.
    Mat<T> xs("xs", 8, 10), ys("ys", 8, 10);
    for (std::size_t i = 0; i < 8; ++i) {
      for (std::size_t j = 0; j < 10; ++j) xs(i, j) = x(i + 4, j + 5);
    }
    ops::DropoutParams shard = params;
    shard.row_offset = 4;
    shard.col_offset = 5;
    shard.global_cols = cols;
    ops::dropout(xs, ys, shard, backend);
    for (std::size_t i = 0; i < 8; ++i) {
      for (std::size_t j = 0; j < 10; ++j) EXPECT_EQ(ys(i, j), y(i + 4, j + 5));
    }
    // Backward: the same mask and scale on the gradient; in place.
    auto dy = random_matrix<T>(rows, cols, "dy");
    auto dx = clone(dy);
    ops::dropout_backward(dx, dx, params, backend);
    for (std::size_t i = 0; i < rows; ++i) {
      for (std::size_t j = 0; j < cols; ++j) {
        EXPECT_EQ(dx(i, j), y(i, j) == T(0) && x(i, j) != T(0) ? T(0) : dy(i, j) / (T(1) - T(0.4)));
      }
    }
    // In place forward equals out of place; rate 0 copies.
    auto inplace = clone(x);
    ops::dropout_inplace(inplace, params, backend);
    EXPECT_EQ(max_diff(inplace, y), 0.0);
    ops::DropoutParams none = params;
    none.rate = 0.0;
    Mat<T> copy("copy", rows, cols);
    ops::dropout(x, copy, none, backend);
    EXPECT_EQ(max_diff(copy, x), 0.0);
  });
}

// The forward keeps the mask it draws; the backward applies exactly that mask. Shards whose rows
// start inside a 64-element group of the global flat index, and whole row blocks (one flat run).
TYPED_TEST(Ops, DropoutKeepsItsMaskForTheBackward) {
  using T = TypeParam;
  using MaskView = Kokkos::View<std::uint8_t*, Kokkos::LayoutRight, Kokkos::HostSpace>;
  struct Case {
    std::size_t rows, cols;
    std::uint64_t row_offset, col_offset, global_cols;
  };
  for (const Case& c : {Case{7, 150, 3, 37, 200}, Case{9, 130, 5, 0, 0}, Case{3, 1, 2, 63, 65}}) {
    SCOPED_TRACE("rows " + std::to_string(c.rows) + " cols " + std::to_string(c.cols));
    const auto x = random_matrix<T>(c.rows, c.cols, "x");
    const auto dy = random_matrix<T>(c.rows, c.cols, "dy");
    ops::DropoutParams params{
        1337, kdist::stream_id("dropout"), 8, 0.4, c.row_offset, c.col_offset, c.global_cols};
    const std::uint64_t gc = c.global_cols == 0 ? c.cols : c.global_cols;
    const auto key = kdist::random_key(1337, kdist::stream_id("dropout"), 8);
    for_each_backend([&](auto backend) {
      Mat<T> y("y", c.rows, c.cols), y2("y2", c.rows, c.cols), dx("dx", c.rows, c.cols);
      MaskView mask("mask", c.rows * c.cols);
      ops::dropout(x, y, mask, params, backend);
      ops::dropout(x, y2, params, backend);
      ops::dropout_backward(dy, dx, mask, 0.4, backend);
      std::size_t kept = 0;
      for (std::size_t i = 0; i < c.rows; ++i) {
        for (std::size_t j = 0; j < c.cols; ++j) {
          // Naive reference: the scalar generator at the global flat index.
          const std::uint64_t g = (c.row_offset + i) * gc + c.col_offset + j;
          const bool keep = kdist::dropout_uniform(key, g) < 1.0f - 0.4f;
          kept += keep;
          ASSERT_EQ(mask(i * c.cols + j), keep ? 1 : 0) << i << ", " << j;
          EXPECT_EQ(y(i, j), keep ? x(i, j) / (T(1) - T(0.4)) : T(0));
          EXPECT_EQ(y2(i, j), y(i, j));
          EXPECT_EQ(dx(i, j), keep ? dy(i, j) / (T(1) - T(0.4)) : T(0));
        }
      }
      if (c.rows * c.cols > 100) {
        EXPECT_NEAR(double(kept) / double(c.rows * c.cols), 0.6, 0.1);
      }
      // The mask-free backward draws the same mask again.
      Mat<T> dx2("dx2", c.rows, c.cols);
      ops::dropout_backward(dy, dx2, params, backend);
      EXPECT_EQ(max_diff(dx2, dx), 0.0);
      // In place, with the mask.
      auto inplace = clone(dy);
      ops::dropout_backward(inplace, inplace, mask, 0.4, backend);
      EXPECT_EQ(max_diff(inplace, dx), 0.0);
    });
  }
}

TYPED_TEST(Ops, DropoutBlockKeepsItsMask) {
  using T = TypeParam;
  using Block = Kokkos::View<T***, Kokkos::LayoutRight, Kokkos::HostSpace>;
  using MaskView = Kokkos::View<std::uint8_t*, Kokkos::LayoutRight, Kokkos::HostSpace>;
  struct Case {
    std::array<std::size_t, 3> local;
    std::array<std::uint64_t, 3> offsets, global;
  };
  for (const Case& c :
       {Case{{2, 3, 70}, {1, 2, 10}, {4, 6, 100}}, Case{{2, 6, 100}, {1, 0, 0}, {4, 6, 100}},
        Case{{3, 2, 5}, {0, 1, 0}, {3, 4, 5}}}) {
    const std::size_t n = c.local[0] * c.local[1] * c.local[2];
    Block x("x", c.local[0], c.local[1], c.local[2]), dy("dy", c.local[0], c.local[1], c.local[2]);
    const auto key0 = kdist::random_key(5, kdist::stream_id("fill"));
    for (std::size_t f = 0; f < n; ++f) {
      x.data()[f] = static_cast<T>(kdist::normal(key0, f));
      dy.data()[f] = static_cast<T>(kdist::normal(key0, f + n));
    }
    ops::DropoutBlockParams<3> p;
    p.seed = 3;
    p.stream = kdist::stream_id("block0/dropout");
    p.step = 12;
    p.rate = 0.25;
    p.offsets = c.offsets;
    p.global_extents = c.global;
    const auto key = kdist::random_key(3, p.stream, 12);
    for_each_backend([&](auto backend) {
      Block y("y", c.local[0], c.local[1], c.local[2]),
          y2("y2", c.local[0], c.local[1], c.local[2]);
      Block dx("dx", c.local[0], c.local[1], c.local[2]);
      MaskView mask("mask", n);
      ops::dropout_block(x, y, mask, p, backend);
      ops::dropout_block(x, y2, p, backend);
      ops::dropout_backward(dy, dx, mask, 0.25, backend);
      for (std::size_t a = 0; a < c.local[0]; ++a) {
        for (std::size_t b = 0; b < c.local[1]; ++b) {
          for (std::size_t d = 0; d < c.local[2]; ++d) {
            const std::uint64_t g =
                ((c.offsets[0] + a) * c.global[1] + c.offsets[1] + b) * c.global[2] + c.offsets[2] +
                d;
            const bool keep = kdist::dropout_uniform(key, g) < 0.75f;
            const std::size_t f = (a * c.local[1] + b) * c.local[2] + d;
            ASSERT_EQ(mask(f), keep ? 1 : 0) << f;
            EXPECT_EQ(y(a, b, d), keep ? x(a, b, d) / T(0.75) : T(0));
            EXPECT_EQ(y2(a, b, d), y(a, b, d));
            EXPECT_EQ(dx(a, b, d), keep ? dy(a, b, d) / T(0.75) : T(0));
          }
        }
      }
    });
  }
}

TEST(OpsErrors, DropoutMaskErrors) {
  using MaskView = Kokkos::View<std::uint8_t*, Kokkos::LayoutRight, Kokkos::HostSpace>;
  Mat<float> x("x", 4, 6), dx("dx", 4, 6), dxbad("dxbad", 4, 5);
  MaskView mask("mask", 24), small("small", 23);
  auto has = [&](auto&& f, const char* text) {
    try {
      f();
      ADD_FAILURE() << "no throw, expected " << text;
    } catch (const kdist::ValueError& e) {
      EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << e.what();
    }
  };
  ops::DropoutParams p;
  p.rate = 0.5;
  has([&] { ops::dropout(x, x, small, p); },
      "kdist::ops::dropout: the mask has 23 elements, expected 24");
  has([&] { ops::dropout_backward(x, dx, small, 0.5); },
      "kdist::ops::dropout_backward: the mask has 23 elements, expected 24");
  has([&] { ops::dropout_backward(x, dxbad, mask, 0.5); }, "dx is 4x5, expected 4x6");
  has([&] { ops::dropout_backward(x, dx, mask, 1.0); }, "the dropout rate must be in [0, 1)");
  Kokkos::View<float***, Kokkos::LayoutRight, Kokkos::HostSpace> b("b", 2, 3, 4);
  ops::DropoutBlockParams<3> bp;
  bp.rate = 0.5;
  bp.global_extents = {2, 3, 4};
  has([&] { ops::dropout_block(b, b, small, bp); },
      "kdist::ops::dropout_block: the mask has 23 elements, expected 24");
}

TEST(OpsErrors, DropoutErrors) {
  Mat<float> x("x", 4, 6), ybad("ybad", 4, 5);
  auto has = [&](ops::DropoutParams p, const char* text) {
    try {
      ops::dropout_inplace(x, p);
      ADD_FAILURE() << "no throw, expected " << text;
    } catch (const kdist::ValueError& e) {
      EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << e.what();
    }
  };
  ops::DropoutParams p;
  p.rate = 1.0;
  has(p, "the dropout rate must be in [0, 1)");
  p.rate = -0.1;
  has(p, "the dropout rate must be in [0, 1)");
  p.rate = std::numeric_limits<double>::quiet_NaN();
  has(p, "the dropout rate must be in [0, 1)");
  p.rate = 0.5;
  p.col_offset = 6;
  has(p, "col_offset is 6 but global_cols is not given");
  p.global_cols = 10;
  has(p, "columns [6, 12) do not fit in global_cols = 10");
  EXPECT_THROW(ops::dropout(x, ybad, ops::DropoutParams{}), kdist::ValueError);
}

// ---- optimizers -------------------------------------------------------------------------------

template <class T>
Vec<T> vec(std::initializer_list<double> v) {
  Vec<T> out("v", v.size());
  std::size_t i = 0;
  for (double x : v) out(i++) = static_cast<T>(x);
  return out;
}

TYPED_TEST(Ops, SgdPlainMomentumNesterov) {
  using T = TypeParam;
  const std::vector<std::vector<double>> grads = {{0.5, -0.1}, {0.3, 0.2}, {-0.4, 0.05}};
  for_each_backend([&](auto backend) {
    // Plain: p -= 0.01 g (Keras' default lr).
    kdist::SGD plain;
    auto p = vec<T>({1.0, -2.0});
    for (const auto& g : grads) {
      plain.update(p, vec<T>({g[0], g[1]}), backend);
      plain.finish_step();
    }
    EXPECT_NEAR(p(0), 1.0 - 0.01 * (0.5 + 0.3 - 0.4), tolerance<T>());
    EXPECT_NEAR(p(1), -2.0 - 0.01 * (-0.1 + 0.2 + 0.05), tolerance<T>());
    EXPECT_EQ(plain.iterations(), 3);
    // Momentum 0.9 (hand-computed with Keras' formula).
    for (bool nesterov : {false, true}) {
      kdist::SGD sgd(0.01, 0.9, nesterov);
      EXPECT_TRUE(sgd.needs_velocity());
      auto q = vec<T>({1.0, -2.0});
      auto vel = kdist::make_slot(q, "velocity");
      for (const auto& g : grads) {
        sgd.update(q, vec<T>({g[0], g[1]}), vel, backend);
        sgd.finish_step();
      }
      if (!nesterov) {
        EXPECT_NEAR(q(0), 0.98475, 1e-6);
        EXPECT_NEAR(q(1), -2.00159, 1e-6);
      } else {
        EXPECT_NEAR(q(0), 0.982275, 1e-6);
        EXPECT_NEAR(q(1), -2.002931, 1e-6);
      }
    }
  });
}

TYPED_TEST(Ops, AdamKerasNumbers) {
  using T = TypeParam;
  // Keras 3 Adam defaults, p0 = (1, -2), three steps; expected values computed by hand with the
  // formula of keras/src/optimizers/adam.py (double precision).
  const std::vector<std::vector<double>> grads = {{0.5, -0.1}, {0.3, 0.2}, {-0.4, 0.05}};
  const double expect[3][2] = {{0.9990000063245154, -1.9990000316217766},
                               {0.9980425213429803, -1.9993661299708823},
                               {0.9977939356225788, -1.999781775431039}};
  const double tol = std::is_same_v<T, float> ? 2e-7 : 1e-15;
  for_each_backend([&](auto backend) {
    kdist::Adam adam;
    EXPECT_DOUBLE_EQ(adam.learning_rate(), 0.001);
    EXPECT_DOUBLE_EQ(adam.beta_1(), 0.9);
    EXPECT_DOUBLE_EQ(adam.beta_2(), 0.999);
    EXPECT_DOUBLE_EQ(adam.epsilon(), 1e-7);
    auto p = vec<T>({1.0, -2.0});
    auto m = kdist::make_slot(p, "m");
    auto v = kdist::make_slot(p, "v");
    for (int s = 0; s < 3; ++s) {
      adam.update(p, vec<T>({grads[s][0], grads[s][1]}), m, v, backend);
      adam.finish_step();
      EXPECT_NEAR(p(0), expect[s][0], tol * 4) << "step " << s + 1;
      EXPECT_NEAR(p(1), expect[s][1], tol * 4) << "step " << s + 1;
    }
    EXPECT_NEAR(m(0), 0.0275, 1e-7);
    EXPECT_NEAR(v(1), 5.244001e-05, 1e-11);
    EXPECT_EQ(adam.iterations(), 3);
  });
}

TYPED_TEST(Ops, OptimizerOnShardsEqualsFullUpdate) {
  using T = TypeParam;
  // Updating two row shards of a kernel with their shards of gradient and state equals updating
  // the full kernel: the state is sharded like the parameter.
  auto full = random_matrix<T>(6, 4, "param");
  auto grad = random_matrix<T>(6, 4, "grad");
  auto sharded = clone(full);
  kdist::Adam a1, a2;
  auto m1 = kdist::make_slot(full, "m1"), v1 = kdist::make_slot(full, "v1");
  auto m2 = kdist::make_slot(full, "m2"), v2 = kdist::make_slot(full, "v2");
  for (int s = 0; s < 3; ++s) {
    a1.update(full, grad, m1, v1);
    a1.finish_step();
    for (auto rows : {std::make_pair(0, 2), std::make_pair(2, 6)}) {
      a2.update(Kokkos::subview(sharded, rows, Kokkos::ALL),
                Kokkos::subview(grad, rows, Kokkos::ALL), Kokkos::subview(m2, rows, Kokkos::ALL),
                Kokkos::subview(v2, rows, Kokkos::ALL), ops::backend::kokkos);
    }
    a2.finish_step();
  }
  EXPECT_LT(max_diff(sharded, full), tolerance<T>());
}

// Keras 3.15's RMSprop update (keras/src/optimizers/rmsprop.py, update_step) written out in double:
// the reference of the RMSprop tests. Returns p after each of the steps; leaves the state in
// v, a, m.
struct RmspropReference {
  std::vector<std::vector<double>> p_after_step;
  std::vector<double> v, a, m;
};
RmspropReference rmsprop_reference(const std::vector<std::vector<double>>& grads,
                                   std::vector<double> p, double lr, double rho, double momentum,
                                   double epsilon, bool centered) {
  RmspropReference r;
  r.v.assign(p.size(), 0.0);
  r.a.assign(p.size(), 0.0);
  r.m.assign(p.size(), 0.0);
  for (const auto& g : grads) {
    for (std::size_t i = 0; i < p.size(); ++i) {
      r.v[i] = rho * r.v[i] + (1 - rho) * (g[i] * g[i]);
      double denominator = r.v[i] + epsilon;
      if (centered) {
        r.a[i] = rho * r.a[i] + (1 - rho) * g[i];
        denominator = r.v[i] - r.a[i] * r.a[i] + epsilon;
      }
      const double increment = lr * g[i] / std::sqrt(denominator);
      if (momentum > 0) {
        r.m[i] = momentum * r.m[i] + increment;
        p[i] -= r.m[i];
      } else {
        p[i] -= increment;
      }
    }
    r.p_after_step.push_back(p);
  }
  return r;
}

TYPED_TEST(Ops, RmspropKerasNumbersPlainCenteredMomentum) {
  using T = TypeParam;
  // Keras 3 RMSprop defaults (lr 0.001, rho 0.9, epsilon 1e-7), p0 = (1, -2), three steps, for
  // plain, centered, momentum 0.9 and centered with momentum 0.9. The literal numbers pin the
  // reference: they are its output, and equal Keras 3.15's own RMSprop (JAX backend, float64
  // variables) once its float32 learning-rate variable (0.001f) is used as lr.
  const std::vector<std::vector<double>> grads = {{0.5, -0.1}, {0.3, 0.2}, {-0.4, 0.05}};
  struct Variant {
    const char* name;
    double momentum;
    bool centered;
    double keras[3][2];
  };
  const Variant variants[] = {
      {"plain",
       0.0,
       false,
       {{0.9968377286643679, -1.9968378804418572},
        {0.9951474228379339, -1.9996949941449274},
        {0.9970468064633112, -2.0004274347053017}}},
      {"centered",
       0.0,
       true,
       {{0.9966666740740494, -1.9966668518364212},
        {0.9948016680614417, -1.9995599084788334},
        {0.9967174557524093, -2.000310445210696}}},
      {"momentum 0.9",
       0.9,
       false,
       {{0.9968377286643679, -1.9968378804418572},
        {0.9923013786358651, -1.9968490865425987},
        {0.9901180472355898, -1.9975916125936404}}},
      {"centered, momentum 0.9",
       0.9,
       true,
       {{0.9966666740740494, -1.9966668518364212},
        {0.9918016747280861, -1.9965600751316126},
        {0.9893389630076868, -1.9972145128291476}}},
  };
  const double tol = std::is_same_v<T, float> ? 8e-7 : 4e-15;
  for (const Variant& variant : variants) {
    SCOPED_TRACE(variant.name);
    const auto ref =
        rmsprop_reference(grads, {1.0, -2.0}, 0.001, 0.9, variant.momentum, 1e-7, variant.centered);
    for (int s = 0; s < 3; ++s) {
      EXPECT_NEAR(ref.p_after_step[s][0], variant.keras[s][0], 1e-15);
      EXPECT_NEAR(ref.p_after_step[s][1], variant.keras[s][1], 1e-15);
    }
    for_each_backend([&](auto backend) {
      kdist::RMSprop rms(0.001, 0.9, variant.momentum, 1e-7, variant.centered);
      auto p = vec<T>({1.0, -2.0});
      auto velocity = kdist::make_slot(p, "velocity");
      auto average_gradient = kdist::make_slot(p, "average_gradient");
      auto momentum_buffer = kdist::make_slot(p, "momentum");
      // A slot the optimizer does not use is not touched.
      Kokkos::deep_copy(average_gradient, T(7));
      Kokkos::deep_copy(momentum_buffer, T(7));
      if (variant.centered) Kokkos::deep_copy(average_gradient, T(0));
      if (variant.momentum > 0) Kokkos::deep_copy(momentum_buffer, T(0));
      for (int s = 0; s < 3; ++s) {
        auto g = vec<T>({grads[s][0], grads[s][1]});
        if (!variant.centered && variant.momentum == 0.0) {
          rms.update(p, g, velocity, backend);
        } else {
          rms.update(p, g, velocity, average_gradient, momentum_buffer, backend);
        }
        rms.finish_step();
        EXPECT_NEAR(p(0), ref.p_after_step[s][0], tol) << "step " << s + 1;
        EXPECT_NEAR(p(1), ref.p_after_step[s][1], tol) << "step " << s + 1;
      }
      for (std::size_t i = 0; i < 2; ++i) {
        EXPECT_NEAR(velocity(i), ref.v[i], tol * 0.1);
        EXPECT_NEAR(average_gradient(i), variant.centered ? ref.a[i] : 7.0, tol * 0.1);
        EXPECT_NEAR(momentum_buffer(i), variant.momentum > 0 ? ref.m[i] : 7.0, tol * 0.1);
      }
      EXPECT_EQ(rms.iterations(), 3);
    });
  }
  // The state after three steps, by hand: v = 0.9^2 * 0.1 * 0.25 + 0.9 * 0.1 * 0.09 + 0.1 * 0.16.
  const auto centered = rmsprop_reference(grads, {1.0, -2.0}, 0.001, 0.9, 0.9, 1e-7, true);
  EXPECT_NEAR(centered.v[0], 0.04435, 1e-15);
  EXPECT_NEAR(centered.a[0], 0.0275, 1e-15);
}

TYPED_TEST(Ops, RmspropOnShardsEqualsFullUpdate) {
  using T = TypeParam;
  // Centered RMSprop with momentum on two row shards of a kernel with their shards of gradient and
  // of the three slots equals the update of the full kernel.
  auto full = random_matrix<T>(6, 4, "param");
  auto grad = random_matrix<T>(6, 4, "grad");
  auto sharded = clone(full);
  kdist::RMSprop r1(0.01, 0.8, 0.5, 1e-7, true), r2(0.01, 0.8, 0.5, 1e-7, true);
  auto v1 = kdist::make_slot(full, "v1"), a1 = kdist::make_slot(full, "a1"),
       m1 = kdist::make_slot(full, "m1");
  auto v2 = kdist::make_slot(full, "v2"), a2 = kdist::make_slot(full, "a2"),
       m2 = kdist::make_slot(full, "m2");
  for (int s = 0; s < 3; ++s) {
    r1.update(full, grad, v1, a1, m1);
    r1.finish_step();
    for (auto rows : {std::make_pair(0, 2), std::make_pair(2, 6)}) {
      auto shard = [&](const auto& x) { return Kokkos::subview(x, rows, Kokkos::ALL); };
      r2.update(shard(sharded), shard(grad), shard(v2), shard(a2), shard(m2), ops::backend::kokkos);
    }
    r2.finish_step();
  }
  EXPECT_LT(max_diff(sharded, full), tolerance<T>());
  EXPECT_GT(max_diff(full, random_matrix<T>(6, 4, "param")), 1e-3);  // the update did something
}

TEST(Optimizers, SlotCountAndDefaults) {
  EXPECT_EQ(kdist::SGD().slot_count(), 0u);
  EXPECT_EQ(kdist::SGD(0.01, 0.9).slot_count(), 1u);
  EXPECT_EQ(kdist::Adam().slot_count(), 2u);
  const kdist::RMSprop rms;
  EXPECT_DOUBLE_EQ(rms.learning_rate(), 0.001);
  EXPECT_DOUBLE_EQ(rms.rho(), 0.9);
  EXPECT_DOUBLE_EQ(rms.momentum(), 0.0);
  EXPECT_DOUBLE_EQ(rms.epsilon(), 1e-7);
  EXPECT_FALSE(rms.centered());
  EXPECT_EQ(rms.slot_count(), 1u);
  EXPECT_EQ(kdist::RMSprop(0.001, 0.9, 0.0, 1e-7, true).slot_count(), 2u);
  EXPECT_EQ(kdist::RMSprop(0.001, 0.9, 0.5).slot_count(), 2u);
  EXPECT_EQ(kdist::RMSprop(0.001, 0.9, 0.5, 1e-7, true).slot_count(), 3u);
  EXPECT_TRUE(kdist::RMSprop(0.001, 0.9, 0.5).needs_momentum());
  EXPECT_FALSE(kdist::RMSprop(0.001, 0.9, 0.5).needs_average_gradient());
}

TEST(OpsErrors, RmspropConstructorAndUpdateErrors) {
  auto has = [](auto&& f, const char* text) {
    try {
      f();
      ADD_FAILURE() << "no throw, expected " << text;
    } catch (const kdist::ValueError& e) {
      EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << e.what();
    }
  };
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  has([] { kdist::RMSprop(-1.0); },
      "kdist::RMSprop: learning_rate is -1.000000; it must be a finite number >= 0");
  has([&] { (void)kdist::RMSprop(nan); }, "kdist::RMSprop: learning_rate is nan");
  has([&] { (void)kdist::RMSprop(inf); }, "kdist::RMSprop: learning_rate is inf");
  has([] { kdist::RMSprop(0.001, 1.0); }, "kdist::RMSprop: rho is 1; it must be in [0, 1)");
  has([] { kdist::RMSprop(0.001, -0.1); }, "kdist::RMSprop: rho is -0.1; it must be in [0, 1)");
  has([&] { kdist::RMSprop(0.001, nan); }, "kdist::RMSprop: rho is nan; it must be in [0, 1)");
  has([] { kdist::RMSprop(0.001, 0.9, -0.5); },
      "kdist::RMSprop: momentum is -0.5; it must be a finite number >= 0");
  has([&] { kdist::RMSprop(0.001, 0.9, nan); }, "kdist::RMSprop: momentum is nan;");
  has([&] { kdist::RMSprop(0.001, 0.9, inf); }, "kdist::RMSprop: momentum is inf;");
  has([] { kdist::RMSprop(0.001, 0.9, 0.0, -1e-7); },
      "kdist::RMSprop: epsilon is -1e-07; it must be >= 0");
  has([&] { kdist::RMSprop(0.001, 0.9, 0.0, nan); }, "kdist::RMSprop: epsilon is nan;");
  kdist::RMSprop rms;
  has([&] { rms.set_learning_rate(-1.0); }, "kdist::RMSprop: learning_rate is -1.000000");
  EXPECT_DOUBLE_EQ(rms.learning_rate(), 0.001);

  Mat<float> p("p", 4, 3), g("g", 4, 3), gbad("gbad", 3, 4);
  auto v = kdist::make_slot(p, "v"), a = kdist::make_slot(p, "a"), m = kdist::make_slot(p, "m");
  has([&] { rms.update(p, gbad, v); },
      "kdist::RMSprop::update: the gradient is 3x4 but the parameter is 4x3");
  has([&] { rms.update(p, g, gbad); },
      "kdist::RMSprop::update: the velocity is 3x4 but the parameter is 4x3; give it the "
      "parameter's shape");
  has([&] { rms.update(p, g, gbad, a, m, ops::backend::kokkos); },
      "kdist::RMSprop::update: the velocity is 3x4");
  // Unused slots are not checked (like SGD's velocity without momentum).
  EXPECT_NO_THROW(rms.update(p, g, v, gbad, gbad));
  kdist::RMSprop centered(0.001, 0.9, 0.0, 1e-7, true);
  kdist::RMSprop momentum(0.001, 0.9, 0.9);
  kdist::RMSprop both(0.001, 0.9, 0.9, 1e-7, true);
  has([&] { centered.update(p, g, v, gbad, m); },
      "kdist::RMSprop::update: the average_gradient is 3x4 but the parameter is 4x3");
  EXPECT_NO_THROW(centered.update(p, g, v, a, gbad));
  has([&] { momentum.update(p, g, v, a, gbad); },
      "kdist::RMSprop::update: the momentum buffer is 3x4 but the parameter is 4x3");
  EXPECT_NO_THROW(momentum.update(p, g, v, gbad, m));
  has([&] { both.update(p, g, v, a, gbad, ops::backend::eigen); },
      "kdist::RMSprop::update: the momentum buffer is 3x4");
  // The three-View update is for plain RMSprop only.
  has([&] { centered.update(p, g, v); },
      "kdist::RMSprop::update: this RMSprop is centered; pass all its slots: update(param, grad, "
      "velocity, average_gradient, momentum_buffer)");
  has([&] { momentum.update(p, g, v); },
      "kdist::RMSprop::update: this RMSprop has momentum 0.9; pass all its slots");
  has([&] { both.update(p, g, v, ops::backend::kokkos); },
      "kdist::RMSprop::update: this RMSprop is centered and has momentum 0.9; pass all its slots");
  // Used slots must be distinct memory.
  has([&] { centered.update(p, g, v, v, m); }, "are the same memory");
  has([&] { momentum.update(p, g, v, a, v); }, "are the same memory");
  has([&] { rms.update(p, g, p); }, "are the same memory");
  // A column subview is not contiguous.
  Mat<float> wide("wide", 4, 6);
  auto cols = Kokkos::subview(wide, Kokkos::ALL, std::make_pair(0, 3));
  has([&] { rms.update(p, g, cols); }, "kdist::RMSprop::update: the velocity is not contiguous");
}

TEST(OpsErrors, OptimizerErrors) {
  auto has = [](auto&& f, const char* text) {
    try {
      f();
      ADD_FAILURE() << "no throw, expected " << text;
    } catch (const kdist::ValueError& e) {
      EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << e.what();
    }
  };
  has([] { kdist::SGD(0.01, 1.5); }, "`momentum` must be a float between [0, 1]");
  has([] { kdist::SGD(0.01, -0.1); }, "`momentum` must be a float between [0, 1]");
  has([] { kdist::SGD(-0.01); }, "kdist::SGD: learning_rate is -0.010000; it must be a finite");
  has([] { (void)kdist::SGD(std::numeric_limits<double>::infinity()); }, "must be a finite number");
  has([] { kdist::Adam(-1.0); }, "kdist::Adam: learning_rate is -1.000000");
  has([] { kdist::Adam(0.001, 1.0); }, "kdist::Adam: beta_1 is 1; it must be in [0, 1)");
  has([] { kdist::Adam(0.001, 0.9, -0.5); }, "kdist::Adam: beta_2 is -0.5; it must be in [0, 1)");
  has([] { kdist::Adam(0.001, 0.9, 0.999, -1e-7); }, "kdist::Adam: epsilon is");
  kdist::SGD sgd;
  has([&] { sgd.set_learning_rate(-1.0); }, "kdist::SGD: learning_rate is -1.000000");
  kdist::Adam adam;
  has([&] { adam.set_learning_rate(std::nan("")); }, "kdist::Adam: learning_rate is");

  Mat<float> p("p", 4, 3), g("g", 4, 3), gbad("gbad", 3, 4);
  auto m = kdist::make_slot(p, "m"), v = kdist::make_slot(p, "v");
  has([&] { sgd.update(p, gbad); },
      "kdist::SGD::update: the gradient is 3x4 but the parameter is 4x3");
  has([&] { adam.update(p, g, gbad, v); }, "kdist::Adam::update: m (first moment) is 3x4");
  has([&] { adam.update(p, g, m, gbad); }, "kdist::Adam::update: v (second moment) is 3x4");
  kdist::SGD momentum(0.01, 0.9);
  has([&] { momentum.update(p, g); }, "this SGD has momentum 0.900000; pass a velocity View");
  has([&] { momentum.update(p, g, gbad); }, "kdist::SGD::update: the velocity is 3x4");
  // A column subview is not contiguous.
  Mat<float> wide("wide", 4, 6), wg("wg", 4, 3);
  auto cols = Kokkos::subview(wide, Kokkos::ALL, std::make_pair(0, 3));
  has([&] { sgd.update(cols, wg); }, "kdist::SGD::update: the parameter is not contiguous");
}

// JAX's names and kdist's order of settings: the program's, else the environment's, else highest.
TEST(MatmulPrecision, TheProgramThenTheEnvironmentThenHighest) {
  using kdist::ops::MatmulPrecision;
  ::unsetenv("KDIST_MATMUL_PRECISION");
  kdist::ops::reset_matmul_precision();
  EXPECT_EQ(kdist::ops::matmul_precision(), MatmulPrecision::highest);
  for (const auto& [text, want] :
       {std::pair{"high", MatmulPrecision::high}, std::pair{"tensorfloat32", MatmulPrecision::high},
        std::pair{"highest", MatmulPrecision::highest},
        std::pair{"float32", MatmulPrecision::highest}}) {
    ::setenv("KDIST_MATMUL_PRECISION", text, 1);
    EXPECT_EQ(kdist::ops::matmul_precision(), want) << text;
  }
  ::setenv("KDIST_MATMUL_PRECISION", "HIGH", 1);
  try {
    (void)kdist::ops::matmul_precision();
    ADD_FAILURE() << "no error for HIGH";
  } catch (const kdist::ValueError& e) {
    EXPECT_EQ(std::string(e.what()),
              "KDIST_MATMUL_PRECISION is 'HIGH', not one of highest (or float32: full float32 "
              "products) and high (or tensorfloat32: TensorFloat-32 tensor cores on a GPU)");
  }
  kdist::ops::set_matmul_precision(MatmulPrecision::high);  // the program's wins, even over a typo
  EXPECT_EQ(kdist::ops::matmul_precision(), MatmulPrecision::high);
  EXPECT_EQ(kdist::ops::to_string(kdist::ops::matmul_precision()), "high");
  kdist::ops::reset_matmul_precision();
  ::unsetenv("KDIST_MATMUL_PRECISION");
  EXPECT_EQ(kdist::ops::to_string(kdist::ops::matmul_precision()), "highest");
  EXPECT_THROW(kdist::ops::parse_matmul_precision("bf16"), kdist::ValueError);
}

// Under a GemmInputsScope (a layer computing under a 16-bit dtype policy) a float32 product in CUDA
// memory takes its inputs in bfloat16 or float16 with float32 accumulation (cuBLAS' tensor cores):
// the product of the rounded inputs, not of the float32 ones. Elsewhere (the host, the Kokkos
// kernel) the product is float32's, bit for bit.
TEST(GemmInputs, SixteenBitInputsOnTheGpuFloat32Elsewhere) {
  using V =
      Kokkos::View<float**, Kokkos::LayoutRight>;  // the default memory space: the GPU's there
  constexpr std::size_t m = 8, k = 64, n = 8;
  Mat<float> a("a", m, k), b("b", k, n);
  for (std::size_t i = 0; i < m; ++i)
    for (std::size_t l = 0; l < k; ++l) a(i, l) = 1.0F + 0.001F * static_cast<float>(i * k + l);
  for (std::size_t l = 0; l < k; ++l)
    for (std::size_t j = 0; j < n; ++j) b(l, j) = 0.5F + 0.0007F * static_cast<float>(l * n + j);
  V A("A", m, k), B("B", k, n), C32("C32", m, n), C16("C16", m, n);
  Kokkos::deep_copy(A, a);
  Kokkos::deep_copy(B, b);
  ops::matmul(A, B, C32);
  for (const auto inputs : {ops::GemmInputs::bfloat16, ops::GemmInputs::float16}) {
    {
      const ops::GemmInputsScope scope(inputs);
      ops::matmul(A, B, C16);
    }
    auto c32 = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), C32);
    auto c16 = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), C16);
    const auto round = [&](float x) {
      return inputs == ops::GemmInputs::bfloat16 ? static_cast<float>(kdist::bfloat16(x))
                                                 : static_cast<float>(kdist::float16(x));
    };
    double worst_to_rounded = 0, worst_to_float32 = 0;
    for (std::size_t i = 0; i < m; ++i) {
      for (std::size_t j = 0; j < n; ++j) {
        double exact = 0, of_rounded = 0;
        for (std::size_t l = 0; l < k; ++l) {
          exact += static_cast<double>(a(i, l)) * b(l, j);
          of_rounded += static_cast<double>(round(a(i, l))) * round(b(l, j));
        }
        worst_to_rounded = std::max(worst_to_rounded, std::abs(c16(i, j) - of_rounded) / exact);
        worst_to_float32 = std::max(worst_to_float32, std::abs(c16(i, j) - exact) / exact);
        if (!(ops::detail::cublas_enabled && ops::detail::in_cuda_memory_v<V>)) {
          EXPECT_EQ(c16(i, j), c32(i, j)) << i << "," << j;  // the host: float32's product
        }
      }
    }
    if constexpr (ops::detail::cublas_enabled && ops::detail::in_cuda_memory_v<V>) {
      // float32 accumulation of the rounded inputs (k = 64 terms), and visibly not float32's
      // (an H200: 7.9e-5 from the float32 product with bfloat16 inputs)
      EXPECT_LT(worst_to_rounded, 1e-5);
      EXPECT_GT(worst_to_float32, inputs == ops::GemmInputs::bfloat16 ? 2e-5 : 1e-6);
    }
  }
}

}  // namespace
