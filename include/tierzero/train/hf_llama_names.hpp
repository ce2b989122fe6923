// Hugging Face names of a Llama-family model's tensors (LlamaForCausalLM, Qwen2ForCausalLM,
// ...: model.layers.N.self_attn.q_proj.weight, ...) and where each one's rows go in TierZero's
// tensors: q, k and v are fused into qkvw in the grouped layout (per kv group: its query heads,
// its k head, its v head), gate and up into fcw (gate rows, then up rows), and the vocabulary's
// padding rows of wte and lm_head have no Hugging Face counterpart. Loading weights from a
// Hugging Face file or directory, writing one, and the parity tests go through this one table.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "tierzero/nn/gpt_config.hpp"
#include "tierzero/nn/tensor_meta.hpp"

namespace tierzero::train {

// A run of consecutive rows of the Hugging Face tensor and the rows they are in TierZero's full
// (unpartitioned) tensor.
struct HfRowRun {
  size_t hf_row;  // first row in the Hugging Face tensor
  size_t row;     // first row in TierZero's tensor
  size_t rows;
};

struct HfLlamaTensor {
  std::string hf_name;  // "model.layers.0.self_attn.q_proj.weight"
  nn::ParamKind kind;   // TierZero's tensor: qkvw of layer 0
  int layer;            // -1 for the embeddings, final norm and head
  size_t rows, cols;    // the Hugging Face tensor's shape (cols 1 for a vector)
  std::vector<HfRowRun> runs;
};

// Every Hugging Face tensor of the model `config` describes (not GPT-2: throws Error), in the
// order Hugging Face lists them; the untied head's lm_head.weight only when untied, q/k/v biases
// only when the config has them.
std::vector<HfLlamaTensor> hf_llama_tensors(const nn::GPTConfig& config);

// hf (rows, cols) -> its rows of `full` (TierZero's full tensor, rows of cols elements).
void hf_to_full(const HfLlamaTensor& t, const float* hf, float* full);
// The inverse: its rows of `full` -> hf (rows, cols).
void full_to_hf(const HfLlamaTensor& t, const float* full, float* hf);

}  // namespace tierzero::train
