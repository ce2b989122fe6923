// Rotary position embedding (Llama, Hugging Face's rotate_half form) on the CPU, and the rotary
// frequencies every backend shares. The angles' cosines and sines are computed once per position
// and reused over the batch and the heads.
#include <cmath>
#include <vector>

#include "cpu/storage16.hpp"
#include "tierzero/kernels/cpu_ops.hpp"
#include "tierzero/kernels/kernels.hpp"

namespace tierzero::kernels {

void rope_inv_freq(float* inv_freq, size_t hs, const RopeParams& p) {
  const size_t half = hs / 2;
  constexpr float kTwoPi = 6.283185307179586f;
  const float low_wavelen = p.original_max / p.low_freq_factor;
  const float high_wavelen = p.original_max / p.high_freq_factor;
  for (size_t i = 0; i < half; ++i) {
    // As Hugging Face: 1 / theta ** (arange(0, hs, 2).float() / hs), in fp32.
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(hs);
    float f = 1.0f / std::pow(p.theta, exponent);
    if (p.llama3) {
      const float wavelen = kTwoPi / f;
      if (wavelen > low_wavelen) {
        f = f / p.factor;
      } else if (!(wavelen < high_wavelen)) {  // the band between: interpolate
        const float smooth = (p.original_max / wavelen - p.low_freq_factor) /
                             (p.high_freq_factor - p.low_freq_factor);
        f = (1.0f - smooth) * f / p.factor + smooth * f;
      }
    }
    inv_freq[i] = f;
  }
}

namespace cpu {

void rope_apply(float* x,  // (B, T, blocks, block_heads, hs)
                size_t B, size_t T, size_t blocks, size_t block_heads, size_t rotated_heads,
                size_t hs, size_t pos0, const RopeParams& p, bool inverse) {
  const size_t half = hs / 2;
  std::vector<float> inv_freq(half);
  rope_inv_freq(inv_freq.data(), hs, p);
  std::vector<float> cos_sin(T * 2 * half);  // (T, 2, half)
  for (size_t t = 0; t < T; ++t)
    for (size_t i = 0; i < half; ++i) {
      const float angle = static_cast<float>(pos0 + t) * inv_freq[i];
      cos_sin[t * 2 * half + i] = std::cos(angle);
      cos_sin[t * 2 * half + half + i] = inverse ? -std::sin(angle) : std::sin(angle);
    }
  const size_t row = blocks * block_heads * hs;
#pragma omp parallel for collapse(2) schedule(static)
  for (size_t b = 0; b < B; ++b)
    for (size_t t = 0; t < T; ++t) {
      const float* c = cos_sin.data() + t * 2 * half;  // (half)
      const float* s = c + half;                       // (half)
      for (size_t g = 0; g < blocks; ++g)
        for (size_t h = 0; h < rotated_heads; ++h) {
          float* head = x + (b * T + t) * row + (g * block_heads + h) * hs;  // (hs)
#pragma omp simd
          for (size_t i = 0; i < half; ++i) {
            const float x1 = head[i], x2 = head[half + i];
            head[i] = x1 * c[i] - x2 * s[i];
            head[half + i] = x2 * c[i] + x1 * s[i];
          }
        }
    }
}

// Widened whole, turned, rounded back: an unrotated head's values round to their own bits.
void rope16_apply(void* x, DType type, size_t B, size_t T, size_t blocks, size_t block_heads,
                  size_t rotated_heads, size_t hs, size_t pos0, const RopeParams& p, bool inverse) {
  check_16bit_types(inverse ? "rope16_backward" : "rope16_forward", type, type);
  const size_t n = B * T * blocks * block_heads * hs;
  std::vector<float> wide = widened(x, type, n);  // (B, T, blocks, block_heads, hs)
  rope_apply(wide.data(), B, T, blocks, block_heads, rotated_heads, hs, pos0, p, inverse);
  convert_from_f32(x, type, wide.data(), n);
}

}  // namespace cpu
}  // namespace tierzero::kernels
