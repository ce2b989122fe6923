// Embedding: wte vocab-parallel, wpe replicated; the encoder kernels. A Ulysses rank's tokens are
// positions rank T ... rank T + T - 1 of their sequences: it reads (and accumulates into) those
// rows of wpe.
#include "embedding.hpp"

#include "tierzero/nn/micro_batch.hpp"
#include "tierzero/nn/model_scratch.hpp"

namespace tierzero::nn {

namespace {
size_t first_position(const ModuleContext& ctx) {
  return ctx.ulysses ? ctx.ulysses->rank() * ctx.mb.T() : 0;
}
}  // namespace

Embedding::Embedding(const GPTConfig& config, size_t index)
    : Module("embeddings", "embeddings", index),
      vocab_padded_(config.padded_vocab_size),
      max_seq_len_(config.max_seq_len),
      channels_(config.channels),
      learned_positions_(config.arch.positions == PositionKind::learned),
      untied_head_(!config.arch.tie_embeddings),
      wte_(ParamKind::wte, -1),
      wpe_(ParamKind::wpe, -1) {}

std::vector<TensorMeta> Embedding::parameters() const {
  const auto Vp = static_cast<int64_t>(vocab_padded_), C = static_cast<int64_t>(channels_);
  const auto maxT = static_cast<int64_t>(max_seq_len_);
  TensorMeta wte{ParamKind::wte, -1, {Vp, C}, true};
  wte.partition_dim = 0;  // each tp rank holds a range of the vocabulary
  std::vector<TensorMeta> p{wte};
  if (learned_positions_) p.push_back(TensorMeta{ParamKind::wpe, -1, {maxT, C}, true});
  if (untied_head_) {
    TensorMeta head{ParamKind::lmheadw, -1, {Vp, C}, true};
    head.partition_dim = 0;  // the head's logit columns, as wte's rows
    p.push_back(head);
  }
  return p;
}

void Embedding::bind(const ParamLayout& layout) {
  Module::bind(layout);
  wte_.bind(layout);
  if (learned_positions_) wpe_.bind(layout);
  vocab_local_ = static_cast<size_t>(wte_.shape()[0]);
  vocab_start_ = layout.tp().rank * vocab_local_;
}

void Embedding::forward(ModuleContext& ctx, const float*, float* out) {
  if (ctx.compute16()) return forward16(ctx, out);
  if (ctx.tp == nullptr && learned_positions_) {
    const float* wpe = wpe_.in(ctx.params) + first_position(ctx) * channels_;  // (T, C) rows
    ctx.k.encoder_forward(out, ctx.mb.tokens(), wte_.in(ctx.params), wpe, ctx.mb.B(), ctx.mb.T(),
                          channels_);
    return;
  }
  // Partial sums over all B*T tokens, then summed over the group into this rank's rows (one
  // rank, rotary positions: the lookup alone).
  const ActivationDims& d = ctx.mb.dims();
  float* partial = ctx.sequence_parallel() ? ctx.scratch.proj() : out;  // (B*T, C)
  const bool add_positions = learned_positions_ && ctx.tp->rank() == 0;
  ctx.k.encoder_forward_vocab_range(partial, ctx.mb.tokens(), wte_.in(ctx.params),
                                    add_positions ? wpe_.in(ctx.params) : nullptr, vocab_start_,
                                    vocab_local_, d.B, d.T, channels_);
  sum_over_group(ctx, partial, out);
}

// The lookup from the 16-bit working copy into the fp32 stream: wpe's rows from this rank's first
// position (Ulysses), this rank's vocabulary (tensor parallelism) as partial sums over all B*T
// tokens, summed over the group as in fp32.
void Embedding::forward16(const ModuleContext& ctx, float* out) const {
  const ActivationDims& d = ctx.mb.dims();
  const DType t = ctx.compute();
  float* partial = ctx.sequence_parallel() ? ctx.scratch.proj() : out;  // (B*T, C)
  const bool add_positions = learned_positions_ && (ctx.tp == nullptr || ctx.tp->rank() == 0);
  const void* wpe = nullptr;  // (T, C) compute
  if (add_positions)
    wpe = static_cast<const char*>(wpe_.in16(ctx.params16, t)) +
          first_position(ctx) * channels_ * dtype_size(t);
  ctx.k.encoder16_forward(partial, ctx.mb.tokens(), wte_.in16(ctx.params16, t), wpe, t,
                          vocab_start_, vocab_local_, d.B, d.T, channels_);
  sum_over_group(ctx, partial, out);
}

void Embedding::sum_over_group(const ModuleContext& ctx, float* partial, float* out) const {
  if (ctx.tp == nullptr) return;
  const ActivationDims& d = ctx.mb.dims();
  if (ctx.sequence_parallel())
    ctx.tp->reduce_scatter(ctx.stream, partial, out, d.stream_tokens * channels_);
  else
    ctx.tp->all_reduce(ctx.stream, out, d.tokens * channels_);
}

void Embedding::backward(ModuleContext& ctx, const float* dout, float*) {
  if (ctx.tp == nullptr && learned_positions_) {
    float* dwpe = wpe_.in(ctx.grads) + first_position(ctx) * channels_;  // (T, C) rows
    ctx.k.encoder_backward(wte_.in(ctx.grads), dwpe, dout, ctx.mb.tokens(), ctx.mb.B(), ctx.mb.T(),
                           channels_);
    return;
  }
  // Every rank scatters the whole dout: into its own rows of wte, and all of wpe (a replica,
  // equal on every rank). Under sequence parallelism dout is gathered in fp32 into the
  // projection's scratch (free here; the gathered-gradient scratch has the compute dtype).
  const ActivationDims& d = ctx.mb.dims();
  const float* full = ctx.gather_stream(dout, ctx.scratch.proj());  // (B*T, C)
  ctx.k.encoder_backward_vocab_range(
      wte_.in(ctx.grads), learned_positions_ ? wpe_.in(ctx.grads) : nullptr, full, ctx.mb.tokens(),
      vocab_start_, vocab_local_, d.B, d.T, channels_);
}

}  // namespace tierzero::nn
