// kdist::layers::BasicDense on float and double, instantiated once (include/kdist/nn/explicit_instantiation.hpp).
#include <kdist/nn/layers/dense.hpp>

KDIST_INSTANTIATE_LAYER(BasicDense)
