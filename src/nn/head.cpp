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
  if (ctx.compute16()) return forward16(ctx, out);
  ctx.mb.save_input(index(), in);
  if (ctx.mb.dims().chunked_logits()) return;
  const float* full = ctx.gather_stream(in, ctx.scratch.gathered_in().f32());  // (B*T, C)
  ctx.k.matmul_forward(out, full, wte_.in(ctx.params), nullptr, ctx.mb.dims().tokens, channels_,
                       vocab_padded_);
}

void Head::backward(ModuleContext& ctx, const float* dout, float* din) {
  const ActivationDims& d = ctx.mb.dims();
  TZ_CHECK(!d.chunked_logits(), "the head's backward over chunked logits",
           "internal error: with chunked logits the backward runs through Head::classify");
  if (ctx.compute16()) return backward16(ctx, din);
  const float* in = ctx.gather_stream(ctx.mb.saved_input(index()), ctx.scratch.gathered_in().f32());
  // Under tensor parallelism a partial sum over this rank's columns, summed over the group apart
  // from din, so that din keeps accumulating (+=) like every backward's.
  float* dx = input_grad(ctx, din);  // (B*T, C)
  ctx.k.matmul_backward(dx, wte_.in(ctx.grads), nullptr, dout, in, wte_.in(ctx.params), d.tokens,
                        channels_, vocab_padded_, input_grad_write(ctx));
  sum_input_grad(ctx, dx, din);
}

void Head::classify(ModuleContext& ctx, const float* dloss, float* din) {
  if (ctx.compute16()) return classify16(ctx, dloss, din);
  const ActivationDims& d = ctx.mb.dims();
  const float* in = ctx.gather_stream(ctx.mb.saved_input(index()), ctx.scratch.gathered_in().f32());
  const float* w = wte_.in(ctx.params);                // (Vl, C)
  float* logits = ctx.mb.logits();                     // (R, Vl), one chunk of rows
  float* dx = dloss ? input_grad(ctx, din) : nullptr;  // (B*T, C)
  const kernels::GradWrite dx_write = input_grad_write(ctx);
  for (size_t row = 0; row < d.tokens; row += d.logits_rows) {
    const size_t n = std::min(d.logits_rows, d.tokens - row);
    const float* x = in + row * channels_;  // (n, C)
    ctx.k.matmul_forward(logits, x, w, nullptr, n, channels_, vocab_padded_);
    cross_entropy_rows(ctx, logits, row, n, vocab_, dloss);
    if (dloss)
      ctx.k.matmul_backward(dx + row * channels_, wte_.in(ctx.grads), nullptr, logits, x, w, n,
                            channels_, vocab_padded_, dx_write);
  }
  if (dloss) sum_input_grad(ctx, dx, din);
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

// 16-bit compute: the input is the final norm's 16-bit output (ctx.mb.lnf(), all-gathered in
// 16 bits under sequence parallelism), the logits and the loss fp32, the logits' gradient
// ctx.mb.dlogits16(); under tensor parallelism this rank's vocabulary columns.
ComputeTensor Head::input16(const ModuleContext& ctx) const {
  return ctx.gather_stream(ctx.mb.lnf(), ctx.scratch.gathered_in());  // (B*T, C) compute
}

void Head::forward16(ModuleContext& ctx, float* out) {
  if (ctx.mb.dims().chunked_logits()) return;
  const DType t = ctx.compute();
  ctx.k.matmul16_forward(out, DType::f32, input16(ctx).raw(), wte_.in16(ctx.params16, t), nullptr,
                         t, ctx.mb.dims().tokens, channels_, vocab_padded_);
}

void Head::backward16(ModuleContext& ctx, float* din) {
  const ActivationDims& d = ctx.mb.dims();
  const DType t = ctx.compute();
  const ComputeTensor in = input16(ctx);
  float* dx = input_grad(ctx, din);  // (B*T, C)
  ctx.k.matmul16_backward(dx, DType::f32, wte_.in(ctx.grads), nullptr, ctx.mb.dlogits16().raw(),
                          in.raw(), wte_.in16(ctx.params16, t), t, d.tokens, channels_,
                          vocab_padded_, input_grad_write(ctx));
  sum_input_grad(ctx, dx, din);
}

void Head::classify16(ModuleContext& ctx, const float* dloss, float* din) {
  const ActivationDims& d = ctx.mb.dims();
  const DType t = ctx.compute();
  const void* w = wte_.in16(ctx.params16, t);          // (Vl, C)
  const ComputeTensor in = input16(ctx);               // (B*T, C)
  float* logits = ctx.mb.logits();                     // (R, Vl) fp32, one chunk of rows
  float* dx = dloss ? input_grad(ctx, din) : nullptr;  // (B*T, C)
  const kernels::GradWrite dx_write = input_grad_write(ctx);
  for (size_t row = 0; row < d.tokens; row += d.logits_rows) {
    const size_t n = std::min(d.logits_rows, d.tokens - row);
    const ComputeTensor x = in.at(row * channels_);  // (n, C)
    ctx.k.matmul16_forward(logits, DType::f32, x.raw(), w, nullptr, t, n, channels_, vocab_padded_);
    cross_entropy_rows(ctx, logits, row, n, vocab_, dloss);  // into dlogits16's first n rows
    if (dloss)
      ctx.k.matmul16_backward(dx + row * channels_, DType::f32, wte_.in(ctx.grads), nullptr,
                              ctx.mb.dlogits16().raw(), x.raw(), w, t, n, channels_, vocab_padded_,
                              dx_write);
  }
  if (dloss) sum_input_grad(ctx, dx, din);
}

}  // namespace tierzero::nn
