// The loss over a run of a micro-batch's logit rows, shared by the whole-block path (GPT, the
// logits kept from the forward) and the chunked classifier (Head, one chunk of rows at a time):
// the losses of those rows and, with dloss, the logits' gradient written over them. Under tensor
// parallelism the loss is vocabulary-parallel: each rank's max, sum of exponentials and target
// logit over its columns, all-gathered, then every rank finishes the same losses and its own
// columns' gradient.
#pragma once

#include <cstddef>

#include "tierzero/nn/module.hpp"

namespace tierzero::nn {

// logits (n, Vl): rows [row, row + n) of ctx.mb's (B*T, Vl) logits, Vl = dims().local_vocab.
// Writes ctx.mb.losses()[row, row + n); with dloss non-null OVERWRITES logits with
// dloss * (softmax - onehot(target)), zero in the padding columns; in 16-bit compute writes
// that gradient rounded into the first n rows of ctx.mb.dlogits16() instead, and the logits
// stay. V: the real vocabulary.
void cross_entropy_rows(const ModuleContext& ctx, float* logits, size_t row, size_t n, size_t V,
                        const float* dloss);

}  // namespace tierzero::nn
