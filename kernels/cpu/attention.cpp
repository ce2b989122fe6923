// The reference attention on the CPU, forward and backward, causal, keeping the softmax
// probabilities (B, NH, T, T) (after llm.c's CPU version; the model runs the tiled kernel,
// flash_attention.cpp, and the tests hold it to this one). One kernel serves GPT-2's [q | k | v]
// rows and the Llama family's grouped layout (kernels.hpp), with grouped kv heads: HeadLayout
// says where a head's q, k and v sit. The softmax backward uses the O(T) form
// datt_pre = att * (datt - sum(att * datt)); the backward runs one (batch, kv group) pair per
// task, so a group's k and v gradients, summed over its query heads, have a single writer.
#include <cmath>
#include <limits>
#include <string>

#include "cpu/vec_math.hpp"
#include "tierzero/core/error.hpp"
#include "tierzero/kernels/cpu_ops.hpp"

namespace tierzero::kernels::cpu {

namespace {

// Where query head h's q, and its kv head's k and v, sit in a row of qkv: GPT-2's [q | k | v]
// (rep 1) or the grouped layout (kernels.hpp).
struct HeadLayout {
  size_t rep, hs, row, C;
  bool grouped;
  HeadLayout(size_t NH, size_t KVH, size_t head_size, bool grouped_layout)
      : hs(head_size), C(NH * head_size), grouped(grouped_layout) {
    TZ_CHECK(NH > 0 && KVH > 0 && NH % KVH == 0,
             "attention: NH = " + std::to_string(NH) +
                 " is not a multiple of KVH = " + std::to_string(KVH),
             "the kv heads must divide the query heads");
    rep = NH / KVH;
    row = KVH * (rep + 2) * hs;
  }
  size_t q(size_t h) const { return grouped ? (h / rep * (rep + 2) + h % rep) * hs : h * hs; }
  size_t k(size_t h) const { return grouped ? (h / rep * (rep + 2) + rep) * hs : C + h / rep * hs; }
  size_t v(size_t h) const { return grouped ? k(h) + hs : 2 * C + h / rep * hs; }
};

void naive_forward(float* out, float* att, const float* qkv, size_t B, size_t T, size_t NH,
                   const HeadLayout& L) {
  const size_t hs = L.hs;
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

// One query head's backward over all positions: dq of the head, and its share of the group's
// dk and dv (the caller runs a group's heads one after another).
void head_backward(float* dqkv, float* datt, const float* dout, const float* qkv, const float* att,
                   size_t b, size_t h, size_t T, size_t NH, const HeadLayout& L) {
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

void naive_backward(float* dqkv, float* datt, const float* dout, const float* qkv, const float* att,
                    size_t B, size_t T, size_t NH, const HeadLayout& L) {
  const size_t KVH = NH / L.rep;
#pragma omp parallel for collapse(2) schedule(static)
  for (size_t b = 0; b < B; ++b)
    for (size_t g = 0; g < KVH; ++g)
      for (size_t j = 0; j < L.rep; ++j)
        head_backward(dqkv, datt, dout, qkv, att, b, g * L.rep + j, T, NH, L);
}

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
  naive_forward(out, att, qkv, B, T, NH, HeadLayout(NH, NH, head_size(C, NH), false));
}

void attention_backward(float* dqkv,        // (B, T, 3C) +=
                        float* datt,        // (B, NH, T, T) scratch
                        const float* dout,  // (B, T, C)
                        const float* qkv,   // (B, T, 3C)
                        const float* att,   // (B, NH, T, T)
                        size_t B, size_t T, size_t C, size_t NH) {
  naive_backward(dqkv, datt, dout, qkv, att, B, T, NH, HeadLayout(NH, NH, head_size(C, NH), false));
}

void gqa_attention_forward(float* out,        // (B, T, NH hs)
                           float* att,        // (B, NH, T, T)
                           const float* qkv,  // (B, T, KVH (rep + 2) hs)
                           size_t B, size_t T, size_t NH, size_t KVH, size_t hs) {
  naive_forward(out, att, qkv, B, T, NH, HeadLayout(NH, KVH, hs, true));
}

void gqa_attention_backward(float* dqkv,        // (B, T, KVH (rep + 2) hs) +=
                            float* datt,        // (B, NH, T, T) scratch
                            const float* dout,  // (B, T, NH hs)
                            const float* qkv,   // (B, T, KVH (rep + 2) hs)
                            const float* att,   // (B, NH, T, T)
                            size_t B, size_t T, size_t NH, size_t KVH, size_t hs) {
  naive_backward(dqkv, datt, dout, qkv, att, B, T, NH, HeadLayout(NH, KVH, hs, true));
}

}  // namespace tierzero::kernels::cpu
