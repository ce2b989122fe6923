// GPT: a GPT-2 model with explicit forward and backward passes (no autograd), in the manner of
// llm.c. It owns its activations; parameters and gradients come from a ParamProvider one unit at a
// time, so the same code runs resident (reference) or under the ZeRO partition store.
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
  size_t activation_bytes() const { return activation_bytes_; }

 private:
  struct Activations {       // sized for (B, T); see allocate_activations
    DeviceBuffer tokens;     // (B, T) int32
    DeviceBuffer targets;    // (B, T) int32
    DeviceBuffer encoded;    // (B, T, C)
    DeviceBuffer ln1;        // (L, B, T, C)
    DeviceBuffer ln1_mean;   // (L, B, T)
    DeviceBuffer ln1_rstd;   // (L, B, T)
    DeviceBuffer qkv;        // (L, B, T, 3C)
    DeviceBuffer atty;       // (L, B, T, C)
    DeviceBuffer att;        // (L, B, NH, T, T)
    DeviceBuffer residual2;  // (L, B, T, C)
    DeviceBuffer ln2;        // (L, B, T, C)
    DeviceBuffer ln2_mean;   // (L, B, T)
    DeviceBuffer ln2_rstd;   // (L, B, T)
    DeviceBuffer fch;        // (L, B, T, 4C)
    DeviceBuffer fch_gelu;   // (L, B, T, 4C)
    DeviceBuffer residual3;  // (L, B, T, C)
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

  void prepare(const int32_t* tokens, const int32_t* targets, size_t B, size_t T);
  void allocate_activations(size_t B, size_t T);
  void forward(ParamProvider& params, size_t B, size_t T);  // up to lnf
  void backward(ParamProvider& params, size_t B, size_t T);
  float mean_loss(size_t n);

  GPTConfig config_;
  ParamLayout layout_;
  DeviceAllocator& allocator_;
  Device& device_;
  kernels::Kernels& k_;
  DeviceBuffer workspace_;  // kernels' scratch (cuBLASLt)
  Activations acts_;
  size_t act_B_ = 0, act_T_ = 0;
  size_t activation_bytes_ = 0;
  std::vector<float> host_losses_;  // (B, T)
};

}  // namespace tierzero::nn
