// ActivationDims: a micro-batch's per-rank extents, and the divisibility checks that make them
// whole.
#include "tierzero/nn/activation_dims.hpp"

#include <algorithm>
#include <string>

#include "tierzero/core/error.hpp"

namespace tierzero::nn {

namespace {

// The Llama family's own splits: the kv heads over tp and Ulysses (whole kv groups per rank),
// the MLP's intermediate features over tp.
void check_llama_split(const GPTConfig& config, size_t tp, size_t ulysses) {
  if (config.is_gpt2()) return;
  const std::string kv = std::to_string(config.kv_heads());
  TZ_CHECK(config.kv_heads() % tp == 0,
           "n_kv_head " + kv + " is not divisible by tensor_parallel " + std::to_string(tp) +
               ": each tensor-parallel rank computes whole kv groups",
           "choose a tensor_parallel size that divides num_key_value_heads");
  TZ_CHECK(config.kv_heads() % ulysses == 0,
           "n_kv_head " + kv + " is not divisible by ulysses_parallel " + std::to_string(ulysses) +
               ": each Ulysses rank attends over whole kv groups",
           "choose a ulysses_parallel size that divides num_key_value_heads");
  TZ_CHECK(config.hidden() % tp == 0,
           "intermediate_size " + std::to_string(config.hidden()) +
               " is not divisible by tensor_parallel " + std::to_string(tp),
           "choose a tensor_parallel size that divides the MLP's intermediate size");
}

// The classifier's chunk before it is capped at the micro-batch's tokens: the config's, else
// as many rows of fp32 (rows, Vl) logits as kClassifierChunkBytes hold, in whole 64-row tiles.
size_t logits_chunk_rows(const GPTConfig& config, size_t local_vocab) {
  if (config.classifier_chunk_tokens > 0) return config.classifier_chunk_tokens;
  constexpr size_t kTile = 64;
  const size_t rows = kClassifierChunkBytes / (local_vocab * sizeof(float));
  return std::max(kTile, rows / kTile * kTile);
}

}  // namespace

ActivationDims ActivationDims::of(const GPTConfig& config, size_t B, size_t T, size_t tp,
                                  bool sequence_parallel, size_t ulysses, DType compute) {
  TZ_CHECK(B > 0 && T > 0, "empty batch", "");
  TZ_CHECK(tp >= 1, "tensor_parallel 0", "tensor_parallel is at least 1");
  TZ_CHECK(ulysses >= 1, "ulysses_parallel 0", "ulysses_parallel is at least 1");
  const std::string us = std::to_string(ulysses);
  TZ_CHECK(ulysses == 1 || tp == 1,
           "ulysses_parallel " + us + " with tensor_parallel " + std::to_string(tp) +
               " is not supported: the Ulysses attention runs on whole layers",
           "use either ulysses_parallel or tensor_parallel, not both");
  TZ_CHECK(config.num_heads % ulysses == 0,
           "ulysses_parallel " + us + " does not divide the model's " +
               std::to_string(config.num_heads) +
               " attention heads: each Ulysses rank attends over whole heads",
           "choose a ulysses_parallel size that divides n_head");
  TZ_CHECK(T % ulysses == 0,
           "ulysses_parallel " + us + " does not divide seq_len " + std::to_string(T) +
               ": each Ulysses rank holds an equal slice of every sequence",
           "choose seq_len a multiple of ulysses_parallel");
  const std::string tps = std::to_string(tp);
  TZ_CHECK(config.num_heads % tp == 0,
           "n_head " + std::to_string(config.num_heads) + " is not divisible by tensor_parallel " +
               tps + ": each tensor-parallel rank computes whole attention heads",
           "choose a tensor_parallel size that divides n_head");
  TZ_CHECK(config.padded_vocab_size % tp == 0,
           "the padded vocabulary " + std::to_string(config.padded_vocab_size) +
               " (vocab_size rounded up to a multiple of 128, or padded_vocab_size) is not "
               "divisible by tensor_parallel " +
               tps,
           "choose a tensor_parallel size that divides it, or set model.padded_vocab_size to a "
           "multiple of tensor_parallel");
  check_llama_split(config, tp, ulysses);
  ActivationDims d;
  d.compute = compute;
  d.B = B;
  d.seq_len = T;
  d.T = T / ulysses;
  d.ulysses = ulysses;
  d.tokens = B * d.T;
  d.tp = tp;
  d.sequence_parallel = sequence_parallel && tp > 1;
  if (d.sequence_parallel)
    TZ_CHECK(d.tokens % tp == 0,
             "sequence parallelism cuts a micro-batch's " + std::to_string(d.tokens) +
                 " tokens (micro-batch " + std::to_string(B) + " x seq_len " + std::to_string(T) +
                 ") over tensor_parallel " + tps + ", which does not divide them",
             "choose micro-batch size and seq_len whose product is a multiple of "
             "tensor_parallel, or turn sequence_parallel off");
  d.stream_tokens = d.sequence_parallel ? d.tokens / tp : d.tokens;
  d.channels = config.channels;
  d.local_heads = config.num_heads / (tp * ulysses);
  d.local_kv_heads = config.kv_heads() / (tp * ulysses);
  d.head_dim = config.head_dim();
  d.local_channels = config.attention_channels() / (tp * ulysses);
  d.local_qkv = config.qkv_channels() / (tp * ulysses);
  d.local_hidden = config.hidden() / tp;
  d.local_fc = config.fc_channels() / tp;
  d.local_vocab = config.padded_vocab_size / tp;
  d.logits_rows = std::min(d.tokens, logits_chunk_rows(config, d.local_vocab));
  return d;
}

}  // namespace tierzero::nn
