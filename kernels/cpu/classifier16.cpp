// 16-bit training's embedding and classifier on the CPU (Kernels::encoder16_forward,
// softmax_xent16_forward_backward, vocab_xent16_finish): the embedding's rows widened as they are
// read, and the logits' gradient computed in fp32 by the fp32 kernels and rounded once, so each
// gives the bits of the fp32 op on the widened parameters, or of the fp32 op then
// convert_from_f32. The gradient's fp32 form is transient memory of the call, as large as the
// chunk of logits (the CPU is the reference here, not the place to save it).
#include <cstddef>
#include <cstdint>
#include <vector>

#include "cpu/storage16.hpp"
#include "tierzero/kernels/cpu_ops.hpp"

namespace tierzero::kernels::cpu {

void encoder16_forward(float* out, const int32_t* tokens, const void* wte_local, const void* wpe,
                       DType type, size_t vocab_start, size_t vocab_count, size_t B, size_t T,
                       size_t C) {
  check_16bit_types("encoder16_forward", type, type);
  const std::vector<float> wpe32 = widened(wpe, type, T * C);  // (T, C): the positions used
  const auto* wte_bytes = static_cast<const unsigned char*>(wte_local);
  const size_t row_bytes = C * dtype_size(type);
#pragma omp parallel
  {
    std::vector<float> wte_row(C);  // (C) the token's row, widened
#pragma omp for schedule(static)
    for (size_t bt = 0; bt < B * T; ++bt) {
      // The token's row of this range, or none (vocab_count): as encoder_forward_vocab_range.
      const size_t row = static_cast<size_t>(static_cast<int64_t>(tokens[bt])) - vocab_start;
      const float* wpe_row = wpe32.empty() ? nullptr : wpe32.data() + (bt % T) * C;  // (C)
      float* out_row = out + bt * C;                                                 // (C)
      if (row < vocab_count) {
        tierzero::convert_to_f32(wte_row.data(), wte_bytes + row * row_bytes, type, C);
        for (size_t c = 0; c < C; ++c)
          out_row[c] = wpe_row != nullptr ? wte_row[c] + wpe_row[c] : wte_row[c];
      } else {
        for (size_t c = 0; c < C; ++c) out_row[c] = wpe_row != nullptr ? 0.0f + wpe_row[c] : 0.0f;
      }
    }
  }
}

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
