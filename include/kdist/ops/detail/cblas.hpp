#pragma once
//! \file ops/detail/cblas.hpp
//! The optimised BLAS behind `kdist::ops::matmul` on host memory: CBLAS sgemm/dgemm (OpenBLAS
//! from Debian's libopenblas-openmp-dev; any CBLAS works). Measured 2.3-2.6x Eigen's GEMM on the
//! Dense and GPT shapes on one core (docs/benchmarks.md, "Host GEMM"): OpenBLAS picks its kernels
//! for the CPU at run time, Eigen's are the ones the compiler flags allow (SSE2 without -march).
//!
//! On when `KDIST_ENABLE_CBLAS` is defined (kdist's CMake target defines it and links the library
//! when pkg-config finds `openblas`); otherwise host GEMMs go to Eigen.

#if defined(KDIST_ENABLE_CBLAS)
#include <cblas.h>

#include <cstdlib>
#include <type_traits>
#endif

namespace kdist::ops::detail {

#if defined(KDIST_ENABLE_CBLAS)
inline constexpr bool cblas_enabled = true;

//! OpenBLAS' threaded builds start one thread per core in every process, and an MPI job runs a
//! process per core: unless the user asks for threads (OPENBLAS_NUM_THREADS or OMP_NUM_THREADS
//! in the environment, read by OpenBLAS itself), a rank's GEMMs use one thread.
inline void limit_blas_threads_once() {
#if defined(OPENBLAS_VERSION)
  static const bool limited = [] {
    if (std::getenv("OPENBLAS_NUM_THREADS") == nullptr && std::getenv("OMP_NUM_THREADS") == nullptr)
      openblas_set_num_threads(1);
    return true;
  }();
  (void)limited;
#endif
}

//! Row-major `C[m,n] = alpha * op(A) * op(B) + beta * C` with row strides lda, ldb, ldc.
template <class T>
void gemm_cblas(bool trans_a, bool trans_b, int m, int n, int k, T alpha, const T* a, int lda,
                const T* b, int ldb, T beta, T* c, int ldc) {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>);
  limit_blas_threads_once();
  const CBLAS_TRANSPOSE op_a = trans_a ? CblasTrans : CblasNoTrans;
  const CBLAS_TRANSPOSE op_b = trans_b ? CblasTrans : CblasNoTrans;
  if constexpr (std::is_same_v<T, float>) {
    cblas_sgemm(CblasRowMajor, op_a, op_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  } else {
    cblas_dgemm(CblasRowMajor, op_a, op_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  }
}
#else
inline constexpr bool cblas_enabled = false;
#endif

}  // namespace kdist::ops::detail
