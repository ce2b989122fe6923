// GPT-2 shapes: validation of a user shape and the standard presets.
#include "tierzero/nn/gpt_config.hpp"

#include "tierzero/core/error.hpp"

namespace tierzero::nn {

GPTConfig GPTConfig::from_shape(const ModelShape& s) {
  GPTConfig c;
  c.max_seq_len = static_cast<size_t>(s.context_length);
  c.vocab_size = static_cast<size_t>(s.vocab_size);
  c.padded_vocab_size = s.padded_vocab_size > 0 ? static_cast<size_t>(s.padded_vocab_size)
                                                : (c.vocab_size + 127) / 128 * 128;
  c.num_layers = static_cast<size_t>(s.n_layer);
  c.num_heads = static_cast<size_t>(s.n_head);
  c.channels = static_cast<size_t>(s.n_embd);
  TZ_CHECK(c.channels % c.num_heads == 0,
           "model channels " + std::to_string(c.channels) + " not divisible by heads " +
               std::to_string(c.num_heads),
           "choose n_embd a multiple of n_head");
  TZ_CHECK(c.padded_vocab_size >= c.vocab_size, "padded vocab smaller than vocab", "");
  return c;
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
