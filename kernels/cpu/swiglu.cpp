// SwiGLU (Llama's MLP activation), forward and backward, on the CPU: each row of the input holds
// the gate's H features, then the up projection's H. The backward writes its gradient whole: the
// MLP's input-gradient buffer has this one term, so nothing fills it first.
#include <vector>

#include "cpu/storage16.hpp"
#include "cpu/vec_math.hpp"
#include "tierzero/kernels/cpu_ops.hpp"
#include "tierzero/kernels/kernels.hpp"

namespace tierzero::kernels::cpu {

void swiglu_forward(float* out,        // (N, H)
                    const float* inp,  // (N, 2H)
                    size_t N, size_t H) {
#pragma omp parallel for schedule(static)
  for (size_t n = 0; n < N; ++n) {
    const float* gate = inp + n * 2 * H;  // (H)
    const float* up = gate + H;           // (H)
    float* y = out + n * H;               // (H)
#pragma omp simd
    for (size_t i = 0; i < H; ++i) {
      const float g = gate[i];
      y[i] = g / (1.0f + exp_approx(-g)) * up[i];
    }
  }
}

void swiglu_backward(float* dinp,        // (N, 2H) written whole
                     const float* inp,   // (N, 2H)
                     const float* dout,  // (N, H)
                     size_t N, size_t H) {
#pragma omp parallel for schedule(static)
  for (size_t n = 0; n < N; ++n) {
    const float* gate = inp + n * 2 * H;  // (H)
    const float* up = gate + H;           // (H)
    const float* dy = dout + n * H;       // (H)
    float* dgate = dinp + n * 2 * H;      // (H)
    float* dup = dgate + H;               // (H)
#pragma omp simd
    for (size_t i = 0; i < H; ++i) {
      const float g = gate[i];
      const float sig = 1.0f / (1.0f + exp_approx(-g));
      const float silu = g * sig;
      // silu'(g) = sig (1 + g (1 - sig))
      dgate[i] = dy[i] * up[i] * sig * (1.0f + g * (1.0f - sig));
      dup[i] = dy[i] * silu;
    }
  }
}

// The 16-bit forms: the fp32 ops on widened copies, each output rounded once.
void swiglu16_forward(void* out, const void* inp, DType type, size_t N, size_t H) {
  check_16bit_types("swiglu16_forward", type, type);
  std::vector<float> y(N * H);  // (N, H)
  swiglu_forward(y.data(), widened(inp, type, N * 2 * H).data(), N, H);
  convert_from_f32(out, type, y.data(), N * H);
}

void swiglu16_backward(void* dinp, const void* inp, const void* dout, DType type, size_t N,
                       size_t H) {
  check_16bit_types("swiglu16_backward", type, type);
  std::vector<float> d(N * 2 * H);  // (N, 2H)
  swiglu_backward(d.data(), widened(inp, type, N * 2 * H).data(), widened(dout, type, N * H).data(),
                  N, H);
  convert_from_f32(dinp, type, d.data(), N * 2 * H);
}

}  // namespace tierzero::kernels::cpu
