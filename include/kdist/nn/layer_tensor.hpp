#pragma once
//! \file nn/layer_tensor.hpp
//! What flows between layers. A layer on scalars T sees `LayerTensor<T>`: a distributed (batch,
//! features), (batch, sequence, features), (batch, height, width, channels) or (batch, depth,
//! height, width, channels) tensor of T. Between
//! the layers of a model flows an `ActivationTensor<T>`: a LayerTensor of T, or of the 16-bit dtype
//! the layer before computes in (Keras' compute_dtype: kdist::bfloat16, kdist::float16), which
//! kdist::AnyLayer converts for the layer it holds (kdist/nn/autocast.hpp).

#include <variant>

#include <kdist/core/bfloat16.hpp>
#include <kdist/core/float16.hpp>
#include <kdist/tensor/tensor.hpp>

namespace kdist {

//! What a layer on scalars T takes and returns: (batch, features), (batch, sequence, features),
//! (batch, height, width, channels) or (batch, depth, height, width, channels).
template <class T>
using LayerTensor = std::variant<DistributedTensor<T**>, DistributedTensor<T***>,
                                 DistributedTensor<T****>, DistributedTensor<T*****>>;

//! What flows between the layers of a model on scalars T: T, or a 16-bit compute dtype.
template <class T>
using ActivationTensor = std::variant<LayerTensor<T>, LayerTensor<bfloat16>, LayerTensor<float16>>;

}  // namespace kdist
