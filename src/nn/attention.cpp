// Attention: QKV projection, the causal attention kernel, output projection; backward in reverse
// with the model's scratch for the gradients that live only inside it.
#include "attention.hpp"

#include "tierzero/nn/micro_batch.hpp"
#include "tierzero/nn/model_scratch.hpp"

namespace tierzero::nn {

namespace {
size_t head_size(const GPTConfig& c) {
  return c.channels / c.num_heads;
}
}  // namespace

Attention::Attention(const GPTConfig& config, int layer)
    : head_size_(head_size(config)),
      channels_(config.channels),
      heads_(config.num_heads),
      // q, k and v are each cut into whole heads; the projection's inputs are the heads' outputs.
      qkv_(ParamKind::qkvw, ParamKind::qkvb, layer, config.channels, 3 * config.channels,
           LinearSplit::column, 3, head_size(config)),
      proj_(ParamKind::attprojw, ParamKind::attprojb, layer, config.channels, config.channels,
            LinearSplit::row, 1, head_size(config)) {}

std::vector<TensorMeta> Attention::parameters() const {
  std::vector<TensorMeta> p = qkv_.parameters();
  for (TensorMeta& m : proj_.parameters()) p.push_back(m);
  return p;
}

void Attention::bind(const ParamLayout& layout) {
  qkv_.bind(layout);
  proj_.bind(layout);
  channels_ = qkv_.out_features() / 3;
  heads_ = channels_ / head_size_;
}

kernels::AttentionShape Attention::shape(size_t B, size_t T, size_t ulysses) const {
  const size_t heads = heads_ / ulysses;  // GPT-2: as many kv heads as query heads
  return {B, T, heads, heads, head_size_};
}

void Attention::forward(const ModuleContext& ctx, const float* in, float* out,
                        const AttentionActs& a) const {
  if (ctx.ulysses) return forward_ulysses(ctx, in, out, a);
  qkv_.forward(ctx, in, a.qkv);
  recompute_core(ctx, a);
  proj_.forward(ctx, a.atty, out);
}

void Attention::recompute_core(const ModuleContext& ctx, const AttentionActs& a) const {
  if (!ctx.ulysses) {
    ctx.k.attention_forward(a.atty, a.lse, a.qkv, shape(ctx.mb.B(), ctx.mb.T(), 1));
    return;
  }
  const ActivationDims& d = ctx.mb.dims();
  const UlyssesBuffers buf = ctx.scratch.ulysses();
  UlyssesGroup& u = *ctx.ulysses;
  float* heads_out = buf.recv;  // (B, Ts, Cl)
  ctx.k.attention_forward(heads_out, a.lse, a.qkv, shape(d.B, d.seq_len, u.size()));
  u.to_sequence(ctx.stream, heads_out, a.atty, buf, d.B, d.T, 1, channels_);  // (B, T, C)
}

void Attention::backward(const ModuleContext& ctx, const float* in, const AttentionActs& a,
                         const float* dout, float* din) const {
  if (ctx.ulysses) return backward_ulysses(ctx, in, a, dout, din);
  const size_t B = ctx.mb.B(), T = ctx.mb.T();
  ctx.zero(ctx.scratch.datty(), B * T * channels_);
  proj_.backward(ctx, a.atty, dout, ctx.scratch.datty());
  ctx.zero(ctx.scratch.dqkv(), B * T * 3 * channels_);
  ctx.k.attention_backward(ctx.scratch.dqkv(), ctx.scratch.attention(), ctx.scratch.datty(), a.atty,
                           a.qkv, a.lse, shape(B, T, 1));
  qkv_.backward(ctx, in, ctx.scratch.dqkv(), din);
}

// The projections see (B, T, .) rows of this rank's slice with all heads; the kernel sees the
// whole sequence Ts with this rank's NH / ulysses heads.
void Attention::forward_ulysses(const ModuleContext& ctx, const float* in, float* out,
                                const AttentionActs& a) const {
  const ActivationDims& d = ctx.mb.dims();
  const UlyssesBuffers buf = ctx.scratch.ulysses();
  UlyssesGroup& u = *ctx.ulysses;
  float* local_qkv = buf.recv;  // (B, T, 3C), consumed by the re-shard before it reuses recv
  qkv_.forward(ctx, in, local_qkv);
  u.to_heads(ctx.stream, local_qkv, a.qkv, buf, d.B, d.T, 3, channels_);  // (B, Ts, 3Cl)
  recompute_core(ctx, a);
  proj_.forward(ctx, a.atty, out);
}

void Attention::backward_ulysses(const ModuleContext& ctx, const float* in, const AttentionActs& a,
                                 const float* dout, float* din) const {
  const ActivationDims& d = ctx.mb.dims();
  const UlyssesBuffers buf = ctx.scratch.ulysses();
  UlyssesGroup& u = *ctx.ulysses;
  float* datty = ctx.scratch.datty();  // (B, T, C), then in place (B, Ts, Cl)
  ctx.zero(datty, d.tokens * channels_);
  proj_.backward(ctx, a.atty, dout, datty);
  u.to_heads(ctx.stream, datty, datty, buf, d.B, d.T, 1, channels_);
  // The kernel's output in the heads' layout, which the backward reads: re-sharded again from
  // atty into the projection's output buffer, free here.
  float* heads_out = ctx.scratch.proj();  // (B, Ts, Cl)
  u.to_heads(ctx.stream, a.atty, heads_out, buf, d.B, d.T, 1, channels_);
  float* dqkv = ctx.scratch.dqkv();  // (B, Ts, 3Cl), then in place (B, T, 3C)
  ctx.zero(dqkv, d.tokens * 3 * channels_);
  ctx.k.attention_backward(dqkv, ctx.scratch.attention(), datty, heads_out, a.qkv, a.lse,
                           shape(d.B, d.seq_len, u.size()));
  u.to_sequence(ctx.stream, dqkv, dqkv, buf, d.B, d.T, 3, channels_);
  qkv_.backward(ctx, in, dqkv, din);
}

}  // namespace tierzero::nn
