// Causal multi-head self-attention, forward and backward, on the CPU (after llm.c's CPU version).
// Only the softmax probabilities are kept (no pre-softmax buffer), and the softmax backward uses
// the O(T) form datt_pre = att * (datt - sum(att * datt)) instead of llm.c's O(T^2) Jacobian loop.
// Backward runs one (batch, head) pair per task: a pair owns its head's q, k and v channels of
// dqkv for every position, so threads never write the same element.
#include <cmath>
#include <limits>
#include <string>

#include "cpu/vec_math.hpp"
#include "tierzero/core/error.hpp"
#include "tierzero/kernels/cpu_ops.hpp"

namespace tierzero::kernels::cpu {

namespace {

size_t head_size(size_t C, size_t NH) {
  TZ_CHECK(
      NH > 0 && C % NH == 0,
      "attention: C = " + std::to_string(C) + " is not divisible by NH = " + std::to_string(NH),
      "the number of heads must divide the channel count");
  return C / NH;
}

}  // namespace

void attention_forward(float* out,        // (B, T, C)
                       float* att,        // (B, NH, T, T)
                       const float* qkv,  // (B, T, 3C)
                       size_t B, size_t T, size_t C, size_t NH) {
  const size_t hs = head_size(C, NH);
  const size_t C3 = 3 * C;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  // Round-robin over (b, t, h): row t costs O(t), so contiguous blocks of t would load the thread
  // holding the last positions most.
#pragma omp parallel for collapse(3) schedule(static, 1)
  for (size_t b = 0; b < B; ++b) {
    for (size_t t = 0; t < T; ++t) {
      for (size_t h = 0; h < NH; ++h) {
        const float* q = qkv + (b * T + t) * C3 + h * hs;   // (hs)
        float* att_row = att + ((b * NH + h) * T + t) * T;  // (T)
        float* out_h = out + (b * T + t) * C + h * hs;      // (hs)

        float max_score = -std::numeric_limits<float>::infinity();
        for (size_t t2 = 0; t2 <= t; ++t2) {
          const float* k = qkv + (b * T + t2) * C3 + C + h * hs;  // (hs)
          float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
          for (size_t i = 0; i < hs; ++i) dot += q[i] * k[i];
          dot *= scale;
          att_row[t2] = dot;
          max_score = dot > max_score ? dot : max_score;
        }
        float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
        for (size_t t2 = 0; t2 <= t; ++t2) {
          const float e = exp_approx(att_row[t2] - max_score);
          att_row[t2] = e;
          sum += e;
        }
        const float inv_sum = 1.0f / sum;
#pragma omp simd
        for (size_t t2 = 0; t2 <= t; ++t2) att_row[t2] *= inv_sum;
        for (size_t t2 = t + 1; t2 < T; ++t2) att_row[t2] = 0.0f;

#pragma omp simd
        for (size_t i = 0; i < hs; ++i) out_h[i] = 0.0f;
        for (size_t t2 = 0; t2 <= t; ++t2) {
          const float* v = qkv + (b * T + t2) * C3 + 2 * C + h * hs;  // (hs)
          const float a = att_row[t2];
#pragma omp simd
          for (size_t i = 0; i < hs; ++i) out_h[i] += a * v[i];
        }
      }
    }
  }
}

void attention_backward(float* dqkv,        // (B, T, 3C) +=
                        float* datt,        // (B, NH, T, T) scratch
                        const float* dout,  // (B, T, C)
                        const float* qkv,   // (B, T, 3C)
                        const float* att,   // (B, NH, T, T)
                        size_t B, size_t T, size_t C, size_t NH) {
  const size_t hs = head_size(C, NH);
  const size_t C3 = 3 * C;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
#pragma omp parallel for collapse(2) schedule(static)
  for (size_t b = 0; b < B; ++b) {
    for (size_t h = 0; h < NH; ++h) {
      for (size_t t = 0; t < T; ++t) {
        const float* att_row = att + ((b * NH + h) * T + t) * T;  // (T)
        float* datt_row = datt + ((b * NH + h) * T + t) * T;      // (T)
        const float* dout_h = dout + (b * T + t) * C + h * hs;    // (hs)
        const float* q = qkv + (b * T + t) * C3 + h * hs;         // (hs)
        float* dq = dqkv + (b * T + t) * C3 + h * hs;             // (hs)

        // out = att @ v: datt = dout . v, dv += att * dout
        for (size_t t2 = 0; t2 <= t; ++t2) {
          const float* v = qkv + (b * T + t2) * C3 + 2 * C + h * hs;  // (hs)
          float* dv = dqkv + (b * T + t2) * C3 + 2 * C + h * hs;      // (hs)
          const float a = att_row[t2];
          float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
          for (size_t i = 0; i < hs; ++i) {
            dot += v[i] * dout_h[i];
            dv[i] += a * dout_h[i];
          }
          datt_row[t2] = dot;
        }

        // Softmax backward; the 1/sqrt(hs) of the scores is folded in here.
        float weighted = 0.0f;
#pragma omp simd reduction(+ : weighted)
        for (size_t t2 = 0; t2 <= t; ++t2) weighted += att_row[t2] * datt_row[t2];
#pragma omp simd
        for (size_t t2 = 0; t2 <= t; ++t2)
          datt_row[t2] = att_row[t2] * (datt_row[t2] - weighted) * scale;

        // scores = q . k: dq += dscore * k, dk += dscore * q
        for (size_t t2 = 0; t2 <= t; ++t2) {
          const float* k = qkv + (b * T + t2) * C3 + C + h * hs;  // (hs)
          float* dk = dqkv + (b * T + t2) * C3 + C + h * hs;      // (hs)
          const float g = datt_row[t2];
#pragma omp simd
          for (size_t i = 0; i < hs; ++i) {
            dq[i] += g * k[i];
            dk[i] += g * q[i];
          }
        }
      }
    }
  }
}

}  // namespace tierzero::kernels::cpu
