// LayerNorm: replicated gain and bias, and the layernorm kernels over the micro-batch's rows.
#include "tierzero/nn/layer_norm.hpp"

#include "tierzero/nn/micro_batch.hpp"

namespace tierzero::nn {

LayerNorm::LayerNorm(ParamKind weight, ParamKind bias, int layer, size_t channels)
    : weight_kind_(weight),
      bias_kind_(bias),
      layer_(layer),
      channels_(channels),
      weight_(weight, layer),
      bias_(bias, layer) {}

std::vector<TensorMeta> LayerNorm::parameters() const {
  const auto C = static_cast<int64_t>(channels_);
  return {TensorMeta{weight_kind_, layer_, {C}, false}, TensorMeta{bias_kind_, layer_, {C}, false}};
}

void LayerNorm::bind(const ParamLayout& layout) {
  weight_.bind(layout);
  bias_.bind(layout);
}

void LayerNorm::forward(const ModuleContext& ctx, const float* in, float* out,
                        const LayerNormStats& stats) const {
  const size_t N = ctx.mb.B() * ctx.mb.T();
  ctx.k.layernorm_forward(out, stats.mean, stats.rstd, in, weight_.in(ctx.params),
                          bias_.in(ctx.params), N, channels_);
}

void LayerNorm::backward(const ModuleContext& ctx, const float* in, const LayerNormStats& stats,
                         const float* dout, float* din) const {
  const size_t N = ctx.mb.B() * ctx.mb.T();
  ctx.k.layernorm_backward(din, weight_.in(ctx.grads), bias_.in(ctx.grads), dout, in,
                           weight_.in(ctx.params), stats.mean, stats.rstd, N, channels_);
}

}  // namespace tierzero::nn
