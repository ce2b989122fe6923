// Head: the output layer, logits = in @ wte^T, tied to the Embedding's wte. It owns no
// parameters: its unit is the embeddings' (a shared unit), so its calls acquire that unit again,
// and the embedding, later in the backward, is the one that finishes the unit's gradients.
// Under tensor parallelism wte's rows are cut by vocabulary, so the head is column-parallel: each
// rank computes its columns of the logits (the loss is vocabulary-parallel, see GPT), and the
// input gradient's partial sums are all-reduced (reduce-scattered under sequence parallelism,
// whose input is gathered first). An untied head (Llama 3 8B) reads its own lmheadw instead,
// which the Embedding declares in the same unit.
#pragma once

#include <cstddef>
#include <vector>

#include "tierzero/nn/gpt_config.hpp"
#include "tierzero/nn/module.hpp"

namespace tierzero::nn {

class Head final : public Module {
 public:
  Head(const GPTConfig& config, size_t index);

  std::vector<TensorMeta> parameters() const override { return {}; }
  void bind(const ParamLayout& layout) override;
  // out (B, T, Vl) = in (S, C, gathered to B*T rows) @ wte^T, Vl: this rank's vocabulary.
  void forward(ModuleContext& ctx, const float* in, float* out) override;
  // din (S, C) += dout @ wte, dwte += dout^T in, for dout (B, T, Vl).
  void backward(ModuleContext& ctx, const float* dout, float* din) override;

 private:
  size_t vocab_padded_, channels_;
  ParamRef wte_;  // wte, or lmheadw when untied
};

}  // namespace tierzero::nn
