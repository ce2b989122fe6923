// Attention: causal multi-head self-attention as Megatron splits it — the fused QKV projection
// column-parallel (each of q, k, v cut into whole heads), the attention kernel on the local
// heads, and the output projection row-parallel. Under Ulysses (ctx.ulysses) the projections run
// on this rank's slice of the sequence with all heads, and the attention kernel on the whole
// sequence with this rank's heads, an all-to-all on either side (UlyssesGroup).
// The Llama family's attention (any model that is not GPT-2) uses the grouped layout instead of
// GPT-2's [q | k | v]: the fused projection's rows are KVH groups of (the group's query heads,
// its k head, its v head) (kernels.hpp), so whole groups split over tp and Ulysses ranks as
// equal contiguous pieces; q and k are turned by rotary embeddings before the kernel (and their
// gradients turned back after it), and the projections' biases are optional.
#pragma once

#include <cstddef>
#include <vector>

#include "linear.hpp"
#include "tierzero/kernels/kernels.hpp"
#include "tierzero/nn/gpt_config.hpp"
#include "tierzero/nn/saved_activations.hpp"

namespace tierzero::nn {

class Attention {
 public:
  Attention(const GPTConfig& config, int layer);

  // qkvw, qkvb, attprojw, attprojb (the biases the architecture has)
  std::vector<TensorMeta> parameters() const;
  void bind(const ParamLayout& layout);

  // out (B, T, C) = attproj(attention(qkv(in))); in (B, T, C) is the layernormed stream. in,
  // acts and dout are of ctx.compute() (16-bit compute or fp32), out and din fp32 (the residual
  // stream's side). Either layout; this rank's heads; under Ulysses the projections see the
  // slice with every head and the kernel the whole sequence with this rank's heads.
  void forward(const ModuleContext& ctx, const ComputeTensor& in, float* out,
               const AttentionActs& acts) const;
  // din (B, T, C) = d(in) for dout (B, T, C), overwritten (Linear::backward); `in` and `acts` are
  // the forward's.
  void backward(const ModuleContext& ctx, const ComputeTensor& in, const AttentionActs& acts,
                const ComputeTensor& dout, float* din) const;
  // The attention's core again (selective recompute): acts.atty and acts.lse from acts.qkv, as
  // the forward computed them (bitwise). No parameters; under Ulysses one all-to-all.
  void recompute_core(const ModuleContext& ctx, const AttentionActs& acts) const;

 private:
  // The kernel's extents for this rank's heads (1 / ulysses of them) over B sequences of T
  // positions: GPT-2's [q | k | v] rows, or the grouped layout.
  kernels::AttentionShape shape(size_t B, size_t T, size_t ulysses) const;
  // How the Ulysses all-to-alls cut a qkv row: `parts` pieces of `channels` each cut into whole
  // heads (GPT-2: q, k and v of channels_), or one of the whole grouped row (whole kv groups).
  struct Reshard {
    size_t parts, channels;
  };
  Reshard qkv_reshard() const;
  // The rotary embedding on q and k of qkv (B, Ts, this rank's groups (rep + 2) hs), in place;
  // undo: the backward's. Nothing without rotary positions.
  void rotate(const ModuleContext& ctx, const ComputeTensor& qkv, bool undo) const;

  bool grouped_;  // the Llama layout and kernels (not GPT-2)
  bool rope_;
  kernels::RopeParams rope_params_;
  size_t head_size_;
  size_t group_heads_;       // rep: query heads per kv head (1 for GPT-2)
  size_t channels_, heads_;  // local: set by bind (channels_: the heads' outputs, NHl hs)
  size_t qkv_width_ = 0;     // local fused q, k, v row, set by bind
  Linear qkv_, proj_;
};

}  // namespace tierzero::nn
