// Host-side helpers of the fused attention's launches, shared by the fp32 kernels
// (flash_attention.cu) and the tensor-core ones (flash_attention_tc.cu): the call's extents from
// an AttentionShape, the shared-memory opt-in past 48 KiB, and the grid's size check.
#pragma once

#include <cmath>
#include <string>

#include "cuda/cuda_common.cuh"
#include "cuda/flash_attention_dims.cuh"

namespace tierzero::kernels::cuda_impl {

inline FlashDims flash_dims(const AttentionShape& a) {
  TZ_CHECK(a.n_head > 0 && a.n_kv_head > 0 && a.n_head % a.n_kv_head == 0,
           "CUDA attention: n_kv_head " + std::to_string(a.n_kv_head) + " does not divide n_head " +
               std::to_string(a.n_head),
           "every kv head serves the same number of query heads");
  TZ_CHECK(a.head_dim > 0 && a.head_dim <= 128,
           "CUDA attention: head_dim " + std::to_string(a.head_dim) +
               " is not supported (the fused kernel takes 1 to 128)",
           "use a model with head_dim <= 128 on CUDA, or the CPU backend");
  FlashDims s{};
  s.B = a.B;
  s.T = a.T;
  s.NH = a.n_head;
  s.NKV = a.n_kv_head;
  s.D = a.head_dim;
  s.W = a.qkv_width();
  s.rep = a.n_head / a.n_kv_head;
  s.grouped = a.grouped;
  s.scale = 1.0f / std::sqrt(static_cast<float>(a.head_dim));
  s.scale_log2 = s.scale * kLog2e;
  s.tiles = ceil_div(a.T, static_cast<size_t>(kTile));
  return s;
}

// Raises the kernel's dynamic shared-memory limit to `bytes` (needed past 48 KiB), after
// checking that the current device allows that much per block.
template <typename Kernel>
void allow_shared_memory(Kernel kernel, size_t bytes, const FlashDims& s) {
  int device = 0;
  TZ_CUDA_CHECK(cudaGetDevice(&device));
  int optin = 0;
  TZ_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  TZ_CHECK(bytes <= static_cast<size_t>(optin),
           "CUDA attention at head_dim " + std::to_string(s.D) + " needs " + std::to_string(bytes) +
               " bytes of shared memory per block; this GPU allows " + std::to_string(optin),
           "use a smaller head_dim on this GPU, or the CPU backend");
  TZ_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     static_cast<int>(bytes)));
}

inline unsigned grid_of(size_t blocks) {
  TZ_CHECK(blocks <= kMaxGridX, "CUDA attention: too many blocks (" + std::to_string(blocks) + ")",
           "split the batch into smaller micro-batches");
  return static_cast<unsigned>(blocks);
}

// fn.template operator()<kMaxDim>() with the kernels' bound on the head dim for s.D: 32, 64 or 128
// (flash_dims has refused larger ones).
template <typename F>
void with_max_dim(const FlashDims& s, F&& fn) {
  if (s.D <= 32) {
    fn.template operator()<32>();
  } else if (s.D <= 64) {
    fn.template operator()<64>();
  } else {
    fn.template operator()<128>();
  }
}

// fn.template operator()<kMaxDim, E>() with E the storage type (storage16.cuh) of a 16-bit
// `type` and kMaxDim as with_max_dim picks it: both files' 16-bit launchers.
template <typename F>
void with_16bit_max_dim(DType type, const FlashDims& s, F&& fn) {
  with_16bit_type(type, [&](auto e) {
    with_max_dim(s, [&]<int kMaxDim>() { fn.template operator()<kMaxDim, decltype(e)>(); });
  });
}

}  // namespace tierzero::kernels::cuda_impl
