// Embedding: token (wte, vocab-parallel over rows) plus learned position (wpe, replicated)
// embeddings. Its input is the micro-batch's tokens rather than a float tensor. Under tensor
// parallelism each rank looks up the tokens of its vocabulary range (zeros for the rest; tp
// rank 0 adds the positions) and the partial sums are all-reduced, or reduce-scattered to this
// rank's rows of the stream under sequence parallelism. With rotary positions (Llama) there is
// no wpe; with an untied head the embeddings' unit also holds the head's lm_head weight (cut by
// vocabulary like wte), so the unit is what the first and last pipeline stages share either way.
#pragma once

#include <cstddef>
#include <vector>

#include "tierzero/nn/gpt_config.hpp"
#include "tierzero/nn/module.hpp"

namespace tierzero::nn {

class Embedding final : public Module {
 public:
  Embedding(const GPTConfig& config, size_t index);

  // wte (Vp, C), wpe (maxT, C) for learned positions, lmheadw (Vp, C) when untied
  std::vector<TensorMeta> parameters() const override;
  void bind(const ParamLayout& layout) override;
  // The lookup's gradient is a scatter of dout into rows: no parameter values needed.
  bool backward_reads_params() const override { return false; }
  // out (S, C) = wte[tokens] + wpe[t] (this rank's S rows of the stream); `in` is unused
  // (tokens come from ctx.mb).
  void forward(ModuleContext& ctx, const float* in, float* out) override;
  // dwte (this rank's rows), dwpe += the scatter of dout (S, C); din is unused (null).
  void backward(ModuleContext& ctx, const float* dout, float* din) override;

 private:
  // forward in 16-bit compute (ModuleContext::compute16): the lookup reads the working copy.
  void forward16(const ModuleContext& ctx, float* out) const;
  // out (S, C) = partial (B*T, C) summed over the tensor-parallel group (all-reduced in place, or
  // reduce-scattered under sequence parallelism); nothing on one rank (partial is out).
  void sum_over_group(const ModuleContext& ctx, float* partial, float* out) const;
  size_t vocab_padded_, max_seq_len_, channels_;
  bool learned_positions_, untied_head_;
  size_t vocab_start_ = 0, vocab_local_ = 0;  // this rank's rows of wte, after bind
  ParamRef wte_, wpe_;
};

}  // namespace tierzero::nn
