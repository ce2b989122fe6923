// BlockActs and BlockActivations: what a transformer block keeps from its forward for its
// backward, and the storage for a number of blocks' worth of it, one buffer per tensor stacked
// over the blocks (as llm.c carves its arena), so the allocation count does not grow with depth.
// A MicroBatch holds one slot per block; with activation checkpointing the model's scratch holds
// a single slot that every block's forward and recompute reuse.
#pragma once

#include <cstddef>

#include "tierzero/device/device_allocator.hpp"
#include "tierzero/nn/activation_buffers.hpp"
#include "tierzero/nn/activation_dims.hpp"
#include "tierzero/nn/gpt_config.hpp"
#include "tierzero/nn/saved_activations.hpp"

namespace tierzero::nn {

// One block's saved internals (views into a BlockActivations slot). S: the stream's rows
// (dims.stream_tokens; B*T unless sequence parallel); Cl, NHl, Hl: this rank's attention
// channels, heads and MLP hidden features (C, NH, 4C over tp, or C and NH over ulysses); Ts: the
// whole sequence (dims.seq_len; T without Ulysses). The ComputeTensors are of dims.compute, the
// rest fp32.
struct BlockActs {
  ComputeTensor ln1;         // (S, C)
  LayerNormStats ln1_stats;  // mean, rstd (S)
  AttentionActs attn;        // qkv (B, Ts, 3Cl), atty (B, Ts, Cl), lse (B, NHl, Ts)
  float* residual2;          // (S, C) the stream between the attention and the MLP branch
  ComputeTensor ln2;         // (S, C)
  LayerNormStats ln2_stats;  // mean, rstd (S)
  MlpActs mlp;               // fch, fch_gelu (B, T, Hl)
};

// The attention's core of one block, which selective recompute rebuilds in the backward: the
// heads' output and the kernel's saved softmax statistics.
struct AttentionCore {
  DeviceBuffer atty;  // (B, Ts, Cl) compute
  DeviceBuffer lse;   // (attention_saved)
  void visit(const ActivationDims& d, const BufferVisitor& fn);
};

struct BlockActivations {  // n blocks of one micro-batch's dims; see visit
  DeviceBuffer ln1;        // (n, S, C) compute
  DeviceBuffer ln1_mean;   // (n, S)
  DeviceBuffer ln1_rstd;   // (n, S)
  DeviceBuffer qkv;        // (n, B, Ts, 3Cl) compute
  DeviceBuffer atty;       // (n, B, Ts, Cl) compute
  DeviceBuffer lse;        // (n, B, NHl, Ts)
  DeviceBuffer residual2;  // (n, S, C)
  DeviceBuffer ln2;        // (n, S, C) compute
  DeviceBuffer ln2_mean;   // (n, S)
  DeviceBuffer ln2_rstd;   // (n, S)
  DeviceBuffer fch;        // (n, B, T, Hl) compute
  DeviceBuffer fch_gelu;   // (n, B, T, Hl) compute

  // Every buffer above with its bytes for n blocks of dims d; without the attention's core
  // (atty, lse) unless with_core (selective recompute keeps it in the model's scratch).
  void visit(const ActivationDims& d, size_t n, const BufferVisitor& fn, bool with_core = true);
  // Slot i < n, for buffers allocated by visit with d (attn.atty, attn.lse null without core).
  BlockActs slot(const ActivationDims& d, size_t i) const;
};

}  // namespace tierzero::nn
