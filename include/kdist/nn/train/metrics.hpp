#pragma once
//! \file nn/train/metrics.hpp
//! What a training step, an epoch or an evaluation returns (`kdist::Metrics`), and what `fit`
//! returns (`kdist::History`, Keras' History.history).

#include <cstddef>
#include <vector>

namespace kdist {

//! What a step, an epoch or an evaluation returns: the global mean loss and, with integer labels,
//! the accuracy; identical on every process.
struct Metrics {
  double loss = 0;
  double accuracy = 0;
  std::size_t examples = 0;
  bool has_accuracy = true;  //!< false for float targets (Keras prints only the loss)
};

//! What `fit` returns: one Metrics per epoch (Keras' History.history).
struct History {
  std::vector<Metrics> epochs;
};

}  // namespace kdist
