// FinalNorm: a LayerNorm whose statistics live in the micro-batch.
#include "final_norm.hpp"

#include "tierzero/core/error.hpp"
#include "tierzero/nn/micro_batch.hpp"

namespace tierzero::nn {

FinalNorm::FinalNorm(const GPTConfig& config, size_t index)
    : Module("final_norm", "final_norm", index),
      norm_(ParamKind::lnfw, ParamKind::lnfb, -1, config.channels, config.arch.norm,
            config.arch.norm_eps) {}

void FinalNorm::bind(const ParamLayout& layout) {
  Module::bind(layout);
  norm_.bind(layout);
}

void FinalNorm::forward(ModuleContext& ctx, const float* in, float* out) {
  TZ_CHECK(!ctx.in_sum || ctx.in_sum->into == in, name() + ": its input's sum goes elsewhere",
           "internal error: a ResidualSum is written into the next module's input");
  ctx.mb.save_input(index(), in);
  if (ctx.in_sum)  // the last block's residual add, in the norm's pass
    norm_.residual_forward(ctx, ctx.in_sum->a, ctx.in_sum->b, ctx.in_sum->into, out,
                           ctx.mb.final_norm_stats());
  else
    norm_.forward(ctx, in, out, ctx.mb.final_norm_stats());
}

void FinalNorm::backward(ModuleContext& ctx, const float* dout, float* din) {
  norm_.backward(ctx, ctx.mb.saved_input(index()), ctx.mb.final_norm_stats(), dout, din);
}

}  // namespace tierzero::nn
