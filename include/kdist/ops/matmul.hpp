#pragma once
//! \file ops/matmul.hpp
//! Local matrix product `C = alpha * op(A) * op(B) + beta * C` on rank-2 LayoutRight Views, the
//! three products of a Dense layer: forward `Y = X * W`, backward `dW = X^T * dY`,
//! `dX = dY * W^T`. Host memory goes through the optimised CBLAS kdist was built with (OpenBLAS;
//! ops/detail/cblas.hpp) or else Eigen's GEMM over the Views' data (also with `backend::eigen`),
//! CUDA device memory through cuBLAS (ops/detail/cublas.hpp), other memory spaces (or
//! `backend::kokkos`) through a Kokkos MDRange kernel. `kdist::ops::host_gemm_library()` names the
//! host one.

#include <Eigen/Core>
#include <Kokkos_Core.hpp>
#include <cstdint>
#include <kdist/core/error.hpp>
#include <kdist/ops/backend.hpp>
#include <kdist/ops/detail/blas_arguments.hpp>
#include <kdist/ops/detail/cblas.hpp>
#include <kdist/ops/detail/cublas.hpp>
#include <kdist/ops/detail/host_threads.hpp>
#include <kdist/ops/detail/views.hpp>
#include <kdist/ops/matmul_precision.hpp>
#include <string>

