#pragma once
//! \file nn/sixteen_bit_variables.hpp
//! Variables of 16 bits: Keras' "bfloat16" and "float16" policies (kdist/nn/dtype_policy.hpp),
//! where a layer's variables, their gradients and their optimizer slots are of the compute dtype.
//!
//! How kdist holds them (a model's scalar type stays float32):
//! - the variable's value lives in its block of float32 (what the layers' GEMMs and kernels read,
//!   as under a mixed policy) and is always a value of its dtype: rounded to it (to nearest, ties
//!   to even) when the layer is built, when a checkpoint or a Keras file is loaded into it, and
//!   after each optimizer update - the values Keras' bfloat16 variable holds;
//! - its gradient (summed over the processes in float32, as the gradient sync does) is rounded to
//!   the dtype before the update reads it, as Keras' gradient of a bfloat16 variable is bfloat16;
//! - the optimizer computes the update in float32 from those values and from its slots, which are
//!   *stored* in the dtype (half the bytes of float32 slots: Adam's two slots are the largest part
//!   of a trained model's state) and widened, exactly, into one float32 scratch block per slot for
//!   the update (kdist::detail::OptimizerState);
//! - checkpoints and Keras files store the variable and its slots in the dtype (exact).
//! An update smaller than half a unit in the last place of a weight leaves it unchanged (bfloat16
//! keeps 8 significant bits), as it does in Keras: train under "mixed_bfloat16" where that matters.

#include <variant>
#include <vector>

#include <kdist/core/bfloat16.hpp>
#include <kdist/core/float16.hpp>
#include <kdist/nn/autocast.hpp>
#include <kdist/nn/dtype_policy.hpp>
#include <kdist/nn/variable.hpp>

namespace kdist::detail {

//! Rounds every element of the contiguous block `block` to `dtype` in place (to nearest, ties to
//! even); nothing when `dtype` is not 16 bits wide.
template <class View>
void round_to_dtype(const View& block, DType dtype) {
  if constexpr (std::is_same_v<typename View::non_const_value_type, float>) {
    if (dtype == DType::bfloat16) {
      convert_block<bfloat16>(block, block);
    } else if (dtype == DType::float16) {
      convert_block<float16>(block, block);
    }
  }
}

//! Gives every variable of `variables` the dtype `dtype` (a layer's policy's variable dtype) and
//! rounds its value to it.
template <class T>
void give_variable_dtype(const std::vector<VariableRef<T>>& variables, DType dtype) {
  for (const auto& ref : variables) {
    std::visit(
        [&](auto* v) {
          v->dtype = dtype;
          round_to_dtype(v->value.local(), dtype);
        },
        ref);
  }
}

}  // namespace kdist::detail
