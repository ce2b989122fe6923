// Attention: causal multi-head self-attention as Megatron splits it — the fused QKV projection
// column-parallel (each of q, k, v cut into whole heads), the attention kernel on the local
// heads, and the output projection row-parallel. Under Ulysses (ctx.ulysses) the projections run
// on this rank's slice of the sequence with all heads, and the attention kernel on the whole
// sequence with this rank's heads, an all-to-all on either side (UlyssesGroup).
#pragma once

#include <cstddef>
#include <vector>

#include "linear.hpp"
#include "tierzero/nn/gpt_config.hpp"
#include "tierzero/nn/saved_activations.hpp"

namespace tierzero::nn {

class Attention {
 public:
  Attention(const GPTConfig& config, int layer);

  std::vector<TensorMeta> parameters() const;  // qkvw, qkvb, attprojw, attprojb
  void bind(const ParamLayout& layout);

  // out (B, T, C) = attproj(attention(qkv(in))); in (B, T, C) is the layernormed stream.
  void forward(const ModuleContext& ctx, const float* in, float* out,
               const AttentionActs& acts) const;
  // din (B, T, C) += d(in) for dout (B, T, C); `in` and `acts` are the forward's.
  void backward(const ModuleContext& ctx, const float* in, const AttentionActs& acts,
                const float* dout, float* din) const;
  // The attention's core again (selective recompute): acts.atty and acts.lse from acts.qkv, as
  // the forward computed them (bitwise). No parameters; under Ulysses one all-to-all.
  void recompute_core(const ModuleContext& ctx, const AttentionActs& acts) const;

 private:
  void forward_ulysses(const ModuleContext& ctx, const float* in, float* out,
                       const AttentionActs& acts) const;
  void backward_ulysses(const ModuleContext& ctx, const float* in, const AttentionActs& acts,
                        const float* dout, float* din) const;

  size_t head_size_;
  // The kernel's extents for this rank's heads over B sequences of T positions.
  kernels::AttentionShape shape(size_t B, size_t T, size_t ulysses) const;

  size_t channels_, heads_;  // local: set by bind
  Linear qkv_, proj_;
};

}  // namespace tierzero::nn
