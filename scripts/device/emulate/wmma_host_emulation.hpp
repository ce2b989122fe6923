// Host emulation of the bf16 type and the WMMA calls that kernels/cuda/flash_attention_tc.cu
// makes, on top of cuda_host_emulation.hpp: a fragment is a whole 16 x 16 tile held by every lane
// of the warp (the hardware spreads it over the lanes in a layout the kernels never see, so the
// results of loads, products and stores are the same), loads and stores are warp-collective
// (a warp barrier before and after; lane 0 writes a store), products accumulate in fp32 in k
// order (the hardware's order differs: the bits are not the GPU's, the indexing is what is
// checked), bf16 rounds to nearest even. Loads and stores check WMMA's rules: 32-byte aligned
// pointers, ldm a multiple of 16 bytes. Not part of the build.
#pragma once
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <type_traits>

#include "cuda_host_emulation.hpp"

struct __nv_bfloat16 {
  uint16_t bits;
};
inline __nv_bfloat16 __float2bfloat16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return {static_cast<uint16_t>((u >> 16) | 0x40u)};
  return {static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16)};
}
inline float __bfloat162float(__nv_bfloat16 b) {
  const uint32_t u = static_cast<uint32_t>(b.bits) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

namespace nvcuda::wmma {

struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

template <typename Use, int M, int N, int K, typename T, typename Layout = void>
struct fragment {
  static_assert(M == 16 && N == 16 && K == 16, "the emulation has the 16x16x16 shape only");
  float v[16][16];  // (row, column) of the tile: (m, k) for a, (k, n) for b, (m, n) for c
};

inline void check_operand(const void* p, unsigned ldm_bytes, const char* what) {
  if (reinterpret_cast<uintptr_t>(p) % 32 != 0 || ldm_bytes % 16 != 0) {
    std::fprintf(stderr, "wmma %s: pointer %p not 32-byte aligned or ldm %u bytes not 16n\n", what,
                 p, ldm_bytes);
    std::abort();
  }
}

template <typename Use, typename T, typename Layout>
void fill_fragment(fragment<Use, 16, 16, 16, T, Layout>& f, float x) {
  for (auto& row : f.v)
    for (float& e : row) e = x;
}

// matrix_a / matrix_b from bf16 memory in the fragment's own layout.
template <typename Use, typename Layout>
void load_matrix_sync(fragment<Use, 16, 16, 16, __nv_bfloat16, Layout>& f, const __nv_bfloat16* p,
                      unsigned ldm) {
  check_operand(p, ldm * 2, "load (bf16)");
  warp_barrier().arrive_and_wait();
  for (int r = 0; r < 16; ++r)
    for (int c = 0; c < 16; ++c) {
      // Row-major: element (r, c) at p[r ldm + c]; column-major: at p[c ldm + r].
      const size_t at = std::is_same_v<Layout, row_major> ? r * ldm + c : c * ldm + r;
      f.v[r][c] = __bfloat162float(p[at]);
    }
  warp_barrier().arrive_and_wait();
}

// The accumulator from fp32 memory.
inline void load_matrix_sync(fragment<accumulator, 16, 16, 16, float>& f, const float* p,
                             unsigned ldm, layout_t layout) {
  check_operand(p, ldm * 4, "load (fp32)");
  warp_barrier().arrive_and_wait();
  for (int r = 0; r < 16; ++r)
    for (int c = 0; c < 16; ++c) f.v[r][c] = p[layout == mem_row_major ? r * ldm + c : c * ldm + r];
  warp_barrier().arrive_and_wait();
}

inline void store_matrix_sync(float* p, const fragment<accumulator, 16, 16, 16, float>& f,
                              unsigned ldm, layout_t layout) {
  check_operand(p, ldm * 4, "store");
  warp_barrier().arrive_and_wait();
  if (lane_id() == 0)
    for (int r = 0; r < 16; ++r)
      for (int c = 0; c < 16; ++c)
        p[layout == mem_row_major ? r * ldm + c : c * ldm + r] = f.v[r][c];
  warp_barrier().arrive_and_wait();
}

// d = a b + c, every lane on its own copy (the lanes' copies are equal).
template <typename LayoutA, typename LayoutB>
void mma_sync(fragment<accumulator, 16, 16, 16, float>& d,
              const fragment<matrix_a, 16, 16, 16, __nv_bfloat16, LayoutA>& a,
              const fragment<matrix_b, 16, 16, 16, __nv_bfloat16, LayoutB>& b,
              const fragment<accumulator, 16, 16, 16, float>& c) {
  float out[16][16];
  for (int m = 0; m < 16; ++m)
    for (int n = 0; n < 16; ++n) {
      float sum = c.v[m][n];
      for (int k = 0; k < 16; ++k) sum += a.v[m][k] * b.v[k][n];
      out[m][n] = sum;
    }
  std::memcpy(d.v, out, sizeof(out));
}

}  // namespace nvcuda::wmma
