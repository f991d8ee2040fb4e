#pragma once
// fixture: the training step's header (layering.rejects_layer_reaching_into_the_step)
