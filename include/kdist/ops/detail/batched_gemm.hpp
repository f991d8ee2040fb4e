#pragma once
//! \file ops/detail/batched_gemm.hpp
//! Strided batched GEMM on row-major blocks, what attention's per-(batch, head) products are on a
//! device: `count` products `C_i = alpha op(A_i) op(B_i) + beta C_i` with `X_i = X + i stride_x`,
//! one call. On CUDA device memory (kdist built with cuBLAS) cuBLAS' gemmStridedBatched; elsewhere
//! a Kokkos kernel, one thread per (product, row, column), in the execution space of `V` (what the
//! tests run on the host with backend::kokkos; on the host the automatic backend uses Eigen's
//! GEMMs instead, ops/attention.hpp).

#include <Kokkos_Core.hpp>
#include <cstdint>

#include <kdist/ops/detail/blas_arguments.hpp>
#include <kdist/ops/detail/cublas.hpp>

namespace kdist::ops::detail {

//! Row-major shape and strides of one operand of batched_gemm.
struct BatchedOperand {
  std::int64_t ld;      //!< elements between rows
  std::int64_t stride;  //!< elements between consecutive products' blocks
};

//! For each i < count: C_i[m x n] = alpha * op(A_i) * op(B_i) + beta * C_i (C_i not read when beta
//! is 0), op(X) = X^T when trans_x; `V` (a View) names the memory space and execution space of
//! the data. Asynchronous like a Kokkos kernel.
template <class V, class T>
void batched_gemm(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k,
                  T alpha, const T* a, BatchedOperand sa, const T* b, BatchedOperand sb, T beta,
                  T* c, BatchedOperand sc, std::int64_t count) {
  if (count == 0 || m == 0 || n == 0) return;
  if constexpr (cublas_enabled && in_cuda_memory_v<V>) {
#if defined(KOKKOS_ENABLE_CUDA) && defined(KDIST_ENABLE_CUBLAS)
    const char* who = "kdist::ops attention (batched GEMM)";
    const auto blas = [who](std::int64_t v) {
      return to_blas_int(static_cast<std::size_t>(v), who);
    };
    gemm_strided_batched_cublas<T>(typename V::execution_space(), trans_a, trans_b, blas(m),
                                   blas(n), blas(k), alpha, a, blas(sa.ld), sa.stride, b,
                                   blas(sb.ld), sb.stride, beta, c, blas(sc.ld), sc.stride,
                                   blas(count));
#endif
  } else {
    using Exec = typename V::execution_space;
    using Policy = Kokkos::MDRangePolicy<Exec, Kokkos::Rank<3>, Kokkos::IndexType<std::int64_t>>;
    const std::int64_t lda = sa.ld, ldb = sb.ld, ldc = sc.ld;
    const std::int64_t stride_a = sa.stride, stride_b = sb.stride, stride_c = sc.stride;
    Kokkos::parallel_for(
        "kdist::ops::batched_gemm", Policy({0, 0, 0}, {count, m, n}),
        KOKKOS_LAMBDA(const std::int64_t p, const std::int64_t i, const std::int64_t j) {
          const T* ap = a + p * stride_a;
          const T* bp = b + p * stride_b;
          T sum = T(0);
          for (std::int64_t l = 0; l < k; ++l) {
            const T x = trans_a ? ap[l * lda + i] : ap[i * lda + l];
            const T y = trans_b ? bp[j * ldb + l] : bp[l * ldb + j];
            sum += x * y;
          }
          T& out = c[p * stride_c + i * ldc + j];
          out = beta == T(0) ? alpha * sum : alpha * sum + beta * out;
        });
  }
}

}  // namespace kdist::ops::detail
