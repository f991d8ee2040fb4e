#pragma once
// A core header that includes a layer above it: check_layers.cmake must reject this tree.
#include <kdist/nn/layer.hpp>
