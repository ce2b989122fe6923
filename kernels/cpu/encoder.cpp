// Token + position embedding, forward and backward, on the CPU.
// The backward scatter-adds rows of dwte chosen by token, and tokens repeat, so rows cannot be
// split across threads; columns can: each thread owns a slice of the C channels for every row,
// which is race-free, needs no atomics and gives the same bits on every run.
#include "tierzero/kernels/cpu_ops.hpp"

namespace tierzero::kernels::cpu {

void encoder_forward(float* out,             // (B, T, C)
                     const int32_t* tokens,  // (B, T)
                     const float* wte,       // (Vp, C)
                     const float* wpe,       // (maxT, C)
                     size_t B, size_t T, size_t C) {
#pragma omp parallel for schedule(static)
  for (size_t bt = 0; bt < B * T; ++bt) {
    const size_t t = bt % T;
    const float* wte_row = wte + static_cast<size_t>(tokens[bt]) * C;  // (C)
    const float* wpe_row = wpe + t * C;                                // (C)
    float* out_row = out + bt * C;                                     // (C)
#pragma omp simd
    for (size_t c = 0; c < C; ++c) out_row[c] = wte_row[c] + wpe_row[c];
  }
}

void encoder_backward(float* dwte,            // (Vp, C) +=
                      float* dwpe,            // (maxT, C) +=
                      const float* dout,      // (B, T, C)
                      const int32_t* tokens,  // (B, T)
                      size_t B, size_t T, size_t C) {
  // 64 floats = 4 cache lines per row and slice: long enough to vectorise, and C=768 gives 12
  // slices to share between threads.
  constexpr size_t kSlice = 64;
  const size_t slices = (C + kSlice - 1) / kSlice;
#pragma omp parallel for schedule(static)
  for (size_t s = 0; s < slices; ++s) {
    const size_t c0 = s * kSlice;
    const size_t width = C - c0 < kSlice ? C - c0 : kSlice;
    for (size_t bt = 0; bt < B * T; ++bt) {
      const size_t t = bt % T;
      const float* dout_row = dout + bt * C + c0;                         // (width)
      float* dwte_row = dwte + static_cast<size_t>(tokens[bt]) * C + c0;  // (width)
      float* dwpe_row = dwpe + t * C + c0;                                // (width)
#pragma omp simd
      for (size_t c = 0; c < width; ++c) {
        dwte_row[c] += dout_row[c];
        dwpe_row[c] += dout_row[c];
      }
    }
  }
}

}  // namespace tierzero::kernels::cpu
