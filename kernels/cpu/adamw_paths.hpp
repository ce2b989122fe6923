// The inside of the CPU AdamW, shared by its instruction-set paths: the per-call scalars and the
// element formula in one fixed order of operations. adamw.cpp computes the scalars, picks a path
// and splits the work over OpenMP threads; adamw_simd.cpp holds the AVX2 and AVX-512 bodies.
// Every path evaluates exactly this formula, one IEEE operation at a time (both files are compiled
// with -ffp-contract=off, and sqrt and division are correctly rounded in every instruction set),
// so all paths agree bit for bit and a step does not depend on which CPU ran it.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace tierzero::kernels::cpu::adamw_detail {

// Per-call constants, rounded to fp32 once from double as PyTorch does from Python floats.
struct Scalars {
  float decay;         // 1 - lr * weight_decay
  float step_size;     // lr / (1 - beta1^t)
  float inv_sqrt_bc2;  // 1 / sqrt(1 - beta2^t)
  float b1, b2, one_minus_b1, one_minus_b2;
  float eps;
  float grad_scale;
};

// The five (six with the copy) streams of one call; every array is (n) of the call.
struct Streams {
  float* param;        // (n)
  float* m;            // (n)
  float* v;            // (n)
  const float* grad;   // (n)
  uint16_t* bf16_out;  // (n), or null: no working copy
};

// bf16 bits of f, rounded to nearest even, NaN kept a (quiet) NaN: the rule of
// tierzero::float_to_bf16_bits, written without a branch so that loops over it vectorise.
inline uint16_t bf16_bits_rne(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  const uint32_t quiet_nan = (u >> 16) | 0x0040u;
  return static_cast<uint16_t>((u & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded);
}

// Elements [begin, end) in plain C++: the scalar path, and the tails of the vector paths.
// Copy is a template argument so that neither loop carries a test the vectoriser must keep.
template <bool Copy>
inline void update_range_plain(const Streams& s, const Scalars& c, size_t begin, size_t end) {
  float* param = s.param;
  float* m = s.m;
  float* v = s.v;
  const float* grad = s.grad;
  uint16_t* out = s.bf16_out;
#pragma omp simd
  for (size_t i = begin; i < end; ++i) {
    const float g = grad[i] * c.grad_scale;
    const float mi = c.b1 * m[i] + c.one_minus_b1 * g;
    const float vi = c.b2 * v[i] + c.one_minus_b2 * g * g;
    const float denom = std::sqrt(vi) * c.inv_sqrt_bc2 + c.eps;      // sqrt(v_hat) + eps
    const float pi = param[i] * c.decay - c.step_size * mi / denom;  // step_size * m = lr * m_hat
    param[i] = pi;
    m[i] = mi;
    v[i] = vi;
    if constexpr (Copy) out[i] = bf16_bits_rne(pi);
  }
}

inline void update_range(const Streams& s, const Scalars& c, size_t begin, size_t end) {
  if (s.bf16_out != nullptr)
    update_range_plain<true>(s, c, begin, end);
  else
    update_range_plain<false>(s, c, begin, end);
}

// The vector bodies (adamw_simd.cpp); callable only where the CPU has the instruction set.
void update_range_avx2(const Streams& s, const Scalars& c, size_t begin, size_t end);
void update_range_avx512(const Streams& s, const Scalars& c, size_t begin, size_t end);

}  // namespace tierzero::kernels::cpu::adamw_detail
