// Row helpers the CPU's norms and 16-bit ops share: 16-bit operands widened to fp32 for the fp32
// kernels, rows computed in fp32 and rounded once into a 16-bit output, and the residual add of
// the fused norms. Internal to kernels/cpu.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "tierzero/core/dtype.hpp"

namespace tierzero::kernels::cpu {

// n elements of type widened to fp32; empty for a null x.
inline std::vector<float> widened(const void* x, DType type, size_t n) {
  std::vector<float> out(x != nullptr ? n : 0);  // (n)
  if (!out.empty()) tierzero::convert_to_f32(out.data(), x, type, n);
  return out;
}

// r (C) = a (C) + b (C): residual_forward's one fp32 add per element, for one row of a fused
// residual + norm (inline: a nested parallel region per row would cost more than the add).
inline void residual_row(float* r, const float* a, const float* b, size_t C) {
#pragma omp simd
  for (size_t c = 0; c < C; ++c) r[c] = a[c] + b[c];
}

// out (N, C) of a 16-bit type, row n computed by row(n, y) into an fp32 row y (C) of the calling
// thread and rounded into out: rows split among the OpenMP threads as the fp32 kernels split them.
template <typename Row>
void rows_rounded(void* out, DType type, size_t N, size_t C, const Row& row) {
#pragma omp parallel
  {
    std::vector<float> y(C);  // (C)
#pragma omp for schedule(static)
    for (size_t n = 0; n < N; ++n) {
      row(n, y.data());
      tierzero::convert_from_f32(static_cast<uint16_t*>(out) + n * C, type, y.data(), C);
    }
  }
}

}  // namespace tierzero::kernels::cpu
