// RMSNorm (Llama) over the last axis, forward and backward, on the CPU. Like the layernorm, row
// sums are taken in double and the weight gradient is summed per thread, then in thread order.
#include <omp.h>

#include <cmath>
#include <vector>

#include "cpu/storage16.hpp"
#include "tierzero/kernels/cpu_ops.hpp"

namespace tierzero::kernels::cpu {

namespace {

// One row: y (C) = weight * (x * rstd), *rstd = 1 / sqrt(mean(x^2) + eps). Both forwards call
// this one function (never inlined nor cloned, so vectorised once), so the fused residual + RMSNorm
// gives the bits of the add followed by rmsnorm_forward.
[[gnu::noipa]] void rmsnorm_row(float* y, float* rstd, const float* x, const float* weight,
                                size_t C, float eps) {
  double sq = 0.0;
#pragma omp simd reduction(+ : sq)
  for (size_t c = 0; c < C; ++c) sq += static_cast<double>(x[c]) * static_cast<double>(x[c]);
  const double inv_c = 1.0 / static_cast<double>(C);
  const auto s = static_cast<float>(1.0 / std::sqrt(sq * inv_c + static_cast<double>(eps)));
  // (x * s) * w, in Hugging Face's order: the normalised value, then the gain.
#pragma omp simd
  for (size_t c = 0; c < C; ++c) y[c] = weight[c] * (x[c] * s);
  *rstd = s;
}

}  // namespace

void rmsnorm_forward(float* out,           // (N, C)
                     float* rstd,          // (N)
                     const float* inp,     // (N, C)
                     const float* weight,  // (C)
                     size_t N, size_t C, float eps) {
  if (C == 0) return;
#pragma omp parallel for schedule(static)
  for (size_t n = 0; n < N; ++n) rmsnorm_row(out + n * C, rstd + n, inp + n * C, weight, C, eps);
}

void fused_residual_rmsnorm_forward(float* residual,      // (N, C)
                                    float* out,           // (N, C)
                                    float* rstd,          // (N)
                                    const float* a,       // (N, C)
                                    const float* b,       // (N, C)
                                    const float* weight,  // (C)
                                    size_t N, size_t C, float eps) {
  if (C == 0) return;
#pragma omp parallel for schedule(static)
  for (size_t n = 0; n < N; ++n) {
    float* r = residual + n * C;  // (C)
    residual_row(r, a + n * C, b + n * C, C);
    rmsnorm_row(out + n * C, rstd + n, r, weight, C, eps);
  }
}

// The 16-bit forms: the fp32 rows above with the widened gain, each row rounded once.
void rmsnorm16_forward(void* out, float* rstd, const float* inp, const void* weight, DType type,
                       size_t N, size_t C, float eps) {
  check_16bit_types("rmsnorm16_forward", type, type);
  if (C == 0) return;
  const std::vector<float> w = widened(weight, type, C);  // (C)
  rows_rounded(out, type, N, C, [&](size_t n, float* y) {
    rmsnorm_row(y, rstd + n, inp + n * C, w.data(), C, eps);
  });
}

void fused_residual_rmsnorm16_forward(float* residual, void* out, float* rstd, const float* a,
                                      const float* b, const void* weight, DType type, size_t N,
                                      size_t C, float eps) {
  check_16bit_types("fused_residual_rmsnorm16_forward", type, type);
  if (C == 0) return;
  const std::vector<float> w = widened(weight, type, C);  // (C)
  rows_rounded(out, type, N, C, [&](size_t n, float* y) {
    float* r = residual + n * C;  // (C)
    residual_row(r, a + n * C, b + n * C, C);
    rmsnorm_row(y, rstd + n, r, w.data(), C, eps);
  });
}

void rmsnorm16_backward(float* dinp, void* dinp16, float* dweight, const float* dout,
                        const float* inp, const void* weight, const float* rstd, DType type,
                        size_t N, size_t C) {
  check_16bit_types("rmsnorm16_backward", type, type);
  rmsnorm_backward(dinp, dweight, dout, inp, widened(weight, type, C).data(), rstd, N, C);
  if (dinp16 != nullptr) convert_from_f32(dinp16, type, dinp, N * C);  // as layernorm16's
}

void rmsnorm_backward(float* dinp,          // (N, C) +=
                      float* dweight,       // (C) +=
                      const float* dout,    // (N, C)
                      const float* inp,     // (N, C)
                      const float* weight,  // (C)
                      const float* rstd,    // (N)
                      size_t N, size_t C) {
  if (C == 0) return;
  const double inv_c = 1.0 / static_cast<double>(C);
  const size_t max_threads = static_cast<size_t>(omp_get_max_threads());
  std::vector<float> partial(max_threads * C, 0.0f);  // (threads, C): dweight
  size_t used_threads = 1;
#pragma omp parallel
  {
    const size_t tid = static_cast<size_t>(omp_get_thread_num());
#pragma omp single
    used_threads = static_cast<size_t>(omp_get_num_threads());
    float* dw_part = partial.data() + tid * C;  // (C)
#pragma omp for schedule(static)
    for (size_t n = 0; n < N; ++n) {
      const float* x = inp + n * C;    // (C)
      const float* dy = dout + n * C;  // (C)
      float* dx = dinp + n * C;        // (C)
      const float s = rstd[n];
      // y = w x s, s = (mean(x^2) + eps)^-1/2: dx = s (dnorm - x s^2 mean(dnorm x)), dnorm = dy w
      double dot = 0.0;
#pragma omp simd reduction(+ : dot)
      for (size_t c = 0; c < C; ++c) dot += static_cast<double>(dy[c] * weight[c] * x[c]);
      const auto k = static_cast<float>(dot * inv_c) * s * s;
#pragma omp simd
      for (size_t c = 0; c < C; ++c) {
        dw_part[c] += dy[c] * (x[c] * s);
        dx[c] += s * (dy[c] * weight[c] - x[c] * k);
      }
    }
#pragma omp for schedule(static)
    for (size_t c = 0; c < C; ++c) {
      float dw = 0.0f;
      for (size_t t = 0; t < used_threads; ++t) dw += partial[t * C + c];
      dweight[c] += dw;
    }
  }
}

}  // namespace tierzero::kernels::cpu
