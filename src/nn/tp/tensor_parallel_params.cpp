// Whole-model parameters to and from tensor-parallel ranks' flat buffers, tensor by tensor.
#include "tierzero/nn/tp/tensor_parallel_params.hpp"

#include <algorithm>

#include "tierzero/core/error.hpp"

namespace tierzero::nn {

namespace {

// The whole-model tensor a rank's tensor is a piece of (by kind and layer: a pipeline stage
// holds only some).
const ParamTensor& whole_of(const ParamLayout& full_layout, const ParamTensor& local) {
  const ParamTensor* f = full_layout.find(local.kind, local.layer);
  TZ_CHECK(full_layout.tp().size == 1 && f != nullptr && f->full_shape == local.full_shape,
           "parameter " + local.name() + " is not in the whole-model layout",
           "internal error: the whole-model layout must be the tp 1 layout of the same model");
  return *f;
}

}  // namespace

void scatter_full_params(const ParamLayout& full_layout, const float* full,
                         const ParamLayout& local_layout, float* local) {
  for (const ParamTensor& l : local_layout.tensors())
    l.copy_local_piece(local_layout.tp(), full + whole_of(full_layout, l).offset, local + l.offset);
}

void assemble_full_params(const ParamLayout& local_layout, const float* all_ranks,
                          const ParamLayout& full_layout, float* full) {
  const size_t tp = local_layout.tp().size;
  const size_t stride = local_layout.total_numel();
  for (size_t r = 0; r < tp; ++r)
    for (const ParamTensor& l : local_layout.tensors()) {
      if (l.replicated() && r > 0) continue;  // rank 0's copy (the row-parallel bias it adds)
      l.place_local_piece(TensorParallel{tp, r}, all_ranks + r * stride + l.offset,
                          full + whole_of(full_layout, l).offset);
    }
}

void for_each_whole_run(const ParamLayout& local_layout, const ParamLayout& full_layout,
                        size_t begin, size_t count,
                        const std::function<void(const ParamTensor&, size_t, size_t, size_t)>& fn) {
  const size_t end = begin + count;
  for (const ParamTensor& l : local_layout.tensors()) {
    if (l.offset >= end || l.offset + l.numel <= begin) continue;
    const size_t whole = whole_of(full_layout, l).offset;
    l.for_each_local_run(local_layout.tp(), [&](size_t f, size_t lo, size_t n) {
      const size_t from = std::max(begin, l.offset + lo);
      const size_t to = std::min(end, l.offset + lo + n);
      if (from < to) fn(l, whole + f + (from - l.offset - lo), from - begin, to - from);
    });
  }
}

}  // namespace tierzero::nn
