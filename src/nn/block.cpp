// Block: ln1 -> attention -> residual add -> ln2 -> MLP -> residual add, and its backward in
// reverse with the residual stream's gradient updated in place (see block.hpp). The first residual
// add and ln2 run as one fused kernel, and the second, left to the next module, with its norm.
#include "block.hpp"

#include <string>

#include "tierzero/core/error.hpp"
#include "tierzero/nn/micro_batch.hpp"
#include "tierzero/nn/model_scratch.hpp"

namespace tierzero::nn {

Block::Block(const GPTConfig& config, int layer, size_t index)
    : Module("block." + std::to_string(layer), "block." + std::to_string(layer), index),
      layer_(layer),
      channels_(config.channels),
      ln1_(ParamKind::ln1w, ParamKind::ln1b, layer, config.channels, config.arch.norm,
           config.arch.norm_eps),
      attn_(config, layer),
      ln2_(ParamKind::ln2w, ParamKind::ln2b, layer, config.channels, config.arch.norm,
           config.arch.norm_eps),
      mlp_(config, layer) {}

std::vector<TensorMeta> Block::parameters() const {
  std::vector<TensorMeta> p;
  for (const auto& part :
       {ln1_.parameters(), attn_.parameters(), ln2_.parameters(), mlp_.parameters()})
    p.insert(p.end(), part.begin(), part.end());
  return p;
}

void Block::bind(const ParamLayout& layout) {
  Module::bind(layout);
  ln1_.bind(layout);
  attn_.bind(layout);
  ln2_.bind(layout);
  mlp_.bind(layout);
}

BlockActs Block::acts(const ModuleContext& ctx) const {
  if (ctx.mb.checkpointing()) return ctx.scratch.block();
  BlockActs a = ctx.mb.block(static_cast<size_t>(layer_));
  if (ctx.mb.recompute().is_selective()) {
    const AttentionActs core = ctx.scratch.attention_core();
    a.attn.atty = core.atty;
    a.attn.lse = core.lse;
  }
  return a;
}

void Block::run(const ModuleContext& ctx, const float* in, float* out, const BlockActs& a) const {
  float* proj = ctx.scratch.proj();
  const ComputeTensor gathered = ctx.scratch.gathered_in();  // (B*T, C) compute
  // (With the previous block's last add pending, in is written here with ln1, in one pass.)
  ln1_.forward_input(ctx, in, a.ln1, a.ln1_stats);
  attn_.forward(ctx, ctx.gather_stream(a.ln1, gathered), proj, a.attn);  // (one collective each)
  // residual2 = in + the attention's output, and ln2 of it, in one pass (layer_norm.hpp).
  ln2_.residual_forward(ctx, in, ctx.reduce_stream(proj), a.residual2, a.ln2, a.ln2_stats);
  mlp_.forward(ctx, ctx.gather_stream(a.ln2, gathered), out ? proj : nullptr, a.mlp);
  if (!out) return;
  const float* mlp_out = ctx.reduce_stream(proj);
  // The next module adds them with its norm (ModuleContext::out_sum); else out = the sum here.
  if (ctx.out_sum)
    *ctx.out_sum = ResidualSum{out, a.residual2, mlp_out};
  else
    ctx.k.residual_forward(out, a.residual2, mlp_out, ctx.mb.dims().stream_tokens * channels_);
}

void Block::forward(ModuleContext& ctx, const float* in, float* out) {
  ctx.mb.save_input(index(), in);
  run(ctx, in, out, acts(ctx));
}

void Block::recompute(ModuleContext& ctx) {
  switch (ctx.mb.recompute().mode()) {
    case Recompute::none:  // the forward kept everything
      return;
    case Recompute::selective:  // all but the attention's core, rebuilt from the kept qkv
      attn_.recompute_core(ctx, acts(ctx).attn);
      return;
    case Recompute::full:
      run(ctx, ctx.mb.saved_input(index()), nullptr, acts(ctx));
      return;
  }
}

// MLP branch: its dout is the stream's gradient; ln2 adds the branch's part into the stream, which
// then is the gradient of residual2, the attention branch's dout. Under tensor parallelism dln
// holds this rank's partial sums until reduce_stream adds them up. (The collectives are issued
// one statement each: every rank must issue them in one order.) In 16-bit compute the branches'
// products read the stream's gradient in 16 bits: the fp32 running gradient, which the norms'
// backwards add into, rounded before each branch by the norm's own pass that made it (ln2's for
// the attention branch; ln1's, or the final norm's, for the next block's MLP branch) or, where
// nothing rounded it (a pipeline stage's last block, whose gradient arrives), by a pass of its
// own; under sequence parallelism it is all-gathered in 16 bits, as the norms' outputs are.
void Block::backward(ModuleContext& ctx, const float* dout, float* din) {
  TZ_CHECK(din == dout, name() + ": backward needs din to alias dout",
           "a block updates the residual stream's running gradient in place");
  const float* in = ctx.mb.saved_input(index());
  const BlockActs a = acts(ctx);
  const bool c16 = ctx.compute16();
  float* dln = ctx.scratch.dln();  // (B*T, C) fp32, each branch's input gradient, written whole
  // (S, C) the stream's gradient as the products read it: din itself, or its 16-bit copy
  const ComputeTensor grad = c16 ? ctx.scratch.stream_grad16() : ComputeTensor{din, DType::f32};
  const ComputeTensor gathered = ctx.scratch.gathered_in();
  const ComputeTensor gathered_grad = ctx.scratch.gathered_grad();
  if (c16 && !ctx.dout16) ctx.round_to_compute(grad, din, ctx.mb.dims().stream_tokens * channels_);
  const ComputeTensor ln2_out = ctx.gather_stream(a.ln2, gathered);
  const ComputeTensor mlp_dout = ctx.gather_stream(grad, gathered_grad);
  mlp_.backward(ctx, ln2_out, a.mlp, mlp_dout, dln);
  ln2_.backward(ctx, a.residual2, a.ln2_stats, ctx.reduce_stream(dln), din,
                c16 ? grad : ComputeTensor{});
  const ComputeTensor ln1_out = ctx.gather_stream(a.ln1, gathered);
  const ComputeTensor attn_dout = ctx.gather_stream(grad, gathered_grad);
  attn_.backward(ctx, ln1_out, a.attn, attn_dout, dln);
  ln1_.backward(ctx, in, a.ln1_stats, ctx.reduce_stream(dln), din,
                ctx.want_din16 ? grad : ComputeTensor{});
  ctx.wrote_din16 = ctx.want_din16;
}

}  // namespace tierzero::nn
