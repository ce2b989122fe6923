// ActivationDims: the extents of one micro-batch's activations on one rank, which tensor and
// sequence parallelism change: Megatron's tensor parallelism cuts the attention heads, the MLP's
// hidden features and the vocabulary over the tp ranks, and its sequence parallelism also cuts the
// residual stream and the layernorm regions along the tokens. Every activation holder (the
// micro-batch, the model's scratch, a block's saved internals) sizes its buffers from these, so
// the estimator's byte count is the real per-rank one. Ulysses sequence parallelism cuts every
// sequence into `ulysses` slices, one per rank, so every per-token buffer holds T / ulysses rows;
// only the attention's insides hold the whole sequence, for NH / ulysses heads.
#pragma once

#include <cstddef>

#include "tierzero/core/dtype.hpp"
#include "tierzero/nn/gpt_config.hpp"

namespace tierzero::nn {

// The automatic chunk of the classifier's logits: fp32 bytes of (rows, Vl) at most (rows a
// multiple of 64 so the head's GEMMs keep whole tiles, at least 64).
inline constexpr size_t kClassifierChunkBytes = size_t{128} << 20;

struct ActivationDims {
  size_t B = 0;
  size_t T = 0;        // this rank's positions of each sequence: seq_len / ulysses
  size_t seq_len = 0;  // the whole sequence, as the attention kernel sees it
  size_t tokens = 0;   // B * T: rows of the MLP insides, of the logits and of the projections
  // Rows of the residual stream and the layernorm regions: tokens / tp with sequence
  // parallelism (this rank's contiguous run of the flattened B * T tokens), else tokens.
  size_t stream_tokens = 0;
  size_t channels = 0;        // C, the residual stream's width
  size_t local_channels = 0;  // C / (tp ulysses): the channels of this rank's attention heads
  size_t local_heads = 0;     // NH / (tp ulysses)
  size_t local_kv_heads = 0;  // KVH / (tp ulysses): grouped-query attention's kv heads
  size_t head_dim = 0;        // hs
  size_t local_qkv = 0;       // the fused q, k, v row: 3 Cl (GPT-2), (NHl + 2 KVHl) hs (Llama)
  size_t local_hidden = 0;    // 4C / tp (or intermediate_size / tp): this rank's MLP hidden
  size_t local_fc = 0;        // the MLP's first projection's row: Hl, or 2 Hl for SwiGLU
  size_t local_vocab = 0;     // Vp / tp: this rank's logit columns
  // Rows of the logits held at once: tokens (the whole (B T, Vl) block, kept from the forward to
  // the backward) or fewer (the classifier in chunks, see GPTConfig::classifier_chunk_tokens).
  size_t logits_rows = 0;
  size_t tp = 1;
  bool sequence_parallel = false;  // only ever true with tp > 1
  size_t ulysses = 1;              // Ulysses sequence-parallel ranks
  // The dtype of what the products read and write (16-bit compute): the norms' outputs, qkv,
  // the heads' outputs, the MLP's insides, their gradients between products, and the logits'
  // gradient; fp32 (the reference) or the 16-bit working type. The residual stream, its
  // gradient, the norms' statistics, the logits and the losses stay fp32.
  DType compute = DType::f32;

  size_t compute_bytes() const { return dtype_size(compute); }  // one element in `compute`

  // Rows of the attention's insides (qkv, the heads' outputs and their gradients): the whole
  // sequence of each of the B rows; equal to `tokens` without Ulysses.
  size_t attention_tokens() const { return B * seq_len; }
  // The classifier runs chunk by chunk in the backward (no logits kept from the forward).
  bool chunked_logits() const { return logits_rows < tokens; }
  // Floats the attention kernel keeps from its forward (AttentionActs::lse), and its backward's
  // scratch: Kernels::attention_saved_floats / attention_scratch_floats for this rank's heads.
  // Every backend's attention is tiled (online softmax): one logsumexp per query row
  // (B, NHl, Ts), no scratch, nothing of size T^2.
  size_t attention_saved() const { return B * local_heads * seq_len; }
  size_t attention_scratch() const { return 0; }

  // T is the whole sequence. Throws Error naming what does not divide: the heads, kv heads, MLP
  // hidden features or the padded vocabulary by tp, with sequence parallelism the B * T tokens by
  // tp, under Ulysses the heads the kv heads or the sequence by ulysses. sequence_parallel with tp
  // 1 is no split. Ulysses with tp > 1 is refused (not built). `compute` (fp32, bf16 or fp16)
  // runs every architecture and split.
  static ActivationDims of(const GPTConfig& config, size_t B, size_t T, size_t tp = 1,
                           bool sequence_parallel = false, size_t ulysses = 1,
                           DType compute = DType::f32);
  bool operator==(const ActivationDims&) const = default;
};

}  // namespace tierzero::nn
