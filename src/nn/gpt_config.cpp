// GPT-2 shapes: validation of a user shape and the standard presets.
#include "tierzero/nn/gpt_config.hpp"

#include "tierzero/core/error.hpp"

namespace tierzero::nn {

void GPTConfig::validate() const {
  TZ_CHECK(num_layers > 0 && num_heads > 0 && channels > 0 && vocab_size > 0 && max_seq_len > 0,
           "model shape " + str() + " has a zero extent",
           "n_layer, n_head, n_embd, vocab_size and context_length must be positive");
  TZ_CHECK(channels % num_heads == 0,
           "model channels " + std::to_string(channels) + " not divisible by heads " +
               std::to_string(num_heads),
           "choose n_embd a multiple of n_head");
  TZ_CHECK(padded_vocab_size >= vocab_size, "padded vocab smaller than vocab", "");
}

GPTConfig GPTConfig::preset(const std::string& name) {
  GPTConfig c;
  if (name == "gpt2") return c;
  if (name == "gpt2-medium") {
    c.num_layers = 24, c.num_heads = 16, c.channels = 1024;
    return c;
  }
  if (name == "gpt2-large") {
    c.num_layers = 36, c.num_heads = 20, c.channels = 1280;
    return c;
  }
  if (name == "gpt2-xl") {
    c.num_layers = 48, c.num_heads = 25, c.channels = 1600;
    return c;
  }
  TZ_THROW("unknown model preset '" + name + "'", "use gpt2, gpt2-medium, gpt2-large or gpt2-xl");
}

std::string GPTConfig::str() const {
  return "L=" + std::to_string(num_layers) + " NH=" + std::to_string(num_heads) +
         " C=" + std::to_string(channels) + " V=" + std::to_string(vocab_size) + " (padded " +
         std::to_string(padded_vocab_size) + ") maxT=" + std::to_string(max_seq_len);
}

}  // namespace tierzero::nn
