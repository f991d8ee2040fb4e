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
//!
//! Inside a layer that computes under a 16-bit dtype policy ("mixed_bfloat16", "mixed_float16")
//! the layer's compute dtype decides instead: kdist::AnyLayer opens a GemmInputsScope around the
//! layer's forward and backward passes, and float32 products on a GPU then take their inputs in
//! that type with float32 accumulation (cuBLAS' CUBLAS_COMPUTE_32F_FAST_16BF / _16F: bf16 or fp16
//! tensor cores), as Keras' products of a bf16 activation and a bf16-cast kernel do. The layer's
//! activations are 16-bit values already (nn/autocast.hpp); its float32 kernel is rounded as
//! Keras' autocast rounds it. On the host nothing changes (this CPU has no 16-bit arithmetic:
//! the product stays float32, with the float32 kernel).

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

//! The inputs of float32 products on a GPU: as given (the matmul precision decides), or rounded to
//! a 16-bit type with float32 accumulation (a layer computing under a 16-bit dtype policy).
enum class GemmInputs {
  as_given,  //!< float32 (or TensorFloat-32 at the "high" matmul precision)
  bfloat16,  //!< bfloat16 tensor cores, float32 accumulation
  float16,   //!< float16 tensor cores, float32 accumulation
};

namespace detail {
//! This thread's setting: each thread (kdist::parallel::run's ranks among them) runs its own layers.
inline GemmInputs& gemm_inputs_setting() {
  static thread_local GemmInputs inputs = GemmInputs::as_given;
  return inputs;
}
}  // namespace detail

//! The GemmInputs in force on this thread.
inline GemmInputs gemm_inputs() {
  return detail::gemm_inputs_setting();
}

//! Float32 products on a GPU take 16-bit inputs while it lives (on this thread), then the setting
//! before it is back: what kdist::AnyLayer opens around a layer's passes under a 16-bit policy.
class GemmInputsScope {
 public:
  explicit GemmInputsScope(GemmInputs inputs) : before_(detail::gemm_inputs_setting()) {
    detail::gemm_inputs_setting() = inputs;
  }
  ~GemmInputsScope() { detail::gemm_inputs_setting() = before_; }
  GemmInputsScope(const GemmInputsScope&) = delete;
  GemmInputsScope& operator=(const GemmInputsScope&) = delete;

 private:
  GemmInputs before_;
};

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
