// FinalNorm: a LayerNorm whose statistics live in the micro-batch.
#include "final_norm.hpp"

#include "tierzero/nn/micro_batch.hpp"
#include "tierzero/nn/model_scratch.hpp"

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

// In 16-bit compute the last block reads din rounded: written in the norm's pass when asked.
void FinalNorm::backward(ModuleContext& ctx, const float* dout, float* din) {
  const bool copy16 = ctx.want_din16 && ctx.compute16();
  norm_.backward(ctx, ctx.mb.saved_input(index()), ctx.mb.final_norm_stats(), dout, din,
                 copy16 ? ctx.scratch.stream_grad16() : ComputeTensor{});
  ctx.wrote_din16 = copy16;
}

}  // namespace tierzero::nn
