// The AVX2 and AVX-512 bodies of the CPU AdamW, compiled for their instruction set with GCC's
// target attribute so that one binary carries both and adamw.cpp picks one at run time.
// Each is the formula of adamw_paths.hpp with intrinsics, operation for operation (no FMA:
// this file is compiled with -ffp-contract=off and the intrinsics name separate multiplies and
// adds), so the paths agree bit for bit. The bf16 copy is rounded in registers in the same pass,
// which saves re-reading the 4-byte master param to produce the 2-byte working one.
// Loads and stores are unaligned: callers pass any float pointer, and on aligned data the
// unaligned instructions cost the same. Each stream is prefetched 1 KiB ahead into L2: with two
// cores the bandwidth one core reaches is limited by the misses it keeps in flight, and the
// hardware prefetcher alone keeps fewer (about 5% faster on the Xeon VM of 2026-11-28, 64M
// parameters; prefetching past an array's end cannot fault).
// GCC 12 reports the AVX-512 intrinsics' deliberately undefined pass-through operands as
// maybe-uninitialized (GCC bug 105593, fixed in 13); nothing in this file reads one.
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ < 13
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include <cstdint>

#include "adamw_paths.hpp"

namespace tierzero::kernels::cpu::adamw_detail {

namespace {

// bf16 bits of 8 floats in the low 16 bits of each 32-bit lane (bf16_bits_rne, 8 at a time).
__attribute__((target("avx2"))) inline __m256i bf16_rne_avx2(__m256 x) {
  const __m256i u = _mm256_castps_si256(x);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  const __m256i bias = _mm256_add_epi32(_mm256_set1_epi32(0x7fff), lsb);
  const __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(u, bias), 16);
  const __m256i quiet_nan = _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x0040));
  // |u| <= 0x7fffffff, so the signed compare is the unsigned one of the scalar rule.
  const __m256i is_nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)),
                                            _mm256_set1_epi32(0x7f800000));
  return _mm256_blendv_epi8(rounded, quiet_nan, is_nan);
}

__attribute__((target("avx512f,avx512bw"))) inline __m512i bf16_rne_avx512(__m512 x) {
  const __m512i u = _mm512_castps_si512(x);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
  const __m512i bias = _mm512_add_epi32(_mm512_set1_epi32(0x7fff), lsb);
  const __m512i rounded = _mm512_srli_epi32(_mm512_add_epi32(u, bias), 16);
  const __m512i quiet_nan = _mm512_or_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x0040));
  const __mmask16 is_nan = _mm512_cmpgt_epi32_mask(
      _mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)), _mm512_set1_epi32(0x7f800000));
  return _mm512_mask_blend_epi32(is_nan, rounded, quiet_nan);
}

// 1 KiB (256 floats) ahead of element i, in each of the four streams read. The address is
// formed as an integer: past an array's end a pointer would be undefined, a prefetch is not.
constexpr uintptr_t kPrefetchBytes = 1024;
inline void prefetch_line(const float* p) {
  _mm_prefetch(reinterpret_cast<const char*>(reinterpret_cast<uintptr_t>(p) + kPrefetchBytes),
               _MM_HINT_T1);
}
inline void prefetch_ahead(const Streams& s, size_t i) {
  prefetch_line(s.grad + i);
  prefetch_line(s.m + i);
  prefetch_line(s.v + i);
  prefetch_line(s.param + i);
}

}  // namespace

