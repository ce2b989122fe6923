// LayerNorm and RMSNorm: replicated gain (and bias), and the norm kernels over the residual
// stream's rows (this rank's under sequence parallelism, whose gain and bias gradients are then
// all-reduced).
#include "layer_norm.hpp"

#include <string>

#include "tierzero/core/error.hpp"
#include "tierzero/nn/micro_batch.hpp"
#include "tierzero/nn/model_scratch.hpp"

namespace tierzero::nn {

LayerNorm::LayerNorm(ParamKind weight, ParamKind bias, int layer, size_t channels, NormKind kind,
                     double eps)
    : weight_kind_(weight),
      bias_kind_(bias),
      layer_(layer),
      channels_(channels),
      kind_(kind),
      eps_(static_cast<float>(eps)),
      weight_(weight, layer),
      bias_(bias, layer) {}

std::vector<TensorMeta> LayerNorm::parameters() const {
  const auto C = static_cast<int64_t>(channels_);
  if (kind_ == NormKind::rmsnorm) return {TensorMeta{weight_kind_, layer_, {C}, false}};
  return {TensorMeta{weight_kind_, layer_, {C}, false}, TensorMeta{bias_kind_, layer_, {C}, false}};
}

void LayerNorm::bind(const ParamLayout& layout) {
  weight_.bind(layout);
  if (kind_ == NormKind::layernorm) bias_.bind(layout);
}

const void* LayerNorm::weight16(const ModuleContext& ctx) const {
  return weight_.in16(ctx.params16, ctx.compute());
}

const void* LayerNorm::bias16(const ModuleContext& ctx) const {
  return bias_.in16(ctx.params16, ctx.compute());
}

void LayerNorm::forward(const ModuleContext& ctx, const float* in, const ComputeTensor& out,
                        const LayerNormStats& stats) const {
  const size_t N = ctx.mb.dims().stream_tokens, C = channels_;
  const bool rms = kind_ == NormKind::rmsnorm;
  const DType t = ctx.compute();
  if (ctx.compute16() && rms)
    ctx.k.rmsnorm16_forward(out.raw(), stats.rstd, in, weight16(ctx), t, N, C, eps_);
  else if (ctx.compute16())
    ctx.k.layernorm16_forward(out.raw(), stats.mean, stats.rstd, in, weight16(ctx), bias16(ctx), t,
                              N, C);
  else if (rms)
    ctx.k.rmsnorm_forward(out.f32(), stats.rstd, in, weight_.in(ctx.params), N, C, eps_);
  else
    ctx.k.layernorm_forward(out.f32(), stats.mean, stats.rstd, in, weight_.in(ctx.params),
                            bias_.in(ctx.params), N, C);
}

void LayerNorm::residual_forward(const ModuleContext& ctx, const float* a, const float* b,
                                 float* residual, const ComputeTensor& out,
                                 const LayerNormStats& stats) const {
  const size_t N = ctx.mb.dims().stream_tokens, C = channels_;
  const bool rms = kind_ == NormKind::rmsnorm;
  const DType t = ctx.compute();
  if (ctx.compute16() && rms)
    ctx.k.fused_residual_rmsnorm16_forward(residual, out.raw(), stats.rstd, a, b, weight16(ctx), t,
                                           N, C, eps_);
  else if (ctx.compute16())
    ctx.k.fused_residual_layernorm16_forward(residual, out.raw(), stats.mean, stats.rstd, a, b,
                                             weight16(ctx), bias16(ctx), t, N, C);
  else if (rms)
    ctx.k.fused_residual_rmsnorm_forward(residual, out.f32(), stats.rstd, a, b,
                                         weight_.in(ctx.params), N, C, eps_);
  else
    ctx.k.fused_residual_layernorm_forward(residual, out.f32(), stats.mean, stats.rstd, a, b,
                                           weight_.in(ctx.params), bias_.in(ctx.params), N, C);
}

void LayerNorm::forward_input(const ModuleContext& ctx, const float* in, const ComputeTensor& out,
                              const LayerNormStats& stats) const {
  const ResidualSum* sum = ctx.in_sum;
  if (sum == nullptr) return forward(ctx, in, out, stats);
  TZ_CHECK(sum->into == in,
           "a block's pending residual sum belongs elsewhere than its reader's input",
           "internal error: a ResidualSum is written into the next module's input");
  residual_forward(ctx, sum->a, sum->b, sum->into, out, stats);
}

void LayerNorm::backward(const ModuleContext& ctx, const float* in, const LayerNormStats& stats,
                         const float* dout, float* din, const ComputeTensor& din16) const {
  TZ_CHECK(!din16 || (ctx.compute16() && din16.type == ctx.compute()),
           "a norm's 16-bit input gradient asked for in " + std::string(dtype_name(din16.type)) +
               " with " + dtype_name(ctx.compute()) + " compute",
           "internal error: only 16-bit compute keeps a 16-bit copy of the stream's gradient");
  if (!ctx.sequence_parallel()) {
    float* db = kind_ == NormKind::layernorm ? bias_.in(ctx.grads) : nullptr;
    return norm_backward(ctx, in, stats, dout, din, din16, weight_.in(ctx.grads), db);
  }
  // Each rank normalised only its rows: the gain's and bias's gradients are partial sums, and
  // must be summed over the group for this micro-batch alone (the unit's gradients accumulate
  // over micro-batches), so they are made apart, all-reduced, then added.
  const size_t C = channels_;
  const bool rms = kind_ == NormKind::rmsnorm;
  const size_t parts = rms ? 1 : 2;
  float* g = ctx.scratch.norm_grads();  // (parts, C) gain, bias
  ctx.zero(g, parts * C);
  norm_backward(ctx, in, stats, dout, din, din16, g, rms ? nullptr : g + C);
  ctx.tp->all_reduce(ctx.stream, g, parts * C);
  float* dw = weight_.in(ctx.grads);
  ctx.k.residual_forward(dw, dw, g, C);
  if (rms) return;
  float* db = bias_.in(ctx.grads);
  ctx.k.residual_forward(db, db, g + C, C);
}

// The norm's kernel in the run's compute: the gain read from the fp32 unit or its 16-bit working
// copy; the gradients fp32 either way.
void LayerNorm::norm_backward(const ModuleContext& ctx, const float* in,
                              const LayerNormStats& stats, const float* dout, float* din,
                              const ComputeTensor& din16, float* dweight, float* dbias) const {
  const size_t N = ctx.mb.dims().stream_tokens, C = channels_;
  const bool rms = kind_ == NormKind::rmsnorm;
  const DType t = ctx.compute();
  if (ctx.compute16() && rms)
    ctx.k.rmsnorm16_backward(din, din16.raw(), dweight, dout, in, weight16(ctx), stats.rstd, t, N,
                             C);
  else if (ctx.compute16())
    ctx.k.layernorm16_backward(din, din16.raw(), dweight, dbias, dout, in, weight16(ctx),
                               stats.mean, stats.rstd, t, N, C);
  else if (rms)
    ctx.k.rmsnorm_backward(din, dweight, dout, in, weight_.in(ctx.params), stats.rstd, N, C);
  else
    ctx.k.layernorm_backward(din, dweight, dbias, dout, in, weight_.in(ctx.params), stats.mean,
                             stats.rstd, N, C);
}

}  // namespace tierzero::nn
