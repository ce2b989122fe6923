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
  float* fch = a.fch.f32();
  float* fch_gelu = a.fch_gelu.f32();
  if (swiglu_) {
    fc_.forward(ctx, in, fch);
    ctx.k.swiglu_forward(fch_gelu, fch, ctx.mb.B() * ctx.mb.T(), hidden_);
  } else {
    fc_.forward_gelu(ctx, in, fch, fch_gelu);
  }
  if (out) proj_.forward(ctx, fch_gelu, out);
}

void MLP::backward(const ModuleContext& ctx, const float* in, const MlpActs& a, const float* dout,
                   float* din) const {
  const size_t N = ctx.mb.B() * ctx.mb.T();
  float* dfch = ctx.scratch.dfch().f32();
  if (swiglu_) {
    // Both gradients are written whole (the product's beta 0, then SwiGLU's one term per
    // element): neither buffer is zeroed first.
    float* dact = ctx.scratch.dfch_gelu().f32();  // (B*T, Hl)
    proj_.backward(ctx, a.fch_gelu.f32(), dout, dact);
    ctx.k.swiglu_backward(dfch, a.fch.f32(), dact, N, hidden_);
  } else {
    // GELU's gradient is taken in the projection's input-gradient product: dfch is written
    // whole, so neither it nor a separate gradient of fch_gelu is zeroed first.
    proj_.backward_gelu(ctx, a.fch_gelu.f32(), a.fch.f32(), dout, dfch);
  }
  fc_.backward(ctx, in, dfch, din);
}

void MLP::forward16(const ModuleContext& ctx, const ComputeTensor& in, float* out,
                    const MlpActs& a) const {
  if (swiglu_) {  // fc's output and SwiGLU's each rounded once
    fc_.forward16(ctx, in, a.fch);
    ctx.k.swiglu16_forward(a.fch_gelu.raw(), a.fch.raw(), ctx.compute(), ctx.mb.dims().tokens,
                           hidden_);
  } else {
    fc_.forward_gelu16(ctx, in, a.fch, a.fch_gelu);  // GELU in the epilogue, both rounded
  }
  if (out) proj_.forward16(ctx, a.fch_gelu, ComputeTensor{out, DType::f32});
}

void MLP::backward16(const ModuleContext& ctx, const ComputeTensor& in, const MlpActs& a,
                     const ComputeTensor& dout, float* din) const {
  const ComputeTensor dfch = ctx.scratch.dfch();  // (B*T, 4C or 2 Hl) compute, written whole
  if (swiglu_) {
    const ComputeTensor dact = ctx.scratch.dfch_gelu();  // (B*T, Hl) compute, written whole
    proj_.backward16(ctx, a.fch_gelu, dout, dact);
    ctx.k.swiglu16_backward(dfch.raw(), a.fch.raw(), dact.raw(), ctx.compute(),
                            ctx.mb.dims().tokens, hidden_);
  } else {
    proj_.backward_gelu16(ctx, a.fch_gelu, a.fch, dout, dfch);
  }
  fc_.backward16(ctx, in, dfch, ComputeTensor{din, DType::f32});  // a norm's backward reads it
}

}  // namespace tierzero::nn