__attribute__((target("avx2"))) void update_range_avx2(const Streams& s, const Scalars& c,
                                                       size_t begin, size_t end) {
  const __m256 grad_scale = _mm256_set1_ps(c.grad_scale);
  const __m256 b1 = _mm256_set1_ps(c.b1);
  const __m256 b2 = _mm256_set1_ps(c.b2);
  const __m256 one_minus_b1 = _mm256_set1_ps(c.one_minus_b1);
  const __m256 one_minus_b2 = _mm256_set1_ps(c.one_minus_b2);
  const __m256 inv_sqrt_bc2 = _mm256_set1_ps(c.inv_sqrt_bc2);
  const __m256 eps = _mm256_set1_ps(c.eps);
  const __m256 decay = _mm256_set1_ps(c.decay);
  const __m256 step_size = _mm256_set1_ps(c.step_size);
  constexpr size_t kLanes = 8;
  size_t i = begin;
  for (; i + kLanes <= end; i += kLanes) {
    if (i % 16 == 0) prefetch_ahead(s, i);  // one 64-byte line per stream
    const __m256 g = _mm256_mul_ps(_mm256_loadu_ps(s.grad + i), grad_scale);
    const __m256 mi =
        _mm256_add_ps(_mm256_mul_ps(b1, _mm256_loadu_ps(s.m + i)), _mm256_mul_ps(one_minus_b1, g));
    const __m256 vi = _mm256_add_ps(_mm256_mul_ps(b2, _mm256_loadu_ps(s.v + i)),
                                    _mm256_mul_ps(_mm256_mul_ps(one_minus_b2, g), g));
    const __m256 denom = _mm256_add_ps(_mm256_mul_ps(_mm256_sqrt_ps(vi), inv_sqrt_bc2), eps);
    const __m256 pi = _mm256_sub_ps(_mm256_mul_ps(_mm256_loadu_ps(s.param + i), decay),
                                    _mm256_div_ps(_mm256_mul_ps(step_size, mi), denom));
    _mm256_storeu_ps(s.param + i, pi);
    _mm256_storeu_ps(s.m + i, mi);
    _mm256_storeu_ps(s.v + i, vi);
    if (s.bf16_out != nullptr) {
      // Pack the 8 lanes to 16 bits (values are <= 0xffff, so unsigned saturation is exact);
      // packus works per 128-bit half, the permute brings the two halves' results together.
      const __m256i w = bf16_rne_avx2(pi);
      const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(w, w), 0x08);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(s.bf16_out + i), _mm256_castsi256_si128(packed));
    }
  }
  update_range(s, c, i, end);  // fewer than 8 left
}

__attribute__((target("avx512f,avx512bw"))) void update_range_avx512(const Streams& s,
                                                                     const Scalars& c, size_t begin,
                                                                     size_t end) {
  const __m512 grad_scale = _mm512_set1_ps(c.grad_scale);
  const __m512 b1 = _mm512_set1_ps(c.b1);
  const __m512 b2 = _mm512_set1_ps(c.b2);
  const __m512 one_minus_b1 = _mm512_set1_ps(c.one_minus_b1);
  const __m512 one_minus_b2 = _mm512_set1_ps(c.one_minus_b2);
  const __m512 inv_sqrt_bc2 = _mm512_set1_ps(c.inv_sqrt_bc2);
  const __m512 eps = _mm512_set1_ps(c.eps);
  const __m512 decay = _mm512_set1_ps(c.decay);
  const __m512 step_size = _mm512_set1_ps(c.step_size);
  constexpr size_t kLanes = 16;
  // The tail (fewer than 16) goes through the same code with a lane mask; masked-off lanes load
  // zeros, compute something harmless and are neither stored nor able to fault.
  for (size_t i = begin; i < end; i += kLanes) {
    const size_t left = end - i;
    prefetch_ahead(s, i);
    const __mmask16 k =
        left >= kLanes ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << left) - 1u);
    const __m512 g = _mm512_mul_ps(_mm512_maskz_loadu_ps(k, s.grad + i), grad_scale);
    const __m512 mi = _mm512_add_ps(_mm512_mul_ps(b1, _mm512_maskz_loadu_ps(k, s.m + i)),
                                    _mm512_mul_ps(one_minus_b1, g));
    const __m512 vi = _mm512_add_ps(_mm512_mul_ps(b2, _mm512_maskz_loadu_ps(k, s.v + i)),
                                    _mm512_mul_ps(_mm512_mul_ps(one_minus_b2, g), g));
    const __m512 denom = _mm512_add_ps(_mm512_mul_ps(_mm512_sqrt_ps(vi), inv_sqrt_bc2), eps);
    const __m512 pi = _mm512_sub_ps(_mm512_mul_ps(_mm512_maskz_loadu_ps(k, s.param + i), decay),
                                    _mm512_div_ps(_mm512_mul_ps(step_size, mi), denom));
    _mm512_mask_storeu_ps(s.param + i, k, pi);
    _mm512_mask_storeu_ps(s.m + i, k, mi);
    _mm512_mask_storeu_ps(s.v + i, k, vi);
    if (s.bf16_out != nullptr)
      _mm512_mask_cvtepi32_storeu_epi16(s.bf16_out + i, k, bf16_rne_avx512(pi));
  }
}

}  // namespace tierzero::kernels::cpu::adamw_detail
