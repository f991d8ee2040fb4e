#pragma once
//! \file nn/layers/conv2d.hpp
//! `kdist::layers::Conv2D`, kept where programs include it from: the layer is
//! kdist::layers::BasicConvolution<T, 2> (kdist/nn/layers/convolution.hpp, with Conv3D).
#include <kdist/nn/layers/convolution.hpp>
