// LayerNorm over the last axis, forward and backward, on the CPU, and the forward fused with the
// residual add before it.
// Row statistics (mean, variance, the two backward means) are summed in double: it costs little
// next to the memory traffic and keeps fp32 rows of thousands of channels accurate. The weight
// and bias gradients sum over rows, so each thread accumulates its rows into a private (2, C)
// buffer and the buffers are then added in thread order: no atomics, reproducible results.
#include <omp.h>

#include <cmath>
#include <vector>

#include "cpu/storage16.hpp"
#include "tierzero/kernels/cpu_ops.hpp"

namespace tierzero::kernels::cpu {

namespace {
constexpr double kEps = 1e-5;

// One row: y (C) = layernorm(x (C)), its mean and rstd. Both forward kernels call this one
// function (never inlined nor cloned), so the fused residual + layernorm gives the bits of the
// unfused pair.
[[gnu::noipa]] void layernorm_row(float* y,             // (C)
                                  float* mean,          // (1)
                                  float* rstd,          // (1)
                                  const float* x,       // (C)
                                  const float* weight,  // (C)
                                  const float* bias,    // (C)
                                  size_t C) {
  const double inv_c = 1.0 / static_cast<double>(C);
  double sum = 0.0;
#pragma omp simd reduction(+ : sum)
  for (size_t c = 0; c < C; ++c) sum += static_cast<double>(x[c]);
  const double m = sum * inv_c;
  // Two-pass variance: the one-pass E[x^2] - m^2 cancels badly when |mean| >> std.
  double sq = 0.0;
#pragma omp simd reduction(+ : sq)
  for (size_t c = 0; c < C; ++c) {
    const double d = static_cast<double>(x[c]) - m;
    sq += d * d;
  }
  const double s = 1.0 / std::sqrt(sq * inv_c + kEps);
  const float mf = static_cast<float>(m);
  const float sf = static_cast<float>(s);
#pragma omp simd
  for (size_t c = 0; c < C; ++c) y[c] = (x[c] - mf) * sf * weight[c] + bias[c];
  *mean = mf;
  *rstd = sf;
}
}  // namespace

void layernorm_forward(float* out,           // (N, C)
                       float* mean,          // (N)
                       float* rstd,          // (N)
                       const float* inp,     // (N, C)
                       const float* weight,  // (C)
                       const float* bias,    // (C)
                       size_t N, size_t C) {
  if (C == 0) return;
#pragma omp parallel for schedule(static)
  for (size_t n = 0; n < N; ++n)
    layernorm_row(out + n * C, mean + n, rstd + n, inp + n * C, weight, bias, C);
}

// Row by row: the sum is written and then normalised while the row is still in cache, instead of
// a pass over all rows for the sum and another that reads it back for the layernorm. The add is
// residual_forward's (one fp32 add per element), the layernorm layernorm_forward's row.
void fused_residual_layernorm_forward(float* residual,      // (N, C)
                                      float* out,           // (N, C)
                                      float* mean,          // (N)
                                      float* rstd,          // (N)
                                      const float* a,       // (N, C)
                                      const float* b,       // (N, C)
                                      const float* weight,  // (C)
                                      const float* bias,    // (C)
                                      size_t N, size_t C) {
  if (C == 0) return;
#pragma omp parallel for schedule(static)
  for (size_t n = 0; n < N; ++n) {
    float* r = residual + n * C;  // (C)
    residual_row(r, a + n * C, b + n * C, C);
    layernorm_row(out + n * C, mean + n, rstd + n, r, weight, bias, C);
  }
}

// The 16-bit forms: the fp32 rows above with the widened parameters, each row rounded once.
void layernorm16_forward(void* out, float* mean, float* rstd, const float* inp, const void* weight,
                         const void* bias, DType type, size_t N, size_t C) {
  check_16bit_types("layernorm16_forward", type, type);
  if (C == 0) return;
  const std::vector<float> w = widened(weight, type, C), b = widened(bias, type, C);  // (C) each
  rows_rounded(out, type, N, C, [&](size_t n, float* y) {
    layernorm_row(y, mean + n, rstd + n, inp + n * C, w.data(), b.data(), C);
  });
}

void fused_residual_layernorm16_forward(float* residual, void* out, float* mean, float* rstd,
                                        const float* a, const float* b, const void* weight,
                                        const void* bias, DType type, size_t N, size_t C) {
  check_16bit_types("fused_residual_layernorm16_forward", type, type);
  if (C == 0) return;
  const std::vector<float> w = widened(weight, type, C), bb = widened(bias, type, C);  // (C)
  rows_rounded(out, type, N, C, [&](size_t n, float* y) {
    float* r = residual + n * C;  // (C)
    residual_row(r, a + n * C, b + n * C, C);
    layernorm_row(y, mean + n, rstd + n, r, w.data(), bb.data(), C);
  });
}

// The CPU rounds dinp after its pass (the same bits: each element is rounded from its final fp32
// value); the CUDA kernel writes the copy in the pass itself.
void layernorm16_backward(float* dinp, void* dinp16, float* dweight, float* dbias,
                          const float* dout, const float* inp, const void* weight,
                          const float* mean, const float* rstd, DType type, size_t N, size_t C) {
  check_16bit_types("layernorm16_backward", type, type);
  layernorm_backward(dinp, dweight, dbias, dout, inp, widened(weight, type, C).data(), mean, rstd,
                     N, C);
  if (dinp16 != nullptr) convert_from_f32(dinp16, type, dinp, N * C);
}

void layernorm_backward(float* dinp,          // (N, C) +=
                        float* dweight,       // (C) +=
                        float* dbias,         // (C) +=
                        const float* dout,    // (N, C)
                        const float* inp,     // (N, C)
                        const float* weight,  // (C)
                        const float* mean,    // (N)
                        const float* rstd,    // (N)
                        size_t N, size_t C) {
  if (C == 0) return;
  const double inv_c = 1.0 / static_cast<double>(C);
  const size_t max_threads = static_cast<size_t>(omp_get_max_threads());
  std::vector<float> partial(max_threads * 2 * C, 0.0f);  // (threads, 2, C): dweight, dbias
  size_t used_threads = 1;
#pragma omp parallel
  {
    const size_t tid = static_cast<size_t>(omp_get_thread_num());
#pragma omp single
    used_threads = static_cast<size_t>(omp_get_num_threads());
    float* dw_part = partial.data() + tid * 2 * C;  // (C)
    float* db_part = dw_part + C;                   // (C)
#pragma omp for schedule(static)
    for (size_t n = 0; n < N; ++n) {
      const float* x = inp + n * C;    // (C)
      const float* dy = dout + n * C;  // (C)
      float* dx = dinp + n * C;        // (C)
      const float m = mean[n];
      const float s = rstd[n];
      // dx = s * (dnorm - mean(dnorm) - norm * mean(dnorm * norm)), dnorm = dy * weight
      double dnorm_sum = 0.0;
      double dnorm_norm_sum = 0.0;
#pragma omp simd reduction(+ : dnorm_sum, dnorm_norm_sum)
      for (size_t c = 0; c < C; ++c) {
        const float norm = (x[c] - m) * s;
        const float dnorm = dy[c] * weight[c];
        dnorm_sum += static_cast<double>(dnorm);
        dnorm_norm_sum += static_cast<double>(dnorm * norm);
      }
      const float dnorm_mean = static_cast<float>(dnorm_sum * inv_c);
      const float dnorm_norm_mean = static_cast<float>(dnorm_norm_sum * inv_c);
#pragma omp simd
      for (size_t c = 0; c < C; ++c) {
        const float norm = (x[c] - m) * s;
        const float dnorm = dy[c] * weight[c];
        db_part[c] += dy[c];
        dw_part[c] += norm * dy[c];
        dx[c] += (dnorm - dnorm_mean - norm * dnorm_norm_mean) * s;
      }
    }
    // The implicit barrier of `omp for` above makes every partial complete here.
#pragma omp for schedule(static)
    for (size_t c = 0; c < C; ++c) {
      float dw = 0.0f;
      float db = 0.0f;
      for (size_t k = 0; k < used_threads; ++k) {
        dw += partial[k * 2 * C + c];
        db += partial[k * 2 * C + C + c];
      }
      dweight[c] += dw;
      dbias[c] += db;
    }
  }
}

}  // namespace tierzero::kernels::cpu
