// MLP: fc, GELU, projection; backward in reverse with the model's scratch for the hidden
// gradients.
#include "mlp.hpp"

#include "tierzero/nn/micro_batch.hpp"
#include "tierzero/nn/model_scratch.hpp"

namespace tierzero::nn {

MLP::MLP(const GPTConfig& config, int layer)
    : hidden_(4 * config.channels),
      fc_(ParamKind::fcw, ParamKind::fcb, layer, config.channels, 4 * config.channels,
          LinearSplit::column),
      proj_(ParamKind::fcprojw, ParamKind::fcprojb, layer, 4 * config.channels, config.channels,
            LinearSplit::row) {}

std::vector<TensorMeta> MLP::parameters() const {
  std::vector<TensorMeta> p = fc_.parameters();
  for (TensorMeta& m : proj_.parameters()) p.push_back(m);
  return p;
}

void MLP::bind(const ParamLayout& layout) {
  fc_.bind(layout);
  proj_.bind(layout);
  hidden_ = fc_.out_features();
}

void MLP::forward(const ModuleContext& ctx, const float* in, float* out, const MlpActs& a) const {
  fc_.forward(ctx, in, a.fch);
  ctx.k.gelu_forward(a.fch_gelu, a.fch, ctx.mb.B() * ctx.mb.T() * hidden_);
  if (out) proj_.forward(ctx, a.fch_gelu, out);
}

void MLP::backward(const ModuleContext& ctx, const float* in, const MlpActs& a, const float* dout,
                   float* din) const {
  const size_t n = ctx.mb.B() * ctx.mb.T() * hidden_;
  ctx.zero(ctx.scratch.dfch_gelu(), n);
  proj_.backward(ctx, a.fch_gelu, dout, ctx.scratch.dfch_gelu());
  ctx.zero(ctx.scratch.dfch(), n);
  ctx.k.gelu_backward(ctx.scratch.dfch(), a.fch, ctx.scratch.dfch_gelu(), n);
  fc_.backward(ctx, in, ctx.scratch.dfch(), din);
}

}  // namespace tierzero::nn
