// Head: logits from the tied wte, found in the embeddings' unit (this rank's vocabulary under
// tensor parallelism).
#include "head.hpp"

#include <algorithm>

#include "cross_entropy.hpp"
#include "tierzero/core/error.hpp"

#include "tierzero/nn/micro_batch.hpp"
#include "tierzero/nn/model_scratch.hpp"

namespace tierzero::nn {

Head::Head(const GPTConfig& config, size_t index)
    : Module("head", "embeddings", index),
      vocab_(config.vocab_size),
      vocab_padded_(config.padded_vocab_size),
      channels_(config.channels),
      wte_(config.arch.tie_embeddings ? ParamKind::wte : ParamKind::lmheadw, -1) {}

void Head::bind(const ParamLayout& layout) {
  Module::bind(layout);
  wte_.bind(layout);
  vocab_padded_ = static_cast<size_t>(wte_.shape()[0]);  // this rank's vocabulary range
}

void Head::forward(ModuleContext& ctx, const float* in, float* out) {
  if (!ctx.compute16()) ctx.mb.save_input(index(), in);  // 16-bit: the final norm keeps lnf
  if (ctx.mb.dims().chunked_logits()) return;
  logits(ctx, out, input(ctx), ctx.mb.dims().tokens);
}

void Head::backward(ModuleContext& ctx, const float* dout, float* din) {
  const ActivationDims& d = ctx.mb.dims();
  TZ_CHECK(!d.chunked_logits(), "the head's backward over chunked logits",
           "internal error: with chunked logits the backward runs through Head::classify");
  // Under tensor parallelism a partial sum over this rank's columns, summed over the group apart
  // from din, so that din keeps accumulating (+=) like every backward's.
  float* dx = input_grad(ctx, din);  // (B*T, C)
  logits_backward(ctx, dx, ctx.compute16() ? ctx.mb.dlogits16().raw() : dout, input(ctx), d.tokens);
  sum_input_grad(ctx, dx, din);
}

void Head::classify(ModuleContext& ctx, const float* dloss, float* din) {
  const ActivationDims& d = ctx.mb.dims();
  const ComputeTensor in = input(ctx);                 // (B*T, C) compute
  float* logits_chunk = ctx.mb.logits();               // (R, Vl) fp32, one chunk of rows
  float* dx = dloss ? input_grad(ctx, din) : nullptr;  // (B*T, C)
  for (size_t row = 0; row < d.tokens; row += d.logits_rows) {
    const size_t n = std::min(d.logits_rows, d.tokens - row);
    const ComputeTensor x = in.at(row * channels_);  // (n, C)
    logits(ctx, logits_chunk, x, n);
    // The logits' gradient: in place in fp32, into dlogits16's first n rows in 16-bit compute.
    cross_entropy_rows(ctx, logits_chunk, row, n, vocab_, dloss);
    if (dloss)
      logits_backward(ctx, dx + row * channels_,
                      ctx.compute16() ? ctx.mb.dlogits16().raw() : logits_chunk, x, n);
  }
  if (dloss) sum_input_grad(ctx, dx, din);
}

// The 16-bit input is the final norm's 16-bit output (ctx.mb.lnf()); the fp32 one, the input the
// forward saved.
ComputeTensor Head::input(const ModuleContext& ctx) const {
  const ComputeTensor local =
      ctx.compute16() ? ctx.mb.lnf()
                      : ComputeTensor{const_cast<float*>(ctx.mb.saved_input(index())), DType::f32};
  return ctx.gather_stream(local, ctx.scratch.gathered_in());  // (B*T, C) compute
}

void Head::logits(const ModuleContext& ctx, float* out, const ComputeTensor& x, size_t n) const {
  if (ctx.compute16()) {
    const DType t = ctx.compute();
    ctx.k.matmul16_forward(out, DType::f32, x.raw(), wte_.in16(ctx.params16, t), nullptr, t, n,
                           channels_, vocab_padded_);
    return;
  }
  ctx.k.matmul_forward(out, x.f32(), wte_.in(ctx.params), nullptr, n, channels_, vocab_padded_);
}

void Head::logits_backward(const ModuleContext& ctx, float* dx, const void* dlogits,
                           const ComputeTensor& x, size_t n) const {
  if (ctx.compute16()) {
    const DType t = ctx.compute();
    ctx.k.matmul16_backward(dx, DType::f32, wte_.in(ctx.grads), nullptr, dlogits, x.raw(),
                            wte_.in16(ctx.params16, t), t, n, channels_, vocab_padded_,
                            input_grad_write(ctx));
    return;
  }
  ctx.k.matmul_backward(dx, wte_.in(ctx.grads), nullptr, static_cast<const float*>(dlogits),
                        x.f32(), wte_.in(ctx.params), n, channels_, vocab_padded_,
                        input_grad_write(ctx));
}

float* Head::input_grad(const ModuleContext& ctx, float* din) const {
  return ctx.tp != nullptr ? ctx.scratch.proj() : din;
}

kernels::GradWrite Head::input_grad_write(const ModuleContext& ctx) const {
  // The chunks' rows are disjoint: each writes its rows of the partial sum whole.
  return ctx.tp != nullptr ? kernels::GradWrite::overwrite : kernels::GradWrite::accumulate;
}

void Head::sum_input_grad(const ModuleContext& ctx, float* dx, float* din) const {
  if (ctx.tp == nullptr) return;  // dx was din
  const ActivationDims& d = ctx.mb.dims();
  ctx.k.residual_forward(din, din, ctx.reduce_stream(dx), d.stream_tokens * channels_);
}

}  // namespace tierzero::nn
