// The loss over a run of logit rows (cross_entropy.hpp).
#include "cross_entropy.hpp"

#include "tierzero/nn/micro_batch.hpp"
#include "tierzero/nn/model_scratch.hpp"

namespace tierzero::nn {

void cross_entropy_rows(const ModuleContext& ctx, float* logits, size_t row, size_t n, size_t V,
                        const float* dloss) {
  const ActivationDims& d = ctx.mb.dims();
  const int32_t* targets = ctx.mb.targets() + row;                                  // (n)
  float* losses = ctx.mb.losses() + row;                                            // (n)
  float* dlogits = dloss ? logits : nullptr;                                        // in place
  void* dlogits16 = ctx.compute16() && dloss ? ctx.mb.dlogits16().raw() : nullptr;  // apart
  if (dlogits16 != nullptr && ctx.tp == nullptr) {
    ctx.k.softmax_xent16_forward_backward(dlogits16, losses, logits, targets, ctx.compute(), *dloss,
                                          n, V, d.local_vocab);
    return;
  }
  if (ctx.tp == nullptr) {
    if (dloss)
      ctx.k.softmax_xent_forward_backward(dlogits, losses, logits, targets, *dloss, n, V,
                                          d.local_vocab);
    else
      ctx.k.softmax_xent_forward(losses, logits, targets, n, V, d.local_vocab);
    return;
  }
  const size_t start = ctx.tp->rank() * d.local_vocab;
  float* partials = ctx.scratch.xent_partials();  // (n, 3) of (BT, 3)
  float* all = ctx.scratch.xent_all();            // (tp, n, 3) of (tp, BT, 3)
  ctx.k.vocab_xent_partials(partials, logits, targets, n, d.local_vocab, start, V);
  ctx.tp->all_gather(ctx.stream, partials, all, n * 3);
  if (dlogits16 != nullptr) {
    ctx.k.vocab_xent16_finish(dlogits16, losses, logits, all, d.tp, targets, ctx.compute(), *dloss,
                              n, d.local_vocab, start, V);
    return;
  }
  ctx.k.vocab_xent_finish(dlogits, losses, logits, all, d.tp, targets, dloss ? *dloss : 0.0f, n,
                          d.local_vocab, start, V);
}

}  // namespace tierzero::nn
