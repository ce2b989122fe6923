// MLP: fc, GELU (or SwiGLU), projection; backward in reverse with the model's scratch for the
// hidden gradients.
#include "mlp.hpp"

#include "tierzero/nn/micro_batch.hpp"
#include "tierzero/nn/model_scratch.hpp"

namespace tierzero::nn {

namespace {
bool is_swiglu(const GPTConfig& c) {
  return c.arch.mlp == MlpKind::swiglu;
}
}  // namespace

MLP::MLP(const GPTConfig& config, int layer)
    : swiglu_(is_swiglu(config)),
      hidden_(config.hidden()),
      fc_(ParamKind::fcw, ParamKind::fcb, layer, config.channels, config.fc_channels(),
          LinearSplit::column, is_swiglu(config) ? 2 : 1, 1, config.arch.linear_bias),
      proj_(ParamKind::fcprojw, ParamKind::fcprojb, layer, config.hidden(), config.channels,
            LinearSplit::row, 1, 1, config.arch.linear_bias) {}

std::vector<TensorMeta> MLP::parameters() const {
  std::vector<TensorMeta> p = fc_.parameters();
  for (TensorMeta& m : proj_.parameters()) p.push_back(m);
  return p;
}

void MLP::bind(const ParamLayout& layout) {
  fc_.bind(layout);
  proj_.bind(layout);
  hidden_ = proj_.in_features();
}

void MLP::forward(const ModuleContext& ctx, const float* in, float* out, const MlpActs& a) const {
  // GELU runs in fc's product (a cuBLASLt epilogue on CUDA); SwiGLU reads two halves of fc's
  // output, so it stays a pass of its own.
  if (swiglu_) {
    fc_.forward(ctx, in, a.fch);
    ctx.k.swiglu_forward(a.fch_gelu, a.fch, ctx.mb.B() * ctx.mb.T(), hidden_);
  } else {
    fc_.forward_gelu(ctx, in, a.fch, a.fch_gelu);
  }
  if (out) proj_.forward(ctx, a.fch_gelu, out);
}

void MLP::backward(const ModuleContext& ctx, const float* in, const MlpActs& a, const float* dout,
                   float* din) const {
  const size_t N = ctx.mb.B() * ctx.mb.T();
  if (swiglu_) {
    // Both gradients are written whole (the product's beta 0, then SwiGLU's one term per
    // element): neither buffer is zeroed first.
    proj_.backward(ctx, a.fch_gelu, dout, ctx.scratch.dfch_gelu());
    ctx.k.swiglu_backward(ctx.scratch.dfch(), a.fch, ctx.scratch.dfch_gelu(), N, hidden_);
  } else {
    // GELU's gradient is taken in the projection's input-gradient product: dfch is written
    // whole, so neither it nor a separate gradient of fch_gelu is zeroed first.
    proj_.backward_gelu(ctx, a.fch_gelu, a.fch, dout, ctx.scratch.dfch());
  }
  fc_.backward(ctx, in, ctx.scratch.dfch(), din);
}

}  // namespace tierzero::nn
