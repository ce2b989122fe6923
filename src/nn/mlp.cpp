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

// GELU runs in fc's product (a cuBLASLt epilogue on CUDA); SwiGLU reads two halves of fc's output,
// so it stays a pass of its own. In 16-bit compute every tensor here but out and din is of the
// compute dtype, each rounded once.
void MLP::forward(const ModuleContext& ctx, const ComputeTensor& in, float* out,
                  const MlpActs& a) const {
  if (swiglu_) {
    fc_.forward(ctx, in, a.fch);
    const size_t N = ctx.mb.dims().tokens;
    if (ctx.compute16())
      ctx.k.swiglu16_forward(a.fch_gelu.raw(), a.fch.raw(), ctx.compute(), N, hidden_);
    else
      ctx.k.swiglu_forward(a.fch_gelu.f32(), a.fch.f32(), N, hidden_);
  } else {
    fc_.forward_gelu(ctx, in, a.fch, a.fch_gelu);
  }
  if (out) proj_.forward(ctx, a.fch_gelu, ComputeTensor{out, DType::f32});  // the fp32 stream's
}

void MLP::backward(const ModuleContext& ctx, const ComputeTensor& in, const MlpActs& a,
                   const ComputeTensor& dout, float* din) const {
  const ComputeTensor dfch = ctx.scratch.dfch();  // (B*T, Hl or 2 Hl), written whole
  if (swiglu_) {
    // Both gradients are written whole (the product's beta 0, then SwiGLU's one term per
    // element): neither buffer is zeroed first.
    const ComputeTensor dact = ctx.scratch.dfch_gelu();  // (B*T, Hl)
    proj_.backward(ctx, a.fch_gelu, dout, dact);
    const size_t N = ctx.mb.dims().tokens;
    if (ctx.compute16())
      ctx.k.swiglu16_backward(dfch.raw(), a.fch.raw(), dact.raw(), ctx.compute(), N, hidden_);
    else
      ctx.k.swiglu_backward(dfch.f32(), a.fch.f32(), dact.f32(), N, hidden_);
  } else {
    // GELU's gradient is taken in the projection's input-gradient product: dfch is written
    // whole, so neither it nor a separate gradient of fch_gelu is zeroed first.
    proj_.backward_gelu(ctx, a.fch_gelu, a.fch, dout, dfch);
  }
  fc_.backward(ctx, in, dfch, ComputeTensor{din, DType::f32});  // a norm's backward reads it
}

}  // namespace tierzero::nn
