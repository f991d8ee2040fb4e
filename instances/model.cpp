// kdist::BasicSequential and its train step, optimizer state and loss on float and double,
// instantiated once (include/kdist/nn/explicit_instantiation.hpp).
#include <kdist/nn/model.hpp>

KDIST_INSTANTIATE_CLASS(kdist::BasicSequential)
KDIST_INSTANTIATE_CLASS(kdist::detail::TrainStep)
KDIST_INSTANTIATE_CLASS(kdist::detail::OptimizerState)
KDIST_INSTANTIATE_CLASS(kdist::detail::OutputLoss)
