// What the CPU's 16-bit ops (matmul16.cpp, the 16-bit norms) share: 16-bit operands widened to
// fp32 for the fp32 kernels, and rows computed in fp32 and rounded once into a 16-bit output.
// Internal to kernels/cpu.
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
