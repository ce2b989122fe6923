// The extents of one fused-attention call and where a head's channels sit in a qkv row, shared by
// the fp32 kernels (flash_attention.cu) and the tensor-core ones (flash_attention_tc.cu). Plain
// C++ with __device__ helpers and no CUDA includes, so that the host emulation of the kernels
// (scripts/device/emulate) compiles it as it is.
#pragma once

#include <cstddef>

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

}  // namespace tierzero::kernels::cuda_impl
