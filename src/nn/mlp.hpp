// MLP: fc (column-parallel, C -> 4C), GELU, projection (row-parallel, 4C -> C), Megatron's split.
// The Llama family's SwiGLU MLP is the same with fc the fused gate and up projections (C -> 2H,
// each cut separately, so a rank holds its gate and up features), silu(gate) * up for the GELU,
// and no biases.
#pragma once

#include <cstddef>
#include <vector>

#include "linear.hpp"
#include "tierzero/nn/gpt_config.hpp"
#include "tierzero/nn/saved_activations.hpp"

namespace tierzero::nn {

class MLP {
 public:
  MLP(const GPTConfig& config, int layer);

  std::vector<TensorMeta> parameters() const;  // fcw, fcb, fcprojw, fcprojb (biases if any)
  void bind(const ParamLayout& layout);

  // out (B, T, C) = fcproj(gelu(fc(in))) (or fcproj(swiglu(fc(in)))). out may be null: a checkpoint
  // recompute needs only acts rebuilt, not the output the forward already delivered. in, acts
  // and dout are of ctx.compute() (16-bit compute or fp32); out and din fp32.
  void forward(const ModuleContext& ctx, const ComputeTensor& in, float* out,
               const MlpActs& acts) const;
  // din (B, T, C) = d(in) for dout (B, T, C), overwritten (Linear::backward); `in` and `acts` are
  // the forward's.
  void backward(const ModuleContext& ctx, const ComputeTensor& in, const MlpActs& acts,
                const ComputeTensor& dout, float* din) const;

 private:
  bool swiglu_;
  size_t hidden_;  // 4C (or H), local after bind
  Linear fc_, proj_;
};

}  // namespace tierzero::nn
