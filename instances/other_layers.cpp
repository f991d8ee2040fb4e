// kdist's smaller layers (Dropout, Flatten, LayerNormalization, Residual) on float and double,
// instantiated once (include/kdist/nn/explicit_instantiation.hpp).
#include <kdist/nn/layers/dropout.hpp>
#include <kdist/nn/layers/flatten.hpp>
#include <kdist/nn/layers/layer_normalization.hpp>
#include <kdist/nn/layers/residual.hpp>

KDIST_INSTANTIATE_LAYER(BasicDropout)
KDIST_INSTANTIATE_LAYER(BasicFlatten)
KDIST_INSTANTIATE_LAYER(BasicLayerNormalization)
KDIST_INSTANTIATE_LAYER(BasicResidual)
