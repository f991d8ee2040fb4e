#pragma once
//! \file ops/matmul_precision.hpp
//! The precision of float32 matrix products on a GPU, as JAX's `jax.default_matmul_precision`:
//!
//! - `highest` (kdist's default): full float32 arithmetic (cuBLAS' default math);
//! - `high`: TensorFloat-32 tensor cores (cuBLAS' CUBLAS_TF32_TENSOR_OP_MATH): the inputs rounded
//!   to 10-bit mantissas, products accumulated in float32; several times the float32 rate on
//!   Ampere and Hopper GPUs. What XLA does on those GPUs for JAX's own default precision.
//!
//! Host GEMMs (OpenBLAS, Eigen) are float32 at either setting, and float64 products ignore it.
//! The setting: `kdist::ops::set_matmul_precision(...)` for the program, else the environment
//! variable `KDIST_MATMUL_PRECISION` (`highest` or `float32`, `high` or `tensorfloat32`), else
//! `highest`. A bad value is a kdist::ValueError naming it, raised by matmul_precision() (which
//! Sequential::compile calls, so a typo fails on a CPU run too).
//!
//! \code
//! kdist::ops::set_matmul_precision(kdist::ops::MatmulPrecision::high);  // TF32 on the GPU
//! \endcode

#include <atomic>
#include <cstdlib>
#include <string>
#include <string_view>

#include <kdist/core/error.hpp>

namespace kdist::ops {

enum class MatmulPrecision {
  highest,  //!< float32 arithmetic
  high,     //!< TensorFloat-32 tensor cores on a GPU
};

//! "highest" or "high".
inline std::string_view to_string(MatmulPrecision p) {
  return p == MatmulPrecision::high ? "high" : "highest";
}

//! JAX's names: "highest" / "float32", "high" / "tensorfloat32". Errors: kdist::ValueError that
//! names `what` (where the text came from) and the accepted values.
inline MatmulPrecision parse_matmul_precision(std::string_view text,
                                              std::string_view what = "the matmul precision") {
  if (text == "highest" || text == "float32") return MatmulPrecision::highest;
  if (text == "high" || text == "tensorfloat32") return MatmulPrecision::high;
  throw ValueError(std::string(what) + " is '" + std::string(text) +
                   "', not one of highest (or float32: full float32 products) and high (or "
                   "tensorfloat32: TensorFloat-32 tensor cores on a GPU)");
}

namespace detail {
//! The program's setting: -1 none (the environment decides), else a MatmulPrecision.
inline std::atomic<int>& matmul_precision_setting() {
  static std::atomic<int> setting{-1};
  return setting;
}
}  // namespace detail

//! Sets the precision of float32 products on a GPU for the whole program (over the environment).
inline void set_matmul_precision(MatmulPrecision p) {
  detail::matmul_precision_setting().store(static_cast<int>(p));
}
//! Forgets the program's setting: the environment decides again.
inline void reset_matmul_precision() {
  detail::matmul_precision_setting().store(-1);
}

//! The precision in force: the program's, else KDIST_MATMUL_PRECISION's, else highest.
//! Errors: kdist::ValueError for a KDIST_MATMUL_PRECISION that is not a precision.
inline MatmulPrecision matmul_precision() {
  const int set = detail::matmul_precision_setting().load();
  if (set >= 0) return static_cast<MatmulPrecision>(set);
  const char* env = std::getenv("KDIST_MATMUL_PRECISION");
  if (env == nullptr || *env == '\0') return MatmulPrecision::highest;
  return parse_matmul_precision(env, "KDIST_MATMUL_PRECISION");
}

}  // namespace kdist::ops
