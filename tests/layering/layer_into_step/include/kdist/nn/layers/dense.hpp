#pragma once
// fixture: a layer that reaches into the training step (layering.rejects_layer_reaching_into_the_step)
#include <kdist/nn/train/gradient_sync.hpp>
