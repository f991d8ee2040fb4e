// kdist::BasicSequential and its train step, optimizer state and loss, the holders of the library's
// losses (AnyLoss) and optimizers (AnyOptimizer) on float and double, instantiated once
// (include/kdist/nn/explicit_instantiation.hpp).
#include <kdist/nn/model.hpp>

KDIST_INSTANTIATE_CLASS(kdist::BasicSequential)
KDIST_INSTANTIATE_CLASS(kdist::detail::TrainStep)
#define KDIST_INSTANTIATE_TRAIN_STEP_ON(Y) KDIST_INSTANTIATE_MEMBERS(KDIST_DETAIL_TRAIN_STEP_ON, Y)
KDIST_TRAIN_STEP_TARGETS(KDIST_INSTANTIATE_TRAIN_STEP_ON)
KDIST_INSTANTIATE_CLASS(kdist::detail::OptimizerState)
KDIST_INSTANTIATE_CLASS(kdist::detail::OutputLoss)
KDIST_INSTANTIATE_CLASS(kdist::AnyLoss)
KDIST_INSTANTIATE_LOSS(MeanSquaredError)
KDIST_INSTANTIATE_LOSS(CategoricalCrossentropy)
KDIST_INSTANTIATE_LOSS(SparseCategoricalCrossentropy)
KDIST_INSTANTIATE_CLASS(kdist::detail::BoxedOptimizer)
KDIST_INSTANTIATE_CLASS(kdist::AnyOptimizer)
