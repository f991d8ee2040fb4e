#pragma once
//! \file nn/layers/activation.hpp
//! kdist::layers::Activation: the activations a layer can end in (Keras' `activation=` argument
//! of Dense and Conv2D). The kernels are in ops/activations.hpp. `gelu` is Keras' default form,
//! `keras.activations.gelu(x, approximate=False)` = 0.5 x (1 + erf(x / sqrt 2)) (Dense only).

namespace kdist::layers {

enum class Activation { linear, relu, softmax, gelu };

}  // namespace kdist::layers
