// FinalNorm: a LayerNorm whose statistics live in the micro-batch.
#include "final_norm.hpp"

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

// out is ctx.mb.lnf() in fp32 compute and null in 16-bit (GPT::output_of): the norm writes
// lnf() in the compute dtype, where the head reads it.
void FinalNorm::forward(ModuleContext& ctx, const float* in, float*) {
  ctx.mb.save_input(index(), in);
  norm_.forward_input(ctx, in, ctx.mb.lnf(), ctx.mb.final_norm_stats());  // the last add too
}

void FinalNorm::backward(ModuleContext& ctx, const float* dout, float* din) {
  norm_.backward(ctx, ctx.mb.saved_input(index()), ctx.mb.final_norm_stats(), dout, din);
}

}  // namespace tierzero::nn
