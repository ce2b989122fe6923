// BlockActs and BlockActivations: what a transformer block keeps from its forward for its
// backward, and the storage for a number of blocks' worth of it, one buffer per tensor stacked
// over the blocks (as llm.c carves its arena), so the allocation count does not grow with depth.
// A MicroBatch holds one slot per block; with activation checkpointing the model's scratch holds
// a single slot that every block's forward and recompute reuse.
#pragma once

#include <cstddef>

#include "tierzero/device/device_allocator.hpp"
#include "tierzero/nn/activation_buffers.hpp"
#include "tierzero/nn/attention.hpp"
#include "tierzero/nn/gpt_config.hpp"
#include "tierzero/nn/layer_norm.hpp"
#include "tierzero/nn/mlp.hpp"

namespace tierzero::nn {

// One block's saved internals (views into a BlockActivations slot).
struct BlockActs {
  float* ln1;                // (B, T, C)
  LayerNormStats ln1_stats;  // mean, rstd (B, T)
  AttentionActs attn;        // qkv (B, T, 3C), atty (B, T, C), att (B, NH, T, T)
  float* residual2;          // (B, T, C) the stream between the attention and the MLP branch
  float* ln2;                // (B, T, C)
  LayerNormStats ln2_stats;  // mean, rstd (B, T)
  MlpActs mlp;               // fch, fch_gelu (B, T, 4C)
};

struct BlockActivations {  // n blocks for (B, T); see visit
  DeviceBuffer ln1;        // (n, B, T, C)
  DeviceBuffer ln1_mean;   // (n, B, T)
  DeviceBuffer ln1_rstd;   // (n, B, T)
  DeviceBuffer qkv;        // (n, B, T, 3C)
  DeviceBuffer atty;       // (n, B, T, C)
  DeviceBuffer att;        // (n, B, NH, T, T)
  DeviceBuffer residual2;  // (n, B, T, C)
  DeviceBuffer ln2;        // (n, B, T, C)
  DeviceBuffer ln2_mean;   // (n, B, T)
  DeviceBuffer ln2_rstd;   // (n, B, T)
  DeviceBuffer fch;        // (n, B, T, 4C)
  DeviceBuffer fch_gelu;   // (n, B, T, 4C)

  // Every buffer above with its bytes for n blocks of (B, T).
  void visit(const GPTConfig& config, size_t n, size_t B, size_t T, const BufferVisitor& fn);
  // Slot i < n, for buffers allocated by visit with (B, T).
  BlockActs slot(const GPTConfig& config, size_t i, size_t B, size_t T) const;
};

}  // namespace tierzero::nn
