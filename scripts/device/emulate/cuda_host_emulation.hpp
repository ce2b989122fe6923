// Host emulation of the few CUDA features that the kernels of kernels/cuda/flash_attention.cu,
// layernorm.cu's forward and the deterministic gradient sums (elementwise.cu, layernorm.cu,
// llama.cu) use, so their indexing, masking and barrier logic can be checked on a machine without
// a GPU: one std::thread per CUDA thread, 1-D or 2-D blocks and grids, std::barrier for
// __syncthreads and for the warp shuffles, std::atomic_ref for atomicAdd, dynamic shared memory
// poisoned with NaN, blocks run in index order or a shuffled one. It says nothing about speed, and
// a race it does not happen to hit goes unseen (compute-sanitizer's racecheck on the GPU is the
// real check). Used by emulate_flash_attention.sh, emulate_layernorm.sh and
// emulate_gradient_sums.sh; not part of the build.
#pragma once
#include <algorithm>
#include <atomic>
#include <barrier>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <numeric>
#include <random>
#include <span>
#include <thread>
#include <vector>
#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(x)
#define __align__(x)
// Blocks run one at a time, so a static array serves as the running block's static shared memory
// (not poisoned: it holds what the previous block left).
#define __shared__ static
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
thread_local Dim3 threadIdx, blockIdx, blockDim, gridDim;
thread_local BlockCtx* ctx;
inline void __syncthreads() {
  ctx->block_barrier->arrive_and_wait();
}
// The calling thread's warp: its barrier (for __syncwarp and warp-collective operations) and lane.
inline std::barrier<>& warp_barrier() {
  const unsigned t = threadIdx.y * blockDim.x + threadIdx.x;
  return *(*ctx->warp_barriers)[t / 32];
}
inline unsigned lane_id() {
  return (threadIdx.y * blockDim.x + threadIdx.x) % 32;
}
inline void __syncwarp(unsigned = 0xffffffffu) {
  warp_barrier().arrive_and_wait();
}
// cuda_common.cuh's grid-stride helpers (1-D grids).
inline size_t global_thread_index() {
  return static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
inline size_t grid_stride() {
  return static_cast<size_t>(blockDim.x) * gridDim.x;
}
inline float __shfl_xor_sync(unsigned, float v, int offset) {
  const unsigned t = threadIdx.y * blockDim.x + threadIdx.x, warp = t / 32, lane = t % 32;
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
// Elements of a and b whose bits differ (NaN payloads included): what the checks compare kernels
// that must agree bit for bit with.
inline size_t bit_differences(const std::vector<float>& a, const std::vector<float>& b) {
  size_t n = 0;
  for (size_t i = 0; i < a.size(); ++i) n += std::memcmp(&a[i], &b[i], sizeof(float)) != 0;
  return n;
}
struct AttentionShape {
  size_t B = 0, T = 0, n_head = 0, n_kv_head = 0, head_dim = 0;
  bool grouped = false;
  size_t q_width() const { return n_head * head_dim; }
  size_t kv_width() const { return n_kv_head * head_dim; }
  size_t qkv_width() const { return q_width() + 2 * kv_width(); }
};
// Runs kernel(args) over a grid of `grid` blocks of `block` threads (x fastest within a warp, as
// on the GPU) with `smem_bytes` of dynamic shared memory, one block after another: in index
// order, or, with a non-zero `shuffle_seed`, in an order shuffled by it (a GPU runs its blocks in
// no fixed order; a kernel whose result depends on it, through atomics or a race between blocks,
// gives other bits under another order).
template <typename F>
void emulate(Dim3 grid, Dim3 block, size_t smem_bytes, F kernel, uint32_t shuffle_seed = 0) {
  grid.y = grid.y ? grid.y : 1;
  block.y = block.y ? block.y : 1;
  const unsigned threads = block.x * block.y;
  std::vector<Dim3> order;
  for (unsigned y = 0; y < grid.y; ++y)
    for (unsigned x = 0; x < grid.x; ++x) order.push_back({x, y, 0});
  if (shuffle_seed != 0) std::shuffle(order.begin(), order.end(), std::mt19937(shuffle_seed));
  // One set of threads plays every block in turn (starting threads is what costs), with a
  // barrier between blocks, so a block still starts only when the previous one has finished.
  std::barrier<> block_barrier(threads), between_blocks(threads);
  std::vector<std::unique_ptr<std::barrier<>>> warps;
  for (unsigned w = 0; w < threads / 32; ++w) warps.push_back(std::make_unique<std::barrier<>>(32));
  std::vector<float> exchange(threads);
  // 128-byte aligned, as CUDA's dynamic shared memory (WMMA's loads check 32).
  std::vector<float> smem_storage(smem_bytes / sizeof(float) + 32);
  float* smem_base = smem_storage.data();
  while (reinterpret_cast<uintptr_t>(smem_base) % 128 != 0) ++smem_base;
  std::span<float> smem(smem_base, smem_bytes / sizeof(float));
  BlockCtx c{&block_barrier, &warps, &exchange, smem.data()};
  std::vector<std::thread> ts;
  for (unsigned t = 0; t < threads; ++t)
    ts.emplace_back([&, t] {
      threadIdx = {t % block.x, t / block.x, 0};
      blockDim = block;
      gridDim = grid;
      ctx = &c;
      for (const Dim3 b : order) {
        // Poison shared memory: NaN catches reads of what no thread of this block wrote.
        if (t == 0) std::fill(smem.begin(), smem.end(), std::numeric_limits<float>::quiet_NaN());
        between_blocks.arrive_and_wait();
        blockIdx = b;
        kernel();
        between_blocks.arrive_and_wait();
      }
    });
  for (auto& t : ts) t.join();
}

// The 1-D form: `blocks` blocks of `threads` threads.
template <typename F>
void emulate(unsigned blocks, unsigned threads, size_t smem_bytes, F kernel,
             uint32_t shuffle_seed = 0) {
  emulate(Dim3{blocks, 1, 1}, Dim3{threads, 1, 1}, smem_bytes, kernel, shuffle_seed);
}
