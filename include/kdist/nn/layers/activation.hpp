#pragma once
//! \file nn/layers/activation.hpp
//! kdist::layers::Activation: the activations a layer can end in (Keras' `activation=` argument
//! of Dense and Conv2D). The kernels are in ops/activations.hpp.

namespace kdist::layers {

enum class Activation { linear, relu, softmax };

}  // namespace kdist::layers
