// kdist::layers::Conv2D (BasicConvolution<T, 2>) on float and double, instantiated once
// (include/kdist/nn/explicit_instantiation.hpp). Conv3D is compiled where it is used.
#include <kdist/nn/layers/convolution.hpp>

KDIST_INSTANTIATE_LAYER_AT(BasicConvolution, 2)
