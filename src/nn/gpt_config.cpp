// Model shapes: validation of a user shape and architecture, and the standard presets (GPT-2's
// and the Llama family's, with the values of their Hugging Face config.json).
#include "tierzero/nn/gpt_config.hpp"

#include "tierzero/core/error.hpp"

namespace tierzero::nn {

namespace {

void validate_llama_parts(const GPTConfig& c) {
  const GPTArch& a = c.arch;
  TZ_CHECK(c.num_heads % c.kv_heads() == 0,
           "n_kv_head " + std::to_string(c.kv_heads()) + " does not divide n_head " +
               std::to_string(c.num_heads),
           "grouped-query attention shares each kv head among n_head / n_kv_head query heads");
  TZ_CHECK(a.head_dim > 0 || c.channels % c.num_heads == 0,
           "model channels " + std::to_string(c.channels) + " not divisible by heads " +
               std::to_string(c.num_heads),
           "choose n_embd a multiple of n_head, or set head_dim");
  TZ_CHECK(a.positions != PositionKind::rope || c.head_dim() % 2 == 0,
           "rotary positions need an even head_dim, not " + std::to_string(c.head_dim()),
           "choose head_dim (n_embd / n_head) even");
  TZ_CHECK(a.norm != NormKind::layernorm || a.norm_eps == 1e-5,
           "layernorm eps " + std::to_string(a.norm_eps) + " is not supported",
           "the layernorm kernels use 1e-5 (GPT-2's); rmsnorm takes any eps");
  TZ_CHECK(a.norm_eps > 0.0, "norm eps must be positive", "set rms_norm_eps > 0");
  TZ_CHECK(a.rope_theta > 0.0, "rope_theta must be positive", "e.g. 10000 or 500000");
  const RopeScaling& s = a.rope_scaling;
  TZ_CHECK(!s.llama3 ||
               (s.factor > 0 && s.low_freq_factor > 0 && s.high_freq_factor > s.low_freq_factor &&
                s.original_max_position_embeddings > 0),
           "rope_scaling needs factor > 0, 0 < low_freq_factor < high_freq_factor and "
           "original_max_position_embeddings > 0",
           "Llama 3.1 uses factor 8, low_freq_factor 1, high_freq_factor 4, 8192");
}

GPTConfig llama(size_t vocab, size_t layers, size_t heads, size_t kv_heads, size_t channels,
                size_t intermediate, double theta, size_t context) {
  GPTConfig c;
  c.vocab_size = vocab;
  c.padded_vocab_size = (vocab + 127) / 128 * 128;
  c.num_layers = layers, c.num_heads = heads, c.channels = channels;
  c.max_seq_len = context;
  GPTArch& a = c.arch;
  a.norm = NormKind::rmsnorm;
  a.positions = PositionKind::rope;
  a.rope_theta = theta;
  a.mlp = MlpKind::swiglu;
  a.intermediate_size = intermediate;
  a.num_kv_heads = kv_heads;
  a.qkv_bias = false;
  a.linear_bias = false;
  return c;
}

RopeScaling llama3_scaling(double factor) {
  RopeScaling s;
  s.llama3 = true;
  s.factor = factor;
  return s;
}

}  // namespace

void GPTConfig::validate() const {
  TZ_CHECK(num_layers > 0 && num_heads > 0 && channels > 0 && vocab_size > 0 && max_seq_len > 0,
           "model shape " + str() + " has a zero extent",
           "n_layer, n_head, n_embd, vocab_size and context_length must be positive");
  TZ_CHECK(padded_vocab_size >= vocab_size, "padded vocab smaller than vocab", "");
  if (!is_gpt2()) return validate_llama_parts(*this);
  TZ_CHECK(channels % num_heads == 0,
           "model channels " + std::to_string(channels) + " not divisible by heads " +
               std::to_string(num_heads),
           "choose n_embd a multiple of n_head");
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
  if (name == "llama-3.2-1b") {
    c = llama(128256, 16, 32, 8, 2048, 8192, 500000.0, 131072);
    c.arch.rope_scaling = llama3_scaling(32.0);
    return c;
  }
  if (name == "llama-3.1-8b") {
    c = llama(128256, 32, 32, 8, 4096, 14336, 500000.0, 131072);
    c.arch.rope_scaling = llama3_scaling(8.0);
    c.arch.tie_embeddings = false;
    return c;
  }
  if (name == "qwen2.5-0.5b") {
    c = llama(151936, 24, 14, 2, 896, 4864, 1000000.0, 32768);
    c.arch.norm_eps = 1e-6;
    c.arch.qkv_bias = true;
    return c;
  }
  if (name == "smollm-135m") return llama(49152, 30, 9, 3, 576, 1536, 10000.0, 2048);
  if (name == "llama-tiny") {  // tests and smoke runs: byte tokens (256 + EOT)
    c = llama(257, 2, 4, 2, 64, 128, 10000.0, 256);
    c.arch.rope_scaling = llama3_scaling(8.0);
    c.arch.rope_scaling.original_max_position_embeddings = 64;
    c.arch.tie_embeddings = false;
    return c;
  }
  TZ_THROW("unknown model preset '" + name + "'",
           "use gpt2, gpt2-medium, gpt2-large, gpt2-xl, llama-3.2-1b, llama-3.1-8b, "
           "qwen2.5-0.5b, smollm-135m or llama-tiny");
}

std::string GPTConfig::str() const {
  std::string s = "L=" + std::to_string(num_layers) + " NH=" + std::to_string(num_heads) +
                  " C=" + std::to_string(channels) + " V=" + std::to_string(vocab_size) +
                  " (padded " + std::to_string(padded_vocab_size) +
                  ") maxT=" + std::to_string(max_seq_len);
  if (is_gpt2()) return s;
  return s + " KVH=" + std::to_string(kv_heads()) + " hd=" + std::to_string(head_dim()) +
         " I=" + std::to_string(hidden()) +
         (arch.norm == NormKind::rmsnorm ? " rmsnorm" : " layernorm") +
         (arch.positions == PositionKind::rope ? " rope" : " learned") +
         (arch.mlp == MlpKind::swiglu ? " swiglu" : " gelu") +
         (arch.tie_embeddings ? " tied" : " untied");
}

}  // namespace tierzero::nn
