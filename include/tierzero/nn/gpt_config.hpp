// GPTConfig: the shape and architecture of a decoder-only transformer — GPT-2 (layernorm, learned
// positions, GELU MLP, tied head, biases everywhere) or the Llama family (RMSNorm, rotary
// positions, SwiGLU MLP, grouped-query attention, optional q/k/v biases as in Qwen 2, tied or
// untied head) — and the presets users name (gpt2 ... gpt2-xl, llama-3.2-1b, qwen2.5-0.5b, ...).
#pragma once

#include <cstddef>
#include <string>

namespace tierzero::nn {

enum class NormKind { layernorm, rmsnorm };
enum class PositionKind { learned, rope };
enum class MlpKind { gelu, swiglu };

// Llama 3's rotary frequency scaling (Hugging Face rope_scaling with rope_type "llama3").
struct RopeScaling {
  bool llama3 = false;  // false: plain RoPE
  double factor = 8.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  size_t original_max_position_embeddings = 8192;
  bool operator==(const RopeScaling&) const = default;
};

// What differs between GPT-2 and the Llama family. The defaults are GPT-2's.
struct GPTArch {
  NormKind norm = NormKind::layernorm;
  double norm_eps = 1e-5;  // layernorm: 1e-5 only (the GPT-2 kernel's)
  PositionKind positions = PositionKind::learned;
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;
  MlpKind mlp = MlpKind::gelu;
  size_t intermediate_size = 0;  // MLP hidden features; 0: 4 C
  size_t num_kv_heads = 0;       // grouped-query attention; 0: num_heads (multi-head)
  size_t head_dim = 0;           // 0: C / num_heads
  bool qkv_bias = true;          // q, k, v projections have biases (GPT-2, Qwen 2)
  bool linear_bias = true;       // the attention output and MLP projections have biases (GPT-2)
  bool tie_embeddings = true;    // the head reads wte; false: its own lm_head weight
  bool operator==(const GPTArch&) const = default;
  bool is_gpt2() const { return *this == GPTArch{}; }
};

struct GPTConfig {
  size_t max_seq_len = 1024;         // maxT: learned positions, or the rotary context
  size_t vocab_size = 50257;         // V: real tokens
  size_t padded_vocab_size = 50304;  // Vp: V rounded up so the head's GEMM tiles evenly
  size_t num_layers = 12;            // L
  size_t num_heads = 12;             // NH
  size_t channels = 768;             // C
  GPTArch arch;
  // Tokens whose logits the classifier holds at once (fp32, this rank's vocabulary columns); 0:
  // as many as kClassifierChunkBytes hold (ActivationDims::logits_rows). Fewer than a
  // micro-batch's tokens and the head, the loss and its gradient run chunk by chunk in the
  // backward instead of keeping (B T, V) logits from the forward. Memory only: not the model's
  // shape, so checkpoints and exports do not carry it.
  size_t classifier_chunk_tokens = 0;

  size_t head_dim() const { return arch.head_dim ? arch.head_dim : channels / num_heads; }
  size_t kv_heads() const { return arch.num_kv_heads ? arch.num_kv_heads : num_heads; }
  size_t hidden() const { return arch.intermediate_size ? arch.intermediate_size : 4 * channels; }
  size_t attention_channels() const { return num_heads * head_dim(); }  // the heads' outputs
  // Width of the fused q, k, v projection's output: (NH + 2 KVH) head_dim.
  size_t qkv_channels() const { return (num_heads + 2 * kv_heads()) * head_dim(); }
  // Width of the MLP's first projection's output: the hidden features, twice for SwiGLU's gate
  // and up.
  size_t fc_channels() const { return arch.mlp == MlpKind::swiglu ? 2 * hidden() : hidden(); }
  // GPT-2's layout and kernels (fused [q|k|v] rows) as opposed to the grouped layout of the
  // Llama modules.
  bool is_gpt2() const { return arch.is_gpt2(); }

  // Throws Error naming the field when the shape cannot be built (channels not divisible by
  // heads, kv heads not dividing heads, padded vocabulary smaller than the vocabulary, a zero
  // extent, a GPT-2 part mixed in a way the modules do not build).
  void validate() const;
  // gpt2, gpt2-medium, gpt2-large, gpt2-xl, llama-3.2-1b, llama-3.1-8b, qwen2.5-0.5b,
  // smollm-135m, llama-tiny.
  static GPTConfig preset(const std::string& name);
  std::string str() const;
};

}  // namespace tierzero::nn
