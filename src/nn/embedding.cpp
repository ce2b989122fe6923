// Embedding: wte vocab-parallel, wpe replicated; the encoder kernels.
#include "tierzero/nn/embedding.hpp"

#include "tierzero/nn/micro_batch.hpp"

namespace tierzero::nn {

Embedding::Embedding(const GPTConfig& config, size_t index)
    : Module("embeddings", "embeddings", index),
      vocab_padded_(config.padded_vocab_size),
      max_seq_len_(config.max_seq_len),
      channels_(config.channels),
      wte_(ParamKind::wte, -1),
      wpe_(ParamKind::wpe, -1) {}

std::vector<TensorMeta> Embedding::parameters() const {
  const auto Vp = static_cast<int64_t>(vocab_padded_), C = static_cast<int64_t>(channels_);
  const auto maxT = static_cast<int64_t>(max_seq_len_);
  TensorMeta wte{ParamKind::wte, -1, {Vp, C}, true};
  wte.partition_dim = 0;  // each tp rank holds a range of the vocabulary
  return {wte, TensorMeta{ParamKind::wpe, -1, {maxT, C}, true}};
}

void Embedding::bind(const ParamLayout& layout) {
  Module::bind(layout);
  wte_.bind(layout);
  wpe_.bind(layout);
}

void Embedding::forward(ModuleContext& ctx, const float*, float* out) {
  ctx.k.encoder_forward(out, ctx.mb.tokens(), wte_.in(ctx.params), wpe_.in(ctx.params), ctx.mb.B(),
                        ctx.mb.T(), channels_);
}

void Embedding::backward(ModuleContext& ctx, const float* dout, float*) {
  ctx.k.encoder_backward(wte_.in(ctx.grads), wpe_.in(ctx.grads), dout, ctx.mb.tokens(), ctx.mb.B(),
                         ctx.mb.T(), channels_);
}

}  // namespace tierzero::nn
