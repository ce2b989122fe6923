// ActivationDims: the extents of one micro-batch's activations on one rank, which tensor and
// sequence parallelism change: Megatron's tensor parallelism cuts the attention heads, the MLP's
// hidden features and the vocabulary over the tp ranks, and its sequence parallelism also cuts the
// residual stream and the layernorm regions along the tokens. Every activation holder (the
// micro-batch, the model's scratch, a block's saved internals) sizes its buffers from these, so
// the estimator's byte count is the real per-rank one.
#pragma once

#include <cstddef>

#include "tierzero/nn/gpt_config.hpp"

namespace tierzero::nn {

struct ActivationDims {
  size_t B = 0, T = 0;
  size_t tokens = 0;  // B * T: rows of the attention and MLP insides and of the logits
  // Rows of the residual stream and the layernorm regions: tokens / tp with sequence
  // parallelism (this rank's contiguous run of the flattened B * T tokens), else tokens.
  size_t stream_tokens = 0;
  size_t channels = 0;        // C, the residual stream's width
  size_t local_channels = 0;  // C / tp: the channels of this rank's attention heads
  size_t local_heads = 0;     // NH / tp
  size_t local_hidden = 0;    // 4C / tp: this rank's MLP hidden features
  size_t local_vocab = 0;     // Vp / tp: this rank's logit columns
  size_t tp = 1;
  bool sequence_parallel = false;  // only ever true with tp > 1

  // Throws Error naming what does not divide: the heads or the padded vocabulary by tp, or with
  // sequence parallelism the B * T tokens by tp. sequence_parallel with tp 1 is no split.
  static ActivationDims of(const GPTConfig& config, size_t B, size_t T, size_t tp = 1,
                           bool sequence_parallel = false);
  bool operator==(const ActivationDims&) const = default;
};

}  // namespace tierzero::nn
