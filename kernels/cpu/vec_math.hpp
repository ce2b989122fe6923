// Vectorisable exp for the CPU kernels (softmax, attention, GELU's tanh).
// glibc's expf/tanhf only get SIMD variants under -ffast-math, so a loop calling them runs one
// element at a time; softmax over a 50k vocabulary and GELU over (B,T,4C) would then cost a large
// share of a training step. This is the Cephes expf polynomial with branch-free range reduction,
// which GCC and Clang vectorise inside `omp simd` loops; its error is about 1 ulp (max relative
// error 8.5e-8 over [-87, 88], checked exhaustively against double exp).
#pragma once

#include <bit>
#include <cstdint>

namespace tierzero::kernels::cpu {

// e^x for finite x; returns 0 below -87 (where expf is denormal or 0) and e^88 above 88.
inline float exp_approx(float x) {
  // Ternaries rather than std::fmin/fmax: GCC does not vectorise the IEEE min/max calls.
  float xc = x < -87.0f ? -87.0f : x;
  xc = xc > 88.0f ? 88.0f : xc;
  // x = n ln2 + r with |r| <= ln2/2; adding 1.5*2^23 rounds to the nearest integer without a
  // rounding-mode dependent instruction.
  const float shifted = xc * 1.44269504088896341f + 12582912.0f;
  const float n = shifted - 12582912.0f;
  // ln2 split in two so that n * ln2_hi is exact.
  float r = xc - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float y = p * r * r + r + 1.0f;
  const int32_t bits = (static_cast<int32_t>(n) + 127) * (1 << 23);  // 2^n as a float
  const float result = y * std::bit_cast<float>(bits);
  return x < -87.0f ? 0.0f : result;
}

}  // namespace tierzero::kernels::cpu
