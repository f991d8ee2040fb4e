#pragma once
//! \file ops/detail/cublas.hpp
//! The vendor BLAS behind `kdist::ops::matmul` on CUDA device memory: cuBLAS sgemm/dgemm on the
//! stream of the Kokkos::Cuda instance (and their strided-batched forms, attention's per-head
//! products), sgemm on TensorFloat-32 tensor cores when the matmul precision is "high", and
//! float32 products on bf16/fp16 tensor cores (cublasGemmEx, float32 accumulation) inside a layer
//! computing under a 16-bit dtype policy (ops::GemmInputs; ops/matmul_precision.hpp). The only
//! file of kdist that calls a CUDA library.
//!
//! On when Kokkos has the CUDA backend and `KDIST_ENABLE_CUBLAS` is defined (kdist's CMake target
//! defines it and links CUDA::cublas when it finds Kokkos CUDA); otherwise `cublas_enabled` is
//! false and matmul uses its Kokkos kernel.

#include <Kokkos_Core.hpp>

#if defined(KOKKOS_ENABLE_CUDA) && defined(KDIST_ENABLE_CUBLAS)
#include <cublas_v2.h>

#include <kdist/core/error.hpp>
#include <kdist/ops/matmul_precision.hpp>
#include <string>
#include <type_traits>
#endif

namespace kdist::ops::detail {

#if defined(KOKKOS_ENABLE_CUDA) && defined(KDIST_ENABLE_CUBLAS)
inline constexpr bool cublas_enabled = true;

inline void check_cublas(cublasStatus_t status, const char* what) {
  if (status != CUBLAS_STATUS_SUCCESS) {
    throw RuntimeError(std::string("kdist::ops::matmul: ") + what +
                       " failed: " + cublasGetStatusString(status));
  }
}

//! One cuBLAS handle per process, created at the first GEMM and destroyed when Kokkos finalises
//! (before the CUDA context goes).
inline cublasHandle_t cublas_handle() {
  static cublasHandle_t handle = [] {
    cublasHandle_t h = nullptr;
    check_cublas(cublasCreate(&h), "cublasCreate");
    Kokkos::push_finalize_hook([h] { cublasDestroy(h); });
    return h;
  }();
  return handle;
}

//! Row-major `C[m,n] = alpha * op(A) * op(B) + beta * C` with row strides lda, ldb, ldc, on the
//! stream of `exec`. cuBLAS is column-major: a row-major matrix is its transpose there, so this
//! is the column-major product `C^T = op(B)^T * op(A)^T`, the operands swapped.
//! The handle, on the stream of `exec`, in the math mode of the matmul precision for T: TensorFloat-32
//! tensor cores or not (ops/matmul_precision.hpp; a property of the handle).
template <class T>
cublasHandle_t cublas_handle_for(const Kokkos::Cuda& exec) {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>);
  cublasHandle_t h = cublas_handle();
  check_cublas(cublasSetStream(h, exec.cuda_stream()), "cublasSetStream");
  if constexpr (std::is_same_v<T, float>) {
    check_cublas(cublasSetMathMode(h, matmul_precision() == MatmulPrecision::high
                                          ? CUBLAS_TF32_TENSOR_OP_MATH
                                          : CUBLAS_DEFAULT_MATH),
                 "cublasSetMathMode");
  }
  return h;
}

//! The cuBLAS compute type of a float32 product whose inputs are rounded to 16 bits (the layer's
//! compute dtype, ops::gemm_inputs()), or false: the product is sgemm's.
inline bool sixteen_bit_compute_type(cublasComputeType_t& type) {
  switch (gemm_inputs()) {
    case GemmInputs::bfloat16:
      type = CUBLAS_COMPUTE_32F_FAST_16BF;
      return true;
    case GemmInputs::float16:
      type = CUBLAS_COMPUTE_32F_FAST_16F;
      return true;
    case GemmInputs::as_given:
      break;
  }
  return false;
}

template <class T>
void gemm_cublas(const Kokkos::Cuda& exec, bool trans_a, bool trans_b, int m, int n, int k, T alpha,
                 const T* a, int lda, const T* b, int ldb, T beta, T* c, int ldc) {
  cublasHandle_t h = cublas_handle_for<T>(exec);
  const cublasOperation_t op_b = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_a = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  if constexpr (std::is_same_v<T, float>) {
    cublasComputeType_t sixteen_bit = CUBLAS_COMPUTE_32F;
    if (sixteen_bit_compute_type(sixteen_bit)) {
      check_cublas(cublasGemmEx(h, op_b, op_a, n, m, k, &alpha, b, CUDA_R_32F, ldb, a, CUDA_R_32F,
                                lda, &beta, c, CUDA_R_32F, ldc, sixteen_bit, CUBLAS_GEMM_DEFAULT),
                   "cublasGemmEx (16-bit inputs)");
      return;
    }
    check_cublas(cublasSgemm(h, op_b, op_a, n, m, k, &alpha, b, ldb, a, lda, &beta, c, ldc),
                 "cublasSgemm");
  } else {
    check_cublas(cublasDgemm(h, op_b, op_a, n, m, k, &alpha, b, ldb, a, lda, &beta, c, ldc),
                 "cublasDgemm");
  }
}

//! `count` row-major products at once (cublas<s,d>gemmStridedBatched): product i reads A + i *
//! stride_a and B + i * stride_b and writes C + i * stride_c; otherwise as gemm_cublas (the
//! operands swapped for cuBLAS' column-major view, TF32 when the precision is "high").
template <class T>
void gemm_strided_batched_cublas(const Kokkos::Cuda& exec, bool trans_a, bool trans_b, int m, int n,
                                 int k, T alpha, const T* a, int lda, long long stride_a,
                                 const T* b, int ldb, long long stride_b, T beta, T* c, int ldc,
                                 long long stride_c, int count) {
  cublasHandle_t h = cublas_handle_for<T>(exec);
  const cublasOperation_t op_b = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_a = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  if constexpr (std::is_same_v<T, float>) {
    cublasComputeType_t sixteen_bit = CUBLAS_COMPUTE_32F;
    if (sixteen_bit_compute_type(sixteen_bit)) {
      check_cublas(
          cublasGemmStridedBatchedEx(h, op_b, op_a, n, m, k, &alpha, b, CUDA_R_32F, ldb, stride_b,
                                     a, CUDA_R_32F, lda, stride_a, &beta, c, CUDA_R_32F, ldc,
                                     stride_c, count, sixteen_bit, CUBLAS_GEMM_DEFAULT),
          "cublasGemmStridedBatchedEx (16-bit inputs)");
      return;
    }
    check_cublas(cublasSgemmStridedBatched(h, op_b, op_a, n, m, k, &alpha, b, ldb, stride_b, a, lda,
                                           stride_a, &beta, c, ldc, stride_c, count),
                 "cublasSgemmStridedBatched");
  } else {
    check_cublas(cublasDgemmStridedBatched(h, op_b, op_a, n, m, k, &alpha, b, ldb, stride_b, a, lda,
                                           stride_a, &beta, c, ldc, stride_c, count),
                 "cublasDgemmStridedBatched");
  }
}

//! Whether View V's kernels run on the GPU (CudaSpace, CudaUVMSpace): its GEMM is cuBLAS'.
template <class V>
inline constexpr bool in_cuda_memory_v = std::is_same_v<typename V::execution_space, Kokkos::Cuda>;
#else
inline constexpr bool cublas_enabled = false;
template <class V>
inline constexpr bool in_cuda_memory_v = false;
#endif

}  // namespace kdist::ops::detail
