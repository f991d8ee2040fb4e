#pragma once
// The GPT that the device-graph, launch-count and on-device-metrics tests train: a 32-byte
// vocabulary, sequences of 16, width 32, 4 heads, dropout 0.1 (examples/common/gpt_model.hpp).

#include <cstddef>

#include "common/gpt_model.hpp"

namespace kdist::test {

inline kdist::examples::GptConfig tiny_gpt_config(std::size_t blocks) {
  kdist::examples::GptConfig c;
  c.vocab = 32;
  c.sequence = 16;
  c.d_model = 32;
  c.heads = 4;
  c.blocks = blocks;
  c.dropout = 0.1;
  return c;
}

}  // namespace kdist::test
