// 16-bit training's classifier on the CPU (softmax_xent16_forward_backward, vocab_xent16_finish;
// its embedding, encoder16_forward, is in vocab_parallel.cpp): the logits' gradient computed in
// fp32 by the fp32 kernels and rounded once, so each gives the bits of the fp32 op then
// convert_from_f32. The gradient's fp32 form is transient memory of the call, as large as the
// chunk of logits (the CPU is the reference here, not the place to save it).
#include <cstddef>
#include <cstdint>
#include <vector>

#include "cpu/storage16.hpp"
#include "tierzero/kernels/cpu_ops.hpp"

namespace tierzero::kernels::cpu {

void softmax_xent16_forward_backward(void* dlogits, float* losses, const float* logits,
                                     const int32_t* targets, DType type, float dloss, size_t N,
                                     size_t V, size_t Vp) {
  check_16bit_types("softmax_xent16_forward_backward", type, type);
  check_16bit_gradient_buffer("softmax_xent16_forward_backward", dlogits, logits, N * Vp);
  // The fp32 gradient whole, then rounded: the fp32 kernel validates the targets before any
  // thread starts (row by row inside a parallel region, its Error could not leave the region).
  std::vector<float> dlogits32(N * Vp);  // (N, Vp)
  softmax_xent_forward_backward(dlogits32.data(), losses, logits, targets, dloss, N, V, Vp);
  tierzero::convert_from_f32(dlogits, type, dlogits32.data(), dlogits32.size());
}

void vocab_xent16_finish(void* dlogits, float* losses, const float* logits,
                         const float* all_partials, size_t ranks, const int32_t* targets,
                         DType type, float dloss, size_t N, size_t Vl, size_t vocab_start,
                         size_t V) {
  check_16bit_types("vocab_xent16_finish", type, type);
  check_16bit_gradient_buffer("vocab_xent16_finish", dlogits, logits, N * Vl);
  std::vector<float> dlogits32(N * Vl);  // (N, Vl): the partials are laid out by N
  vocab_xent_finish(dlogits32.data(), losses, logits, all_partials, ranks, targets, dloss, N, Vl,
                    vocab_start, V);
  tierzero::convert_from_f32(dlogits, type, dlogits32.data(), dlogits32.size());
}

}  // namespace tierzero::kernels::cpu
