// Attention: QKV projection, the causal attention kernel, output projection; backward in reverse
// with the model's scratch for the gradients that live only inside it. GPT-2 runs the multi-head
// kernel on [q | k | v] rows; the Llama family the grouped-query kernel on the grouped layout,
// with rotary embeddings on q and k.
#include "attention.hpp"

#include "tierzero/core/error.hpp"

#include "tierzero/nn/micro_batch.hpp"
#include "tierzero/nn/model_scratch.hpp"

namespace tierzero::nn {

namespace {

kernels::RopeParams rope_params(const GPTConfig& c) {
  kernels::RopeParams p;
  p.theta = static_cast<float>(c.arch.rope_theta);
  const RopeScaling& s = c.arch.rope_scaling;
  p.llama3 = s.llama3;
  p.factor = static_cast<float>(s.factor);
  p.low_freq_factor = static_cast<float>(s.low_freq_factor);
  p.high_freq_factor = static_cast<float>(s.high_freq_factor);
  p.original_max = static_cast<float>(s.original_max_position_embeddings);
  return p;
}

Linear qkv_linear(const GPTConfig& c, int layer) {
  if (c.is_gpt2())  // q, k and v are each cut into whole heads
    return Linear(ParamKind::qkvw, ParamKind::qkvb, layer, c.channels, 3 * c.channels,
                  LinearSplit::column, 3, c.head_dim());
  // Whole kv groups (the group's query heads, k and v) stay on one rank.
  const size_t rep = c.num_heads / c.kv_heads();
  return Linear(ParamKind::qkvw, ParamKind::qkvb, layer, c.channels, c.qkv_channels(),
                LinearSplit::column, 1, (rep + 2) * c.head_dim(), c.arch.qkv_bias);
}

Linear proj_linear(const GPTConfig& c, int layer) {
  // The projection's inputs are the heads' outputs: a rank's are its groups' query heads.
  const size_t rep = c.is_gpt2() ? 1 : c.num_heads / c.kv_heads();
  return Linear(ParamKind::attprojw, ParamKind::attprojb, layer, c.attention_channels(), c.channels,
                LinearSplit::row, 1, rep * c.head_dim(), c.arch.linear_bias);
}

}  // namespace

Attention::Attention(const GPTConfig& config, int layer)
    : grouped_(!config.is_gpt2()),
      rope_(config.arch.positions == PositionKind::rope),
      rope_params_(rope_params(config)),
      head_size_(config.head_dim()),
      group_heads_(config.num_heads / config.kv_heads()),
      channels_(config.attention_channels()),
      heads_(config.num_heads),
      qkv_(qkv_linear(config, layer)),
      proj_(proj_linear(config, layer)) {}

std::vector<TensorMeta> Attention::parameters() const {
  std::vector<TensorMeta> p = qkv_.parameters();
  for (TensorMeta& m : proj_.parameters()) p.push_back(m);
  return p;
}

void Attention::bind(const ParamLayout& layout) {
  qkv_.bind(layout);
  proj_.bind(layout);
  qkv_width_ = qkv_.out_features();
  channels_ = grouped_ ? proj_.in_features() : qkv_.out_features() / 3;
  heads_ = channels_ / head_size_;
}

kernels::AttentionShape Attention::shape(size_t B, size_t T, size_t ulysses) const {
  const size_t heads = heads_ / ulysses;  // GPT-2: as many kv heads as query heads
  return {B, T, heads, heads / group_heads_, head_size_, grouped_};
}

// Either layout (the shape says which), either compute dtype.
void Attention::recompute_core(const ModuleContext& ctx, const AttentionActs& a) const {
  const ActivationDims& d = ctx.mb.dims();
  const DType t = ctx.compute();
  const size_t p = ctx.ulysses ? ctx.ulysses->size() : 1;
  const UlyssesBuffers buf = ctx.ulysses ? ctx.scratch.ulysses() : UlyssesBuffers{};
  // The kernel's output: atty itself, or under Ulysses (B, Ts, Cl) in the packing buffer,
  // re-sharded into atty's (B, T, C).
  const ComputeTensor heads_out = ctx.ulysses ? ComputeTensor{buf.recv, t} : a.atty;
  if (ctx.compute16())
    ctx.k.attention16_forward(heads_out.raw(), a.lse, a.qkv.raw(), t, shape(d.B, d.seq_len, p));
  else
    ctx.k.attention_forward(heads_out.f32(), a.lse, a.qkv.f32(), shape(d.B, d.seq_len, p));
  if (ctx.ulysses)
    ctx.ulysses->to_sequence(ctx.stream, heads_out.raw(), a.atty.raw(), t, buf, d.B, d.T, 1,
                             channels_);
}

Attention::Reshard Attention::qkv_reshard() const {
  // GPT-2's q, k and v each cut into whole heads; the grouped row into whole kv groups.
  return grouped_ ? Reshard{1, qkv_width_} : Reshard{3, channels_};
}

// A group's query heads and its k head turn; its v head does not. Positions start at 0: the
// kernel always sees whole sequences (Ulysses re-shards to them first). In 16-bit compute each
// turned value is rounded once more.
void Attention::rotate(const ModuleContext& ctx, const ComputeTensor& qkv, bool undo) const {
  if (!rope_) return;
  const ActivationDims& d = ctx.mb.dims();
  const size_t p = ctx.ulysses ? ctx.ulysses->size() : 1;
  const size_t groups = heads_ / p / group_heads_, rep = group_heads_;
  const size_t B = d.B, Ts = d.seq_len, hs = head_size_;
  const kernels::RopeParams& rp = rope_params_;
  if (ctx.compute16() && undo)
    ctx.k.rope16_backward(qkv.raw(), ctx.compute(), B, Ts, groups, rep + 2, rep + 1, hs, 0, rp);
  else if (ctx.compute16())
    ctx.k.rope16_forward(qkv.raw(), ctx.compute(), B, Ts, groups, rep + 2, rep + 1, hs, 0, rp);
  else if (undo)
    ctx.k.rope_backward(qkv.f32(), B, Ts, groups, rep + 2, rep + 1, hs, 0, rp);
  else
    ctx.k.rope_forward(qkv.f32(), B, Ts, groups, rep + 2, rep + 1, hs, 0, rp);
}

// Under Ulysses the projection writes this rank's slice with every head into the packing buffer,
// re-sharded into qkv's (B, Ts, qkv_width_ / p): this rank's heads over the whole sequence. The
// grouped layout's q and k heads then turn (rotary positions).
void Attention::forward(const ModuleContext& ctx, const ComputeTensor& in, float* out,
                        const AttentionActs& a) const {
  const ActivationDims& d = ctx.mb.dims();
  const UlyssesBuffers buf = ctx.ulysses ? ctx.scratch.ulysses() : UlyssesBuffers{};
  const ComputeTensor local_qkv = ctx.ulysses ? ComputeTensor{buf.recv, ctx.compute()} : a.qkv;
  qkv_.forward(ctx, in, local_qkv);  // (B, T, qkv_width_)
  const Reshard r = qkv_reshard();
  if (ctx.ulysses)
    ctx.ulysses->to_heads(ctx.stream, local_qkv.raw(), a.qkv.raw(), ctx.compute(), buf, d.B, d.T,
                          r.parts, r.channels);
  rotate(ctx, a.qkv, false);
  recompute_core(ctx, a);
  proj_.forward(ctx, a.atty, ComputeTensor{out, DType::f32});  // into the fp32 stream
}

// Under Ulysses the gradients of the heads' outputs and the outputs themselves are re-sharded to
// this rank's heads, the kernel runs over the whole sequence, and dqkv goes back.
void Attention::backward(const ModuleContext& ctx, const ComputeTensor& in, const AttentionActs& a,
                         const ComputeTensor& dout, float* din) const {
  const ActivationDims& d = ctx.mb.dims();
  const DType t = ctx.compute();
  const size_t p = ctx.ulysses ? ctx.ulysses->size() : 1;
  const UlyssesBuffers buf = ctx.ulysses ? ctx.scratch.ulysses() : UlyssesBuffers{};
  // (B, T, Cl) written whole; Ulysses then (B, Ts, Cl / p)
  const ComputeTensor datty = ctx.scratch.datty();
  // (B, Ts, qkv_width_ / p) written whole; Ulysses then (B, T, qkv_width_)
  const ComputeTensor dqkv = ctx.scratch.dqkv();
  proj_.backward(ctx, a.atty, dout, datty);
  ComputeTensor heads_out = a.atty;  // the kernel's output, which its backward reads
  if (ctx.ulysses) {
    ctx.ulysses->to_heads(ctx.stream, datty.raw(), datty.raw(), t, buf, d.B, d.T, 1, channels_);
    TZ_CHECK(channels_ * dtype_size(t) <= d.channels * sizeof(float),
             "attention channels above what the projection's output scratch holds",
             "the projection's output scratch holds (B, T, C) in fp32");
    heads_out = ComputeTensor{ctx.scratch.proj(), t};  // (B, Ts, Cl), free here
    ctx.ulysses->to_heads(ctx.stream, a.atty.raw(), heads_out.raw(), t, buf, d.B, d.T, 1,
                          channels_);
  }
  const kernels::AttentionShape s = shape(d.B, d.seq_len, p);
  if (ctx.compute16())
    ctx.k.attention16_backward(dqkv.raw(), ctx.scratch.attention(), datty.raw(), heads_out.raw(),
                               a.qkv.raw(), a.lse, t, s);
  else
    ctx.k.attention_backward(dqkv.f32(), ctx.scratch.attention(), datty.f32(), heads_out.f32(),
                             a.qkv.f32(), a.lse, s);
  rotate(ctx, dqkv, true);  // the gradient of the values before the rotation
  const Reshard r = qkv_reshard();
  if (ctx.ulysses)
    ctx.ulysses->to_sequence(ctx.stream, dqkv.raw(), dqkv.raw(), t, buf, d.B, d.T, r.parts,
                             r.channels);
  qkv_.backward(ctx, in, dqkv, ComputeTensor{din, DType::f32});  // a norm's backward reads it
}

}  // namespace tierzero::nn
