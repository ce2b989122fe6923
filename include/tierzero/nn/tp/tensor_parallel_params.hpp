// Moving whole-model parameters to and from tensor-parallel ranks: a rank's flat buffer holds
// its pieces of every tensor (ParamLayout for its tp rank), while checkpoints and the one-rank
// reference hold the whole tensors (ParamLayout at tp 1). Both directions go tensor by tensor
// through the modules' TensorMeta, so a checkpoint written at one tp size loads at any other.
// Tensors are matched by kind and layer, so the local layout may be a pipeline stage's (a part of
// the model): assembling then fills only that stage's tensors of `full`.
#pragma once

#include <cstddef>
#include <functional>

#include "tierzero/nn/param_layout.hpp"

namespace tierzero::nn {

// local (local_layout.total_numel()) = local_layout.tp()'s pieces of full
// (full_layout.total_numel(), a tp 1 layout of the same model).
void scatter_full_params(const ParamLayout& full_layout, const float* full,
                         const ParamLayout& local_layout, float* local);

// full (full_layout.total_numel()) = the whole tensors, from every tp rank's flat buffer
// all_ranks (tp, local_layout.total_numel()) in rank order; local_layout is any rank's (the
// ranks' layouts differ only in which pieces they hold, not in where). Replicated tensors are
// taken from rank 0.
void assemble_full_params(const ParamLayout& local_layout, const float* all_ranks,
                          const ParamLayout& full_layout, float* full);

// Where the elements [begin, begin + count) of a rank's flat buffer (local_layout: its tp piece,
// its pipeline stage's tensors) live in the whole model (full_layout, tp 1): fn(tensor,
// full_offset, at, n) for each contiguous run, `tensor` the local tensor it belongs to,
// `full_offset` an element of full_layout's flat buffer and `at` the run's start relative to
// `begin`. Padding between tensors has no run. Lets a rank read or write its pieces of a model
// file by range, without either side holding the whole model.
void for_each_whole_run(const ParamLayout& local_layout, const ParamLayout& full_layout,
                        size_t begin, size_t count,
                        const std::function<void(const ParamTensor& tensor, size_t full_offset,
                                                 size_t at, size_t n)>& fn);

}  // namespace tierzero::nn
