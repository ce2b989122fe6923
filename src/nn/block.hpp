// Block: one pre-norm transformer block, in = x, out = y with
//   x2 = x + attention(ln1(x)),  y = x2 + mlp(ln2(x2)).
// Its backward keeps the residual stream's gradient running in place: a residual add passes its
// gradient through unchanged, so both branches take the stream's gradient as their dout and each
// layernorm's backward adds its branch's contribution into it.
// Under tensor parallelism (Megatron) each branch is a tensor-parallel region: its input is
// gathered (sequence parallel) or used whole, its output summed over the group (all-reduce, or
// reduce-scatter with sequence parallelism); its backward does the conjugates. Under sequence
// parallelism the layernorm outputs are re-gathered in the backward rather than kept whole.
#pragma once

#include <cstddef>
#include <vector>

#include "attention.hpp"
#include "layer_norm.hpp"
#include "mlp.hpp"
#include "tierzero/nn/block_activations.hpp"
#include "tierzero/nn/gpt_config.hpp"
#include "tierzero/nn/module.hpp"

namespace tierzero::nn {

class Block final : public Module {
 public:
  Block(const GPTConfig& config, int layer, size_t index);
  int layer() const { return layer_; }
  int block() const override { return layer_; }

  std::vector<TensorMeta> parameters() const override;  // ln1, attention, ln2, mlp
  void bind(const ParamLayout& layout) override;
  void forward(ModuleContext& ctx, const float* in, float* out) override;
  void recompute(ModuleContext& ctx) override;
  void backward(ModuleContext& ctx, const float* dout, float* din) override;
  bool takes_residual_sum() const override { return true; }  // into ln1

 private:
  // Where this block's internals live for ctx.mb: its slot in the micro-batch, or with full
  // recompute the scratch's single slot; with selective recompute the attention's core is the
  // scratch's.
  BlockActs acts(const ModuleContext& ctx) const;
  // The forward into acts; the output (and the MLP projection it needs) only when out is set,
  // and then left to the next module as a ResidualSum when ctx.out_sum asks for one.
  void run(const ModuleContext& ctx, const float* in, float* out, const BlockActs& a) const;

  int layer_;
  size_t channels_;
  LayerNorm ln1_;
  Attention attn_;
  LayerNorm ln2_;
  MLP mlp_;
};

}  // namespace tierzero::nn
