// Whole-model parameters to and from tensor-parallel ranks' flat buffers, tensor by tensor.
#include "tierzero/nn/tensor_parallel_params.hpp"

#include "tierzero/core/error.hpp"

namespace tierzero::nn {

namespace {

void check_same_model(const ParamLayout& full_layout, const ParamLayout& local_layout) {
  TZ_CHECK(
      full_layout.tp().size == 1 && full_layout.tensors().size() == local_layout.tensors().size(),
      "parameter layouts of different models",
      "internal error: the whole-model layout must be the tp 1 layout of the same model");
}

}  // namespace

void scatter_full_params(const ParamLayout& full_layout, const float* full,
                         const ParamLayout& local_layout, float* local) {
  check_same_model(full_layout, local_layout);
  for (size_t i = 0; i < local_layout.tensors().size(); ++i) {
    const ParamTensor& l = local_layout.tensors()[i];
    const ParamTensor& f = full_layout.tensors()[i];
    l.copy_local_piece(local_layout.tp(), full + f.offset, local + l.offset);
  }
}

void assemble_full_params(const ParamLayout& local_layout, const float* all_ranks,
                          const ParamLayout& full_layout, float* full) {
  check_same_model(full_layout, local_layout);
  const size_t tp = local_layout.tp().size;
  const size_t stride = local_layout.total_numel();
  for (size_t r = 0; r < tp; ++r)
    for (size_t i = 0; i < local_layout.tensors().size(); ++i) {
      const ParamTensor& l = local_layout.tensors()[i];
      const ParamTensor& f = full_layout.tensors()[i];
      if (l.replicated() && r > 0) continue;  // rank 0's copy (the row-parallel bias it adds)
      l.place_local_piece(TensorParallel{tp, r}, all_ranks + r * stride + l.offset,
                          full + f.offset);
    }
}

}  // namespace tierzero::nn
