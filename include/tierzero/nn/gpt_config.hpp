// GPTConfig: the shape of a GPT-2 model, and the presets users name (gpt2 ... gpt2-xl).
#pragma once

#include <cstddef>
#include <string>

namespace tierzero::nn {

struct GPTConfig {
  size_t max_seq_len = 1024;         // maxT: learned positions
  size_t vocab_size = 50257;         // V: real tokens
  size_t padded_vocab_size = 50304;  // Vp: V rounded up so the head's GEMM tiles evenly
  size_t num_layers = 12;            // L
  size_t num_heads = 12;             // NH
  size_t channels = 768;             // C

  // Throws Error naming the field when the shape cannot be built (channels not divisible by
  // heads, padded vocabulary smaller than the vocabulary, a zero extent).
  void validate() const;
  static GPTConfig preset(const std::string& name);  // gpt2, gpt2-medium, gpt2-large, gpt2-xl
  std::string str() const;
};

}  // namespace tierzero::nn
