// kdist::layers::BasicEmbedding and BasicPositionEmbedding on float and double, instantiated once
// (include/kdist/nn/explicit_instantiation.hpp).
#include <kdist/nn/layers/embedding.hpp>
#include <kdist/nn/layers/position_embedding.hpp>

KDIST_INSTANTIATE_LAYER(BasicEmbedding)
KDIST_INSTANTIATE_LAYER(BasicPositionEmbedding)
