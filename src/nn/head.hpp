// Head: the output layer, logits = in @ wte^T, tied to the Embedding's wte. It owns no
// parameters: its unit is the embeddings' (a shared unit), so its calls acquire that unit again,
// and the embedding, later in the backward, is the one that finishes the unit's gradients.
// Under tensor parallelism wte's rows are cut by vocabulary, so the head is column-parallel: each
// rank computes its columns of the logits (the loss is vocabulary-parallel, see GPT), and the
// input gradient's partial sums are all-reduced (reduce-scattered under sequence parallelism,
// whose input is gathered first). An untied head (Llama 3 8B) reads its own lmheadw instead,
// which the Embedding declares in the same unit.
// When a micro-batch's logits do not fit one chunk (ActivationDims::chunked_logits), the forward
// only keeps its input (fp32; in 16-bit compute the final norm keeps lnf), and classify() runs the
// head, the loss and, in the backward, their gradient chunk of rows by chunk, so no more than one
// (rows, Vl) block of fp32 logits exists.
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
  // With chunked logits: keeps in only (classify() computes the logits).
  void forward(ModuleContext& ctx, const float* in, float* out) override;
  // din (S, C) += dout @ wte, dwte += dout^T in, for dout (B, T, Vl). Not with chunked logits.
  void backward(ModuleContext& ctx, const float* dout, float* din) override;
  // The chunked classifier over the head's input (input()): for each chunk of rows (R =
  // dims().logits_rows), its logits in ctx.mb.logits() (R, Vl), the chunk's losses, and with
  // dloss (the gradient of each token's loss) the head's backward for those rows: din (S, C) +=,
  // dwte +=. Without dloss (an evaluation) din is unused and ctx.grads may be null.
  void classify(ModuleContext& ctx, const float* dloss, float* din);

 private:
  // Where the input gradient goes: straight into din (+=) on one rank; under tensor parallelism
  // into the scratch's proj() (B*T, C), written whole (chunk by chunk: their rows are disjoint),
  // a partial sum over this rank's columns that sum_input_grad adds into din once complete.
  float* input_grad(const ModuleContext& ctx, float* din) const;
  kernels::GradWrite input_grad_write(const ModuleContext& ctx) const;
  void sum_input_grad(const ModuleContext& ctx, float* dx, float* din) const;
  // The head's input as the products read it: all B*T rows (gathered under sequence
  // parallelism into the scratch's gathered_in()), of the compute dtype.
  ComputeTensor input(const ModuleContext& ctx) const;
  // The two products, in the run's compute (ctx.compute16(): on the 16-bit working copy):
  // logits out (n, Vl) fp32 = x (n, C) @ wte^T; and for dlogits (n, Vl), fp32 or in 16-bit
  // compute the cross-entropy's ctx.mb.dlogits16(), dx (n, C) as input_grad_write says and
  // dwte += dlogits^T x.
  void logits(const ModuleContext& ctx, float* out, const ComputeTensor& x, size_t n) const;
  void logits_backward(const ModuleContext& ctx, float* dx, const void* dlogits,
                       const ComputeTensor& x, size_t n) const;

  size_t vocab_, vocab_padded_, channels_;  // V; Vl (this rank's columns); C
  ParamRef wte_;                            // wte, or lmheadw when untied
};

}  // namespace tierzero::nn
