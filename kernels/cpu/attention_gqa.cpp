// Causal grouped-query attention (Llama), forward and backward, on the CPU, over the grouped
// q, k, v layout (kernels.hpp): each row holds KVH groups of rep = NH / KVH query heads, then
// the group's k head and v head. Multi-head attention is the case rep = 1. The arithmetic is the
// multi-head kernel's (attention.cpp); the backward runs one (batch, kv group) pair per task, so
// the group's k and v gradients, summed over its query heads, have a single writer.
#include <cmath>
#include <limits>
#include <string>

#include "cpu/vec_math.hpp"
#include "tierzero/core/error.hpp"
#include "tierzero/kernels/cpu_ops.hpp"

namespace tierzero::kernels::cpu {

namespace {

// Where query head h's q, and its group's k and v, sit in a row of the grouped layout.
struct GroupedLayout {
  size_t rep, hs, row;
  GroupedLayout(size_t NH, size_t KVH, size_t head_size) : hs(head_size) {
    TZ_CHECK(NH > 0 && KVH > 0 && NH % KVH == 0,
             "attention: NH = " + std::to_string(NH) +
                 " is not a multiple of KVH = " + std::to_string(KVH),
             "the kv heads must divide the query heads");
    rep = NH / KVH;
    row = KVH * (rep + 2) * hs;
  }
  size_t q(size_t h) const { return (h / rep * (rep + 2) + h % rep) * hs; }
  size_t k(size_t h) const { return (h / rep * (rep + 2) + rep) * hs; }
  size_t v(size_t h) const { return k(h) + hs; }
};

}  // namespace

void gqa_attention_forward(float* out,        // (B, T, NH hs)
                           float* att,        // (B, NH, T, T)
                           const float* qkv,  // (B, T, KVH (rep + 2) hs)
                           size_t B, size_t T, size_t NH, size_t KVH, size_t hs) {
  const GroupedLayout L(NH, KVH, hs);
  const size_t C = NH * hs;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
#pragma omp parallel for collapse(3) schedule(static, 1)
  for (size_t b = 0; b < B; ++b) {
    for (size_t t = 0; t < T; ++t) {
      for (size_t h = 0; h < NH; ++h) {
        const float* q = qkv + (b * T + t) * L.row + L.q(h);  // (hs)
        float* att_row = att + ((b * NH + h) * T + t) * T;    // (T)
        float* out_h = out + (b * T + t) * C + h * hs;        // (hs)

        float max_score = -std::numeric_limits<float>::infinity();
        for (size_t t2 = 0; t2 <= t; ++t2) {
          const float* k = qkv + (b * T + t2) * L.row + L.k(h);  // (hs)
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
          const float* v = qkv + (b * T + t2) * L.row + L.v(h);  // (hs)
          const float a = att_row[t2];
#pragma omp simd
          for (size_t i = 0; i < hs; ++i) out_h[i] += a * v[i];
        }
      }
    }
  }
}

namespace {

// One query head's backward over all positions: dq of the head, and its share of the group's
// dk and dv (the caller runs a group's heads one after another).
void head_backward(float* dqkv, float* datt, const float* dout, const float* qkv, const float* att,
                   size_t b, size_t h, size_t T, size_t NH, const GroupedLayout& L) {
  const size_t hs = L.hs, C = NH * hs;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  for (size_t t = 0; t < T; ++t) {
    const float* att_row = att + ((b * NH + h) * T + t) * T;  // (T)
    float* datt_row = datt + ((b * NH + h) * T + t) * T;      // (T)
    const float* dout_h = dout + (b * T + t) * C + h * hs;    // (hs)
    const float* q = qkv + (b * T + t) * L.row + L.q(h);      // (hs)
    float* dq = dqkv + (b * T + t) * L.row + L.q(h);          // (hs)

    // out = att @ v: datt = dout . v, dv += att * dout
    for (size_t t2 = 0; t2 <= t; ++t2) {
      const float* v = qkv + (b * T + t2) * L.row + L.v(h);  // (hs)
      float* dv = dqkv + (b * T + t2) * L.row + L.v(h);      // (hs)
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
      const float* k = qkv + (b * T + t2) * L.row + L.k(h);  // (hs)
      float* dk = dqkv + (b * T + t2) * L.row + L.k(h);      // (hs)
      const float g = datt_row[t2];
#pragma omp simd
      for (size_t i = 0; i < hs; ++i) {
        dq[i] += g * k[i];
        dk[i] += g * q[i];
      }
    }
  }
}

}  // namespace

void gqa_attention_backward(float* dqkv,        // (B, T, KVH (rep + 2) hs) +=
                            float* datt,        // (B, NH, T, T) scratch
                            const float* dout,  // (B, T, NH hs)
                            const float* qkv,   // (B, T, KVH (rep + 2) hs)
                            const float* att,   // (B, NH, T, T)
                            size_t B, size_t T, size_t NH, size_t KVH, size_t hs) {
  const GroupedLayout L(NH, KVH, hs);
#pragma omp parallel for collapse(2) schedule(static)
  for (size_t b = 0; b < B; ++b)
    for (size_t g = 0; g < KVH; ++g)
      for (size_t j = 0; j < L.rep; ++j)
        head_backward(dqkv, datt, dout, qkv, att, b, g * L.rep + j, T, NH, L);
}

}  // namespace tierzero::kernels::cpu
