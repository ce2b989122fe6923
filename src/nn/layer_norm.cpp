// LayerNorm and RMSNorm: replicated gain (and bias), and the norm kernels over the residual
// stream's rows (this rank's under sequence parallelism, whose gain and bias gradients are then
// all-reduced).
#include "layer_norm.hpp"

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

void LayerNorm::forward(const ModuleContext& ctx, const float* in, float* out,
                        const LayerNormStats& stats) const {
  const size_t N = ctx.mb.dims().stream_tokens;
  if (kind_ == NormKind::rmsnorm) {
    ctx.k.rmsnorm_forward(out, stats.rstd, in, weight_.in(ctx.params), N, channels_, eps_);
    return;
  }
  ctx.k.layernorm_forward(out, stats.mean, stats.rstd, in, weight_.in(ctx.params),
                          bias_.in(ctx.params), N, channels_);
}

void LayerNorm::residual_forward(const ModuleContext& ctx, const float* a, const float* b,
                                 float* residual, float* out, const LayerNormStats& stats) const {
  const size_t N = ctx.mb.dims().stream_tokens;
  if (kind_ == NormKind::rmsnorm) {
    ctx.k.fused_residual_rmsnorm_forward(residual, out, stats.rstd, a, b, weight_.in(ctx.params), N,
                                         channels_, eps_);
    return;
  }
  ctx.k.fused_residual_layernorm_forward(residual, out, stats.mean, stats.rstd, a, b,
                                         weight_.in(ctx.params), bias_.in(ctx.params), N,
                                         channels_);
}

void LayerNorm::forward_input(const ModuleContext& ctx, const float* in, float* out,
                              const LayerNormStats& stats) const {
  const ResidualSum* sum = ctx.in_sum;
  if (sum == nullptr) return forward(ctx, in, out, stats);
  TZ_CHECK(sum->into == in,
           "a block's pending residual sum belongs elsewhere than its reader's input",
           "internal error: a ResidualSum is written into the next module's input");
  residual_forward(ctx, sum->a, sum->b, sum->into, out, stats);
}

void LayerNorm::backward(const ModuleContext& ctx, const float* in, const LayerNormStats& stats,
                         const float* dout, float* din) const {
  const size_t N = ctx.mb.dims().stream_tokens;
  const bool rms = kind_ == NormKind::rmsnorm;
  if (!ctx.sequence_parallel()) {
    if (rms)
      ctx.k.rmsnorm_backward(din, weight_.in(ctx.grads), dout, in, weight_.in(ctx.params),
                             stats.rstd, N, channels_);
    else
      ctx.k.layernorm_backward(din, weight_.in(ctx.grads), bias_.in(ctx.grads), dout, in,
                               weight_.in(ctx.params), stats.mean, stats.rstd, N, channels_);
    return;
  }
  // Each rank normalised only its rows: the gain's and bias's gradients are partial sums, and
  // must be summed over the group for this micro-batch alone (the unit's gradients accumulate
  // over micro-batches), so they are made apart, all-reduced, then added.
  const size_t C = channels_;
  const size_t parts = rms ? 1 : 2;
  float* g = ctx.scratch.norm_grads();  // (parts, C) gain, bias
  ctx.zero(g, parts * C);
  if (rms)
    ctx.k.rmsnorm_backward(din, g, dout, in, weight_.in(ctx.params), stats.rstd, N, C);
  else
    ctx.k.layernorm_backward(din, g, g + C, dout, in, weight_.in(ctx.params), stats.mean,
                             stats.rstd, N, C);
  ctx.tp->all_reduce(ctx.stream, g, parts * C);
  float* dw = weight_.in(ctx.grads);
  ctx.k.residual_forward(dw, dw, g, C);
  if (rms) return;
  float* db = bias_.in(ctx.grads);
  ctx.k.residual_forward(db, db, g + C, C);
}

}  // namespace tierzero::nn
