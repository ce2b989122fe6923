// GPT: a GPT-2 model with explicit forward and backward passes (no autograd), in the manner of
// llm.c. It owns its activations; parameters and gradients come from a ParamProvider one unit at a
// time, so the same code runs resident (reference) or under the ZeRO partition store. With
// activation checkpointing on, it trades one extra block forward per block in the backward for
// keeping only each block's input residual stream instead of all its internals.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "tierzero/device/device_allocator.hpp"
#include "tierzero/nn/gpt_config.hpp"
#include "tierzero/nn/param_layout.hpp"
#include "tierzero/nn/param_provider.hpp"

namespace tierzero::nn {

// GPT-2 initialisation into a host buffer laid out by `layout`: weights normal(0, 0.02), residual
// output projections normal(0, 0.02 / sqrt(2 L)), biases 0, layernorm weights 1.
void init_gpt2_params(const ParamLayout& layout, const GPTConfig& config, uint64_t seed,
                      float* host_params);  // (layout.total_numel())

class GPT {
 public:
  GPT(const GPTConfig& config, DeviceAllocator& allocator);

  const GPTConfig& config() const { return config_; }
  const ParamLayout& layout() const { return layout_; }

  // Mean cross-entropy over the batch; keeps the logits (see logits()).
  // tokens, targets: host arrays (B, T); targets may be null (then returns 0, logits only).
  float evaluate(ParamProvider& params, const int32_t* tokens, const int32_t* targets, size_t B,
                 size_t T);
  // Forward and backward: returns the mean loss and accumulates (+=) grad_scale * d(mean loss)
  // into the provider's gradients. grad_scale is 1/accumulation_steps under accumulation.
  float forward_backward(ParamProvider& params, const int32_t* tokens, const int32_t* targets,
                         size_t B, size_t T, float grad_scale);

  // Logits of the last evaluate(), (B, T, Vp) in device memory; columns V..Vp are padding.
  const float* logits() const { return acts_.logits.f32(); }
  // Bytes of the activations allocated now (for the last batch shape; 0 before the first call).
  size_t activation_bytes() const { return activation_bytes_; }

  // Activation checkpointing. On: the forward keeps per block only its input residual stream
  // (the checkpoint) and runs the block's internals in one layer's worth of scratch; the backward
  // recomputes each block's forward from its checkpoint inside the block's own acquire_params, so
  // the ParamProvider sees the same calls as without it. Results are bitwise identical (same
  // kernels on the same inputs). Changing it reallocates the activations for the current shape;
  // logits() is invalid until the next evaluate().
  void set_activation_checkpointing(bool on);
  bool activation_checkpointing() const { return checkpointing_; }
  // Exactly the activation bytes allocate_activations takes for (B, T) in the given mode: the sum
  // of DeviceAllocator::round_size over its buffers, which is what the MemoryTracker records
  // (Category::activation) when the allocator serves them fresh rather than from its cache.
  static size_t activation_bytes_for(const GPTConfig& config, size_t B, size_t T,
                                     bool checkpointing);

 private:
  // Per-layer buffers below have Ls = L layers, or Ls = 1 (scratch reused by every block) when
  // checkpointing. residual3 always has L layers: block l's output is block l + 1's input, so
  // with checkpointing it is the checkpoint store (block 0's checkpoint is `encoded`).
  struct Activations {       // sized for (B, T); see activation_specs
    DeviceBuffer tokens;     // (B, T) int32
    DeviceBuffer targets;    // (B, T) int32
    DeviceBuffer encoded;    // (B, T, C)
    DeviceBuffer ln1;        // (Ls, B, T, C)
    DeviceBuffer ln1_mean;   // (Ls, B, T)
    DeviceBuffer ln1_rstd;   // (Ls, B, T)
    DeviceBuffer qkv;        // (Ls, B, T, 3C)
    DeviceBuffer atty;       // (Ls, B, T, C)
    DeviceBuffer att;        // (Ls, B, NH, T, T)
    DeviceBuffer residual2;  // (Ls, B, T, C)
    DeviceBuffer ln2;        // (Ls, B, T, C)
    DeviceBuffer ln2_mean;   // (Ls, B, T)
    DeviceBuffer ln2_rstd;   // (Ls, B, T)
    DeviceBuffer fch;        // (Ls, B, T, 4C)
    DeviceBuffer fch_gelu;   // (Ls, B, T, 4C)
    DeviceBuffer residual3;  // (L, B, T, C) block outputs; the checkpoints when checkpointing
    DeviceBuffer proj;       // (B, T, C) scratch for attproj / fcproj outputs
    DeviceBuffer lnf;        // (B, T, C)
    DeviceBuffer lnf_mean;   // (B, T)
    DeviceBuffer lnf_rstd;   // (B, T)
    DeviceBuffer logits;     // (B, T, Vp); holds dlogits after forward_backward
    DeviceBuffer losses;     // (B, T)
    // gradients of activations, reused across layers
    DeviceBuffer dresidual;  // (B, T, C) gradient flowing along the residual stream
    DeviceBuffer dln;        // (B, T, C) gradient of a layernorm output
    DeviceBuffer dqkv;       // (B, T, 3C)
    DeviceBuffer datty;      // (B, T, C)
    DeviceBuffer datt;       // (B, NH, T, T) scratch
    DeviceBuffer dfch;       // (B, T, 4C)
    DeviceBuffer dfch_gelu;  // (B, T, 4C)
  };

  // One activation buffer: where it goes, its size in bytes (before rounding) and its label.
  // allocate_activations and activation_bytes_for both walk this list, so they cannot disagree.
  struct ActivationSpec {
    DeviceBuffer Activations::*member;
    size_t bytes;
    const char* label;
  };
  static std::vector<ActivationSpec> activation_specs(const GPTConfig& config, size_t B, size_t T,
                                                      bool checkpointing);

  void prepare(const int32_t* tokens, const int32_t* targets, size_t B, size_t T);
  void allocate_activations(size_t B, size_t T);
  void forward(ParamProvider& params, size_t B, size_t T);  // up to lnf
  // Block l's forward from its input residual stream, with p = the block's acquired params, into
  // the block's per-layer slot. Writes block l's output into residual3 only when
  // write_output: the backward's recompute needs the internals, not the output it already has.
  void block_forward(const float* p, size_t l, size_t B, size_t T, bool write_output);
  size_t slot(size_t l) const { return checkpointing_ ? 0 : l; }  // per-layer buffer index
  void backward(ParamProvider& params, size_t B, size_t T);
  float mean_loss(size_t n);

  GPTConfig config_;
  ParamLayout layout_;
  DeviceAllocator& allocator_;
  Device& device_;
  kernels::Kernels& k_;
  DeviceBuffer workspace_;  // kernels' scratch (cuBLASLt)
  Activations acts_;
  size_t act_B_ = 0, act_T_ = 0;  // shape the activations are allocated for (0: none yet)
  size_t activation_bytes_ = 0;
  bool checkpointing_ = false;
  std::vector<float> host_losses_;  // (B, T)
};

}  // namespace tierzero::nn
