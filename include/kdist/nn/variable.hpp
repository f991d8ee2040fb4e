#pragma once
//! \file nn/variable.hpp
//! A trainable variable (`kdist::layers::Variable`): its Keras path, its value and its gradient,
//! both laid out by the distribution; and `kdist::VariableRef<T>`, a layer's variable as the model
//! and its optimizer see it, of any rank.

#include <cstddef>
#include <string>
#include <variant>
#include <vector>

#include <kdist/nn/dtype_policy.hpp>
#include <kdist/tensor/tensor.hpp>

namespace kdist {

//! A trainable variable (`kdist::layers::Variable`): its Keras path ("d1/kernel"), its value and
//! its gradient, both laid out by the distribution (gradients are sharded exactly like the value),
//! and its dtype (Keras' `variable.dtype`): the model's scalars, or under the "bfloat16" and
//! "float16" policies 16 bits, set by kdist::AnyLayer when the layer is built. A 16-bit variable's
//! value is held in a block of the model's scalars (what the layers' GEMMs read) and is always a
//! value of its dtype: rounded when built, loaded and after each update; its gradient is rounded to
//! it before the update, and its optimizer slots are stored in it (kdist/nn/sixteen_bit_variables.hpp).
template <class DataType>
struct TrainableVariable {
  std::string path;
  DistributedTensor<DataType> value;
  DistributedTensor<DataType> grad;
  DType dtype = dtype_of<typename DistributedTensor<DataType>::value_type>();
  std::vector<std::size_t> shape() const { return {value.shape().begin(), value.shape().end()}; }
};

//! A layer's variable as the model sees it: a bias or a norm's scale (rank 1), a dense kernel or
//! an embedding table (rank 2), an attention projection (d_model, heads, key_dim) or its bias
//! (rank 3, rank 2), or a convolution kernel (rank 4: Conv2D, rank 5: Conv3D).
template <class T>
using VariableRef =
    std::variant<TrainableVariable<T*>*, TrainableVariable<T**>*, TrainableVariable<T***>*,
                 TrainableVariable<T****>*, TrainableVariable<T*****>*>;

namespace layers {
template <class DataType>
using Variable = TrainableVariable<DataType>;
}  // namespace layers

}  // namespace kdist
