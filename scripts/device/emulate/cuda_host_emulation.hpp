// Host emulation of the few CUDA features that the kernels of kernels/cuda/flash_attention.cu and
// layernorm.cu's forward use, so their indexing, masking and barrier logic can be checked on a
// machine without a GPU: one std::thread per CUDA thread, std::barrier for __syncthreads and for
// the warp shuffles, std::atomic_ref for atomicAdd, shared memory poisoned with NaN, blocks run in
// index order or a shuffled one. It says nothing about speed, and a race it does not happen to hit
// goes unseen (compute-sanitizer's racecheck on the GPU is the real check). Used by
// emulate_flash_attention.sh and emulate_layernorm.sh; not part of the build.
#pragma once
#include <algorithm>
#include <atomic>
#include <barrier>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <limits>
#include <memory>
#include <numeric>
#include <random>
#include <thread>
#include <vector>
#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(x)
#define CUDART_INF_F std::numeric_limits<float>::infinity()
struct Dim3 {
  unsigned x = 0, y = 0, z = 0;
};
struct BlockCtx {
  std::barrier<>* block_barrier;
  std::vector<std::unique_ptr<std::barrier<>>>* warp_barriers;
  std::vector<float>* exchange;  // (threads)
  float* smem;
};
thread_local Dim3 threadIdx, blockIdx;
thread_local BlockCtx* ctx;
inline void __syncthreads() {
  ctx->block_barrier->arrive_and_wait();
}
inline float __shfl_xor_sync(unsigned, float v, int offset) {
  const unsigned t = threadIdx.x, warp = t / 32, lane = t % 32;
  auto& bar = *(*ctx->warp_barriers)[warp];
  (*ctx->exchange)[t] = v;
  bar.arrive_and_wait();
  const float r = (*ctx->exchange)[warp * 32 + (lane ^ static_cast<unsigned>(offset))];
  bar.arrive_and_wait();
  return r;
}
inline float atomicAdd(float* p, float v) {
  return std::atomic_ref<float>(*p).fetch_add(v);
}
constexpr int kWarpSize = 32;
template <typename T>
T warp_sum(T v) {
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}
inline size_t ceil_div(size_t a, size_t b) {
  return (a + b - 1) / b;
}
struct AttentionShape {
  size_t B = 0, T = 0, n_head = 0, n_kv_head = 0, head_dim = 0;
  bool grouped = false;
  size_t q_width() const { return n_head * head_dim; }
  size_t kv_width() const { return n_kv_head * head_dim; }
  size_t qkv_width() const { return q_width() + 2 * kv_width(); }
};
// Runs kernel(args) over `blocks` blocks of `threads` threads with `smem_bytes` shared memory,
// one block after another: in index order, or, with a non-zero `shuffle_seed`, in an order
// shuffled by it (a GPU runs its blocks in no fixed order; a kernel whose result depends on it,
// through atomics or a race between blocks, gives other bits under another order).
template <typename F>
void emulate(unsigned blocks, unsigned threads, size_t smem_bytes, F kernel,
             uint32_t shuffle_seed = 0) {
  std::vector<unsigned> order(blocks);
  std::iota(order.begin(), order.end(), 0u);
  if (shuffle_seed != 0) std::shuffle(order.begin(), order.end(), std::mt19937(shuffle_seed));
  for (const unsigned b : order) {
    std::barrier<> block_barrier(threads);
    std::vector<std::unique_ptr<std::barrier<>>> warps;
    for (unsigned w = 0; w < threads / 32; ++w)
      warps.push_back(std::make_unique<std::barrier<>>(32));
    std::vector<float> exchange(threads);
    // Poison shared memory: NaN catches reads of what no thread wrote.
    std::vector<float> smem(smem_bytes / sizeof(float), std::numeric_limits<float>::quiet_NaN());
    BlockCtx c{&block_barrier, &warps, &exchange, smem.data()};
    std::vector<std::thread> ts;
    for (unsigned t = 0; t < threads; ++t)
      ts.emplace_back([&, t] {
        threadIdx.x = t;
        blockIdx.x = b;
        ctx = &c;
        kernel();
      });
    for (auto& t : ts) t.join();
  }
}
