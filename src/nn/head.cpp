// Head: logits from the tied wte, found in the embeddings' unit (this rank's vocabulary under
// tensor parallelism).
#include "tierzero/nn/head.hpp"

#include "tierzero/nn/micro_batch.hpp"
#include "tierzero/nn/model_scratch.hpp"

namespace tierzero::nn {

Head::Head(const GPTConfig& config, size_t index)
    : Module("head", "embeddings", index),
      vocab_padded_(config.padded_vocab_size),
      channels_(config.channels),
      wte_(config.arch.tie_embeddings ? ParamKind::wte : ParamKind::lmheadw, -1) {}

void Head::bind(const ParamLayout& layout) {
  Module::bind(layout);
  wte_.bind(layout);
  vocab_padded_ = static_cast<size_t>(wte_.shape()[0]);  // this rank's vocabulary range
}

void Head::forward(ModuleContext& ctx, const float* in, float* out) {
  ctx.mb.save_input(index(), in);
  const float* full = ctx.gather_stream(in, ctx.scratch.gathered_in());  // (B*T, C)
  ctx.k.matmul_forward(out, full, wte_.in(ctx.params), nullptr, ctx.mb.dims().tokens, channels_,
                       vocab_padded_);
}

void Head::backward(ModuleContext& ctx, const float* dout, float* din) {
  const ActivationDims& d = ctx.mb.dims();
  const float* in = ctx.gather_stream(ctx.mb.saved_input(index()), ctx.scratch.gathered_in());
  if (ctx.tp == nullptr) {
    ctx.k.matmul_backward(din, wte_.in(ctx.grads), nullptr, dout, in, wte_.in(ctx.params), d.tokens,
                          channels_, vocab_padded_);
    return;
  }
  // The input gradient from this rank's columns is a partial sum: summed over the group apart
  // from din, so that din keeps accumulating (+=) like every backward's.
  float* partial = ctx.scratch.proj();  // (B*T, C)
  ctx.zero(partial, d.tokens * channels_);
  ctx.k.matmul_backward(partial, wte_.in(ctx.grads), nullptr, dout, in, wte_.in(ctx.params),
                        d.tokens, channels_, vocab_padded_);
  ctx.k.residual_forward(din, din, ctx.reduce_stream(partial), d.stream_tokens * channels_);
}

}  // namespace tierzero::nn
