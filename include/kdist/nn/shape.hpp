#pragma once
//! \file nn/shape.hpp
//! kdist::Shape: the shape of one example, without its batch dimension: (784,) or (28, 28, 1).
//! What layers build from and datasets hold.

#include <cstddef>
#include <vector>

namespace kdist {

//! A shape without its batch dimension: (784,) or (28, 28, 1).
using Shape = std::vector<std::size_t>;

}  // namespace kdist
