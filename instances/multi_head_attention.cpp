// kdist::layers::BasicMultiHeadAttention on float and double, instantiated once
// (include/kdist/nn/explicit_instantiation.hpp).
#include <kdist/nn/layers/multi_head_attention.hpp>

KDIST_INSTANTIATE_LAYER(BasicMultiHeadAttention)
