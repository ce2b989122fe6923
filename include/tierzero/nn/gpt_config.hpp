// GPTConfig: the shape of a GPT-2 model, and the presets users name (gpt2 ... gpt2-xl).
#pragma once

#include <cstddef>
#include <string>

#include "tierzero/core/train_config.hpp"

namespace tierzero::nn {

struct GPTConfig {
  size_t max_seq_len = 1024;         // maxT: learned positions
  size_t vocab_size = 50257;         // V: real tokens
  size_t padded_vocab_size = 50304;  // Vp: V rounded up so the head's GEMM tiles evenly
  size_t num_layers = 12;            // L
  size_t num_heads = 12;             // NH
  size_t channels = 768;             // C

  static GPTConfig from_shape(const ModelShape& shape);  // validates; pads V to 128 if asked
  static GPTConfig preset(const std::string& name);      // gpt2, gpt2-medium, gpt2-large, gpt2-xl
  std::string str() const;
};

}  // namespace tierzero::nn
