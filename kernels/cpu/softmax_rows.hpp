// Row reductions shared by the CPU cross-entropy kernels (softmax_xent.cpp over the whole
// vocabulary, vocab_parallel.cpp over one rank's columns), so both reduce a row the same way:
// the max in 16 independent lanes, and the sum of exponentials in fp32 blocks of kSumBlock added
// up in double (GCC will not vectorise exp together with a widening double sum in one loop).
#pragma once

#include <cstddef>
#include <limits>

#include "cpu/vec_math.hpp"

namespace tierzero::kernels::cpu {

inline constexpr size_t kSumBlock = 256;

// Max over x (n); -inf when n is 0. Kept in 16 independent lanes: a compare-select is a vector
// max instruction, but without -ffast-math Clang will not turn a scalar max reduction into one
// (NaN ordering).
inline float row_max(const float* x, size_t n) {  // x (n)
  constexpr size_t kLanes = 16;
  float lanes[kLanes];  // (kLanes) running maxima
  for (float& lane : lanes) lane = -std::numeric_limits<float>::infinity();
  size_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
#pragma omp simd
    for (size_t j = 0; j < kLanes; ++j) lanes[j] = x[i + j] > lanes[j] ? x[i + j] : lanes[j];
  }
  for (; i < n; ++i) lanes[0] = x[i] > lanes[0] ? x[i] : lanes[0];
  float m = lanes[0];
  for (size_t j = 1; j < kLanes; ++j) m = lanes[j] > m ? lanes[j] : m;
  return m;
}

// Sum of exp(x[i] - m) over x (n); 0 when n is 0.
inline double row_exp_sum(const float* x, size_t n, float m) {  // x (n)
  double sum = 0.0;
  for (size_t begin = 0; begin < n; begin += kSumBlock) {
    const size_t end = n - begin < kSumBlock ? n : begin + kSumBlock;
    float block_sum = 0.0f;
#pragma omp simd reduction(+ : block_sum)
    for (size_t i = begin; i < end; ++i) block_sum += exp_approx(x[i] - m);
    sum += static_cast<double>(block_sum);
  }
  return sum;
}

}  // namespace tierzero::kernels::cpu
