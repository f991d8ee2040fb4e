// kdist::layers::BasicConv2D on float and double, instantiated once
// (include/kdist/nn/explicit_instantiation.hpp).
#include <kdist/nn/layers/conv2d.hpp>

KDIST_INSTANTIATE_LAYER(BasicConv2D)