namespace kdist::ops {

//! How a matmul operand enters the product.
enum class Op {
  none,       //!< the matrix as stored
  transpose,  //!< its transpose
};

namespace detail {

template <class AM, class BM, class CM, class T>
void gemm_eigen(const AM& a, const BM& b, CM& c, Op op_a, Op op_b, T alpha, T beta) {
  if (beta == T(0)) {
    // BLAS convention: C is not read when beta == 0 (it may hold NaN or garbage).
    if (op_a == Op::none && op_b == Op::none)
      c.noalias() = alpha * a * b;
    else if (op_a == Op::transpose && op_b == Op::none)
      c.noalias() = alpha * a.transpose() * b;
    else if (op_a == Op::none)
      c.noalias() = alpha * a * b.transpose();
    else
      c.noalias() = alpha * a.transpose() * b.transpose();
    return;
  }
  if (beta != T(1)) c *= beta;
  if (op_a == Op::none && op_b == Op::none)
    c.noalias() += alpha * a * b;
  else if (op_a == Op::transpose && op_b == Op::none)
    c.noalias() += alpha * a.transpose() * b;
  else if (op_a == Op::none)
    c.noalias() += alpha * a * b.transpose();
  else
    c.noalias() += alpha * a.transpose() * b.transpose();
}

template <class AV, class BV, class CV, class T>
void matmul_eigen(const AV& A, const BV& B, const CV& C, Op op_a, Op op_b, T alpha, T beta) {
  limit_eigen_threads_once();
  if (is_packed(A) && is_packed(B) && is_packed(C)) {
    auto c = eigen_map_packed(C);
    gemm_eigen(eigen_map_packed(A), eigen_map_packed(B), c, op_a, op_b, alpha, beta);
  } else {
    auto c = eigen_map(C);
    gemm_eigen(eigen_map(A), eigen_map(B), c, op_a, op_b, alpha, beta);
  }
}

template <class AV, class BV, class CV, class T>
void matmul_kokkos(const AV& A, const BV& B, const CV& C, Op op_a, Op op_b, T alpha, T beta) {
  const bool ta = op_a == Op::transpose;
  const bool tb = op_b == Op::transpose;
  const auto inner = static_cast<std::int64_t>(ta ? A.extent(0) : A.extent(1));
  Kokkos::parallel_for(
      "kdist::ops::matmul", md_range<CV>(C.extent(0), C.extent(1)),
      KOKKOS_LAMBDA(const std::int64_t i, const std::int64_t j) {
        T sum = 0;
        for (std::int64_t k = 0; k < inner; ++k) {
          const T a = ta ? A(k, i) : A(i, k);
          const T b = tb ? B(j, k) : B(k, j);
          sum += a * b;
        }
        C(i, j) = beta == T(0) ? alpha * sum : alpha * sum + beta * C(i, j);
      });
}

//! Whether the product goes to the vendor BLAS: the automatic backend, every View in CUDA device
//! memory, kdist built with cuBLAS (ops/detail/cublas.hpp).
template <class Backend, class AV, class BV, class CV>
inline constexpr bool uses_vendor_blas_v = cublas_enabled&& std::is_same_v<Backend, AutoBackend>&&
    in_cuda_memory_v<AV>&& in_cuda_memory_v<BV>&& in_cuda_memory_v<CV>;

template <class AV, class BV, class CV, class T>
void matmul_cublas(const AV& A, const BV& B, const CV& C, Op op_a, Op op_b, T alpha, T beta,
                   std::size_t m, std::size_t n, std::size_t k) {
#if defined(KOKKOS_ENABLE_CUDA) && defined(KDIST_ENABLE_CUBLAS)
  const char* who = "kdist::ops::matmul";
  gemm_cublas<T>(typename CV::execution_space(), op_a == Op::transpose, op_b == Op::transpose,
                 to_blas_int(m, who), to_blas_int(n, who), to_blas_int(k, who), alpha, A.data(),
                 leading_dimension(A), B.data(), leading_dimension(B), beta, C.data(),
                 leading_dimension(C));
#else
  (void)A, (void)B, (void)C, (void)op_a, (void)op_b, (void)alpha, (void)beta, (void)m, (void)n,
      (void)k;
#endif
}

//! Host memory through CBLAS (kdist built with it; see ops/detail/cblas.hpp).
template <class AV, class BV, class CV, class T>
void matmul_cblas(const AV& A, const BV& B, const CV& C, Op op_a, Op op_b, T alpha, T beta,
                  std::size_t m, std::size_t n, std::size_t k) {
#if defined(KDIST_ENABLE_CBLAS)
  const char* who = "kdist::ops::matmul";
  gemm_cblas<T>(op_a == Op::transpose, op_b == Op::transpose, to_blas_int(m, who),
                to_blas_int(n, who), to_blas_int(k, who), alpha, A.data(), leading_dimension(A),
                B.data(), leading_dimension(B), beta, C.data(), leading_dimension(C));
#else
  (void)A, (void)B, (void)C, (void)op_a, (void)op_b, (void)alpha, (void)beta, (void)m, (void)n,
      (void)k;
#endif
}

}  // namespace detail

//! `C = alpha * op_a(A) * op_b(B) + beta * C`.
//!
//! Views: rank-2, LayoutRight, float or double, all of one scalar type (A and B may be const).
//! With beta == 0, C is only written (BLAS convention). Runs in the Views' execution space;
//! like a Kokkos kernel it may return before a device kernel finishes (fence to wait).
//! Errors: kdist::ValueError when the shapes do not fit (the message gives them) or when C is
//! the same memory as A or B.
//! Example: forward of a Dense layer, `kdist::ops::matmul(x, kernel, y);`; kernel gradient,
//! `kdist::ops::matmul(x, dy, dkernel, Op::transpose, Op::none);`.
template <class AV, class BV, class CV, class Backend = AutoBackend>
void matmul(const AV& A, const BV& B, const CV& C, Op op_a = Op::none, Op op_b = Op::none,
            detail::scalar_t<CV> alpha = 1, detail::scalar_t<CV> beta = 0, Backend = {}) {
  static_assert(detail::check_matrix<AV>() && detail::check_matrix<BV>() &&
                detail::check_matrix<CV>());
  static_assert(detail::check_same_scalar<AV, CV>() && detail::check_same_scalar<BV, CV>());
  static_assert(!std::is_const_v<typename CV::value_type>,
                "kdist::ops::matmul: the result View C must not be const");
  constexpr bool eigen = detail::check_backend<Backend, AV, BV, CV>();

  const std::size_t m = op_a == Op::none ? A.extent(0) : A.extent(1);
  const std::size_t ka = op_a == Op::none ? A.extent(1) : A.extent(0);
  const std::size_t kb = op_b == Op::none ? B.extent(0) : B.extent(1);
  const std::size_t n = op_b == Op::none ? B.extent(1) : B.extent(0);
  auto op_shape = [](std::size_t r, std::size_t c) {
    return std::to_string(r) + "x" + std::to_string(c);
  };
  if (ka != kb) {
    throw ValueError("kdist::ops::matmul: op(A) is " + op_shape(m, ka) + " and op(B) is " +
                     op_shape(kb, n) + ": the inner dimensions differ (" + std::to_string(ka) +
                     " vs " + std::to_string(kb) + ")");
  }
  if (C.extent(0) != m || C.extent(1) != n) {
    throw ValueError("kdist::ops::matmul: C is " + detail::shape_string(C) +
                     ", but op(A) * op(B) is " + op_shape(m, n));
  }
  const void* c_data = C.data();
  if (C.size() != 0 && (c_data == static_cast<const void*>(A.data()) ||
                        c_data == static_cast<const void*>(B.data()))) {
    throw ValueError(
        "kdist::ops::matmul: C must not be the same memory as A or B (the product "
        "would read what it overwrites); write to another View");
  }
  if (m == 0 || n == 0) return;
  if constexpr (eigen && detail::cblas_enabled && std::is_same_v<Backend, AutoBackend>) {
    detail::matmul_cblas(A, B, C, op_a, op_b, alpha, beta, m, n, ka);
  } else if constexpr (eigen) {
    detail::matmul_eigen(A, B, C, op_a, op_b, alpha, beta);
  } else if constexpr (detail::uses_vendor_blas_v<Backend, AV, BV, CV>) {
    detail::matmul_cublas(A, B, C, op_a, op_b, alpha, beta, m, n, ka);
  } else {
    detail::matmul_kokkos(A, B, C, op_a, op_b, alpha, beta);
  }
}

//! The library behind host GEMMs: "OpenBLAS 0.3.21" (or "CBLAS") when kdist was built with
//! one, else "Eigen". Benchmarks and trainers print it.
inline std::string host_gemm_library() {
#if defined(KDIST_ENABLE_CBLAS) && defined(OPENBLAS_VERSION)
  std::string v = OPENBLAS_VERSION;  // " OpenBLAS 0.3.21 "
  const auto first = v.find_first_not_of(' ');
  const auto last = v.find_last_not_of(' ');
  return first == std::string::npos ? "OpenBLAS" : v.substr(first, last - first + 1);
#elif defined(KDIST_ENABLE_CBLAS)
  return "CBLAS";
#else
  return "Eigen";
#endif
}

//! How many threads this process's host GEMMs use: OpenBLAS' count once kdist has applied its
//! one-per-rank default (`OMP_NUM_THREADS` / `OPENBLAS_NUM_THREADS` raise it, in OpenBLAS' OpenMP
//! or pthread variant; the serial variant and Eigen use 1).
inline int host_gemm_threads() {
#if defined(KDIST_ENABLE_CBLAS) && defined(OPENBLAS_VERSION)
  detail::limit_blas_threads_once();
  return openblas_get_num_threads();
#else
  return 1;
#endif
}

}  // namespace kdist::ops
