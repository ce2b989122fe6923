// The extents of one fused-attention call and where a head's channels sit in a qkv row, shared by
// the fp32 kernels (flash_attention.cu) and the tensor-core ones (flash_attention_tc.cu). Plain
// C++ with __device__ helpers and no CUDA includes, so that the host emulation of the kernels
// (scripts/device/emulate) compiles it as it is (after its own warp_sum, as CUDA code includes it
// after cuda_common.cuh).
#pragma once

#include <cstddef>

#include "cuda/storage16.cuh"

namespace tierzero::kernels::cuda_impl {

constexpr int kTile = 64;  // query and key rows per tile
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

struct FlashDims {
  size_t B, T, NH, NKV, D;  // D: head_dim
  size_t W;                 // a qkv row: (NH + 2 NKV) D
  size_t rep;               // query heads per kv head
  bool grouped;             // the Llama layout (AttentionShape::grouped)
  float scale;              // 1 / sqrt(D)
  float scale_log2;         // scale * log2(e): scores in the log2 domain
  size_t tiles;             // ceil(T / kTile)
};

__device__ __forceinline__ size_t q_offset(const FlashDims& s, size_t h) {
  const size_t kvh = h / s.rep;
  return s.grouped ? (kvh * (s.rep + 2) + h % s.rep) * s.D : h * s.D;
}
__device__ __forceinline__ size_t k_offset(const FlashDims& s, size_t kvh) {
  return s.grouped ? (kvh * (s.rep + 2) + s.rep) * s.D : (s.NH + kvh) * s.D;
}
__device__ __forceinline__ size_t v_offset(const FlashDims& s, size_t kvh) {
  return s.grouped ? (kvh * (s.rep + 2) + s.rep + 1) * s.D : (s.NH + s.NKV + kvh) * s.D;
}

// The backward's per-row inputs of query tile q0 of head h, for a block of kBlockThreads threads:
// lse_tile (kTile) <- each row's lse in the log2 domain, delta_tile (kTile) <- D =
// rowsum(dout * out); both 0 past T. One warp per row, every lane summing a fixed set of columns
// and warp_sum combining them in a fixed order (warp_sum and kWarpSize: cuda_common.cuh, or the
// host emulation, included first). E: the element type of dout and out (storage16.cuh).
template <int kBlockThreads, typename E>
__device__ __forceinline__ void load_row_stats(float* lse_tile, float* delta_tile,
                                               const E* dout,     // (B, T, NH D)
                                               const E* out,      // (B, T, NH D)
                                               const float* lse,  // (B, NH, T)
                                               const FlashDims& s, size_t b, size_t h, size_t q0) {
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  const size_t q_width = s.NH * s.D;
  for (int r = warp; r < kTile; r += kBlockThreads / kWarpSize) {
    const size_t t = q0 + r;
    float dot = 0.0f;
    if (t < s.T) {
      const size_t row = (b * s.T + t) * q_width + h * s.D;
      for (size_t d = lane; d < s.D; d += kWarpSize)
        dot += to_f32(dout[row + d]) * to_f32(out[row + d]);
    }
    dot = warp_sum(dot);
    if (lane == 0) {
      delta_tile[r] = dot;
      lse_tile[r] = t < s.T ? lse[(b * s.NH + h) * s.T + t] * kLog2e : 0.0f;
    }
  }
}

}  // namespace tierzero::kernels::cuda_impl
