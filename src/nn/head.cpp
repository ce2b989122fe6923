// Head: logits from the tied wte, found in the embeddings' unit.
#include "tierzero/nn/head.hpp"

#include "tierzero/nn/micro_batch.hpp"

namespace tierzero::nn {

Head::Head(const GPTConfig& config, size_t index)
    : Module("head", "embeddings", index),
      vocab_padded_(config.padded_vocab_size),
      channels_(config.channels),
      wte_(ParamKind::wte, -1) {}

void Head::bind(const ParamLayout& layout) {
  Module::bind(layout);
  wte_.bind(layout);
  vocab_padded_ = static_cast<size_t>(wte_.shape()[0]);  // this rank's vocabulary range
}

void Head::forward(ModuleContext& ctx, const float* in, float* out) {
  ctx.mb.save_input(index(), in);
  ctx.k.matmul_forward(out, in, wte_.in(ctx.params), nullptr, ctx.mb.B() * ctx.mb.T(), channels_,
                       vocab_padded_);
}

void Head::backward(ModuleContext& ctx, const float* dout, float* din) {
  ctx.k.matmul_backward(din, wte_.in(ctx.grads), nullptr, dout, ctx.mb.saved_input(index()),
                        wte_.in(ctx.params), ctx.mb.B() * ctx.mb.T(), channels_, vocab_padded_);
}

}  // namespace tierzero::nn
