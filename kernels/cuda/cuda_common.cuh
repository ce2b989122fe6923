// Shared pieces of the CUDA backend: launch-size helpers, warp/block reductions, and the host
// launchers each .cu file defines. The Kernels class (cuda_kernels.cu) only validates arguments,
// picks the stream and calls these launchers; keeping the kernels in a few topic files keeps the
// number of nvcc translation units (compiled once per architecture in CI) small.
#pragma once

#include <cuda_runtime.h>
#include <math_constants.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "cuda/storage16.cuh"
#include "tierzero/core/cuda_check.hpp"
#include "tierzero/core/error.hpp"
#include "tierzero/kernels/kernels.hpp"

namespace tierzero::kernels::cuda_impl {

constexpr int kWarpSize = 32;
constexpr int kBlockSize = 256;  // threads per block for elementwise and warp-per-row kernels
constexpr int kWarpsPerBlock = kBlockSize / kWarpSize;
// Grid-stride kernels never need more blocks than this to fill any current GPU; capping keeps
// the grid within limits however large n is.
constexpr size_t kMaxGridStrideBlocks = 65536;
// The widest grid.x a launch may use (CUDA's limit for compute capability >= 3.0).
constexpr size_t kMaxGridX = 2147483647;
constexpr size_t kMaxGridY = 65535;

inline size_t ceil_div(size_t a, size_t b) {
  return (a + b - 1) / b;
}

// Blocks for a grid-stride loop over n elements (n > 0).
inline unsigned grid_stride_blocks(size_t n) {
  const size_t blocks = ceil_div(n, static_cast<size_t>(kBlockSize));
  return static_cast<unsigned>(blocks < kMaxGridStrideBlocks ? blocks : kMaxGridStrideBlocks);
}

// Blocks for one-warp-per-row kernels over `rows` rows (rows > 0); throws past CUDA's limit.
inline unsigned warp_per_row_blocks(size_t rows) {
  const size_t blocks = ceil_div(rows, static_cast<size_t>(kWarpsPerBlock));
  TZ_CHECK(blocks <= kMaxGridX, "too many rows for one kernel launch: " + std::to_string(rows),
           "split the batch into smaller micro-batches");
  return static_cast<unsigned>(blocks);
}

// f(T{}) with T the storage type (storage16.cuh) of a 16-bit DType: how a launcher of the 16-bit
// ops picks its kernel's template argument. An Error for any other type.
template <typename F>
void with_16bit_type(DType type, const F& f) {
  switch (type) {
    case DType::bf16:
      f(Bf16Bits{});
      return;
    case DType::f16:
      f(F16Bits{});
      return;
    default:
      TZ_THROW(std::string("a 16-bit kernel was given ") + dtype_name(type) + " data",
               "pass bf16 or fp16");
  }
}

// Launch errors (bad configuration, missing kernel image) are reported at the launch site.
#define TZ_CUDA_CHECK_LAUNCH() TZ_CUDA_CHECK(cudaGetLastError())

__device__ __forceinline__ size_t global_thread_index() {
  return static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ size_t grid_stride() {
  return static_cast<size_t>(blockDim.x) * gridDim.x;
}

template <typename T>
__device__ __forceinline__ T warp_sum(T v) {
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) {
    v += __shfl_xor_sync(0xffffffffu, v, offset);
  }
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) {
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  }
  return v;
}

// Block-wide sum (blockDim.x a multiple of 32, at most 1024); every thread gets the result.
// `scratch` is shared memory of kWarpSize elements; the leading barrier makes it safe to call
// several times in a row with the same scratch.
template <typename T>
__device__ T block_sum(T v, T* scratch) {
  const int lane = threadIdx.x % kWarpSize;
  const int warp = threadIdx.x / kWarpSize;
  const int warps = blockDim.x / kWarpSize;
  v = warp_sum(v);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  T total = lane < warps ? scratch[lane] : T(0);
  return warp_sum(total);
}

__device__ __forceinline__ float block_max(float v, float* scratch) {
  const int lane = threadIdx.x % kWarpSize;
  const int warp = threadIdx.x / kWarpSize;
  const int warps = blockDim.x / kWarpSize;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  const float m = lane < warps ? scratch[lane] : -CUDART_INF_F;
  return warp_max(m);
}

// ---- deterministic gradient sums ----
//
// Gradients that sum over many rows (a bias or a norm's gain over N = B*T rows, an embedding row
// over the positions of its token) are computed without atomics, so every output element is
// summed in one fixed order and a run repeats bit for bit whatever order the GPU runs blocks in.
// Column sums take two passes: pass 1 reduces each (32-column tile, slice of rows) block in a fixed
// order and writes one partial per (slice, column) into scratch; pass 2
// (launch_column_partials_sum) adds each column's partials in slice order into the gradient.
// Splitting N into slices keeps pass 1 as parallel as the atomic version was (N / 256 slices
// times C / 32 tiles of blocks); pass 2 reads 1/256 of what pass 1 read.

// Device scratch for those sums (the column partials, the embedding gradient's sorted positions):
// a slice of the kernels workspace, used only by work on the kernels' stream, in stream order.
struct DeterministicScratch {
  void* data = nullptr;  // (bytes) device, 256-byte aligned
  size_t bytes = 0;
};

constexpr int kColumnTile = 32;  // columns per block: one coalesced 128-byte row segment
constexpr int kRowLanes = 8;     // threads per column in a block, each walking every 8th row
constexpr size_t kRowsPerSlice = 256;

// How pass 1 splits N rows: `slices` slices of `rows_per_slice` rows (the last may be shorter,
// none is empty). `partials_per_row` floats of scratch are needed per slice (the columns of all
// the gradients the kernel sums); with room for fewer slices than N / 256 the slices grow, and
// with room for none (or N <= 256) there is one slice, which pass 1 adds straight into the
// gradient. Depends only on its arguments, so a given problem always sums in the same order.
struct ColumnSlices {
  size_t slices;
  size_t rows_per_slice;
};
inline ColumnSlices column_slices(size_t N, size_t partials_per_row, size_t scratch_floats) {
  size_t slices = ceil_div(N, kRowsPerSlice);
  const size_t fit = partials_per_row > 0 ? scratch_floats / partials_per_row : 0;
  if (slices > fit) slices = fit;
  if (slices > kMaxGridY) slices = kMaxGridY;
  if (slices < 1) slices = 1;
  const size_t rows_per_slice = ceil_div(N, slices);
  return {ceil_div(N, rows_per_slice), rows_per_slice};
}

// ---- launchers (all asynchronous on `stream`; callers guarantee n/rows > 0 where noted) ----

// elementwise.cu
void launch_encoder_forward(cudaStream_t stream, float* out, const int32_t* tokens,
                            const float* wte, const float* wpe, size_t B, size_t T, size_t C);
// dwte's rows are summed over their token's positions in position order (a stable sort of the
// positions by token in `scratch`, then one thread per (token, channel)); see elementwise.cu.
void launch_encoder_backward(cudaStream_t stream, const DeterministicScratch& scratch, float* dwte,
                             float* dwpe, const float* dout, const int32_t* tokens, size_t B,
                             size_t T, size_t C);
// The vocabulary-parallel encoder (kernels.hpp): wte_local (vocab_count, C) holds rows
// vocab_start.. of wte; wpe and dwpe are nullable; tokens outside the range add nothing.
void launch_encoder_forward_vocab_range(cudaStream_t stream, float* out, const int32_t* tokens,
                                        const float* wte_local, const float* wpe,
                                        size_t vocab_start, size_t vocab_count, size_t B, size_t T,
                                        size_t C);
void launch_encoder_backward_vocab_range(cudaStream_t stream, const DeterministicScratch& scratch,
                                         float* dwte_local, float* dwpe, const float* dout,
                                         const int32_t* tokens, size_t vocab_start,
                                         size_t vocab_count, size_t B, size_t T, size_t C);
void launch_gelu_forward(cudaStream_t stream, float* out, const float* inp, size_t n);
void launch_gelu_backward(cudaStream_t stream, float* dinp, const float* inp, const float* dout,
                          size_t n);
// d (n) = gelu'(inp (n)) * d (n): the bits of launch_gelu_backward into a zeroed buffer.
void launch_gelu_backward_in_place(cudaStream_t stream, float* d, const float* inp, size_t n);
void launch_residual_forward(cudaStream_t stream, float* out, const float* a, const float* b,
                             size_t n);
void launch_residual_backward(cudaStream_t stream, float* da, float* db, const float* dout,
                              size_t n);
void launch_scale(cudaStream_t stream, float* x, size_t n, float s);
// out (Y, X, row_bytes) = in (X, Y, row_bytes) with the outer axes swapped, rows of bytes.
void launch_transpose_blocks(cudaStream_t stream, void* out, const void* in, size_t X, size_t Y,
                             size_t row_bytes);
void launch_convert_from_f32(cudaStream_t stream, void* dst, DType dst_type, const float* src,
                             size_t n);
void launch_convert_to_f32(cudaStream_t stream, float* dst, const void* src, DType src_type,
                           size_t n);
void launch_adamw(cudaStream_t stream, float* param, float* m, float* v, const float* grad,
                  size_t n, const AdamWParams& p);
// adamw_update_segments: one launch per 64 non-empty segments, each segment its own blocks.
void launch_adamw_segments(cudaStream_t stream, float* param, float* m, float* v, const float* grad,
                           void* copy, DType copy_type, const AdamWSegment* segments,
                           size_t num_segments, const AdamWParams& p);
// Writes one partial sum of squares per block into `partials` (device, capacity
// `max_partials`) and returns how many it wrote.
size_t launch_sum_squares_partials(cudaStream_t stream, double* partials, size_t max_partials,
                                   const float* x, size_t n);
// *result = partials[0] + partials[1] + ... in that order, by one thread (deterministic, and the
// same bits as the host's loop over the same partials); 0 when count is 0.
void launch_sum_partials_in_order(cudaStream_t stream, double* result, const double* partials,
                                  size_t count);
// out (N, OC) += bias (OC) broadcast over rows; for biases cuBLASLt's epilogue cannot take.
void launch_add_bias(cudaStream_t stream, float* out, const float* bias, size_t N, size_t OC);
// Column sums of a (N, OC) matrix added into dbias (OC); used for matmul's bias gradient.
void launch_bias_backward(cudaStream_t stream, const DeterministicScratch& scratch, float* dbias,
                          const float* dout, size_t N, size_t OC);
// The same sums of a 16-bit dout (bf16 or fp16, widened as read): the 16-bit linears' dbias.
void launch_bias_backward(cudaStream_t stream, const DeterministicScratch& scratch, float* dbias,
                          const void* dout, DType dout_type, size_t N, size_t OC);
// The 16-bit linears' fallbacks where cuBLASLt has no epilogue: out (N, OC) += bias (OC) with the
// bias bf16 or fp16 and out fp32 or of the bias's type (rounded after the add); out (n) =
// gelu(inp (n)) and d (n) = gelu'(inp (n)) * d (n) on 16-bit data (type), in fp32 in between.
void launch_add_bias(cudaStream_t stream, void* out, DType out_type, const void* bias,
                     DType bias_type, size_t N, size_t OC);
void launch_gelu_forward(cudaStream_t stream, void* out, const void* inp, DType type, size_t n);
void launch_gelu_backward_in_place(cudaStream_t stream, void* d, const void* inp, DType type,
                                   size_t n);
// Pass 2 of the column sums: out (C) += the column sums of partials (slices, C), each column in
// slice order.
void launch_column_partials_sum(cudaStream_t stream, float* out, const float* partials,
                                size_t slices, size_t C);

// layernorm.cu
void launch_layernorm_forward(cudaStream_t stream, float* out, float* mean, float* rstd,
                              const float* inp, const float* weight, const float* bias, size_t N,
                              size_t C);
// residual (N, C) = a + b, then layernorm_forward of it: the add is the layernorm's first pass.
void launch_fused_residual_layernorm_forward(cudaStream_t stream, float* residual, float* out,
                                             float* mean, float* rstd, const float* a,
                                             const float* b, const float* weight, const float* bias,
                                             size_t N, size_t C);
// The 16-bit norms (kernels.hpp): the same kernels with the parameters and the output of type.
void launch_layernorm16_forward(cudaStream_t stream, void* out, float* mean, float* rstd,
                                const float* inp, const void* weight, const void* bias, DType type,
                                size_t N, size_t C);
void launch_fused_residual_layernorm16_forward(cudaStream_t stream, float* residual, void* out,
                                               float* mean, float* rstd, const float* a,
                                               const float* b, const void* weight, const void* bias,
                                               DType type, size_t N, size_t C);
void launch_layernorm16_backward(cudaStream_t stream, const DeterministicScratch& scratch,
                                 float* dinp, void* dinp16, float* dweight, float* dbias,
                                 const float* dout, const float* inp, const void* weight,
                                 const float* mean, const float* rstd, DType type, size_t N,
                                 size_t C);
void launch_layernorm_backward(cudaStream_t stream, const DeterministicScratch& scratch,
                               float* dinp, float* dweight, float* dbias, const float* dout,
                               const float* inp, const float* weight, const float* mean,
                               const float* rstd, size_t N, size_t C);

// flash_attention.cu: the fused causal attention of Kernels::attention_forward / _backward
// (kernels.hpp), both qkv layouts and grouped kv heads, head_dim 1 to 128 (an Error past it).
// lse (B, NH, T) is what the forward keeps; the backward needs no scratch.
void launch_flash_attention_forward(cudaStream_t stream, float* out, float* lse, const float* qkv,
                                    const AttentionShape& shape);
void launch_flash_attention_backward(cudaStream_t stream, float* dqkv, const float* dout,
                                     const float* out, const float* qkv, const float* lse,
                                     const AttentionShape& shape);
// flash_attention_tc.cu: the same on the tensor cores (bf16 operands, fp32 accumulation) for
// 16-bit compute; the same lse, so either backward follows either forward.
void launch_flash_attention_tc_forward(cudaStream_t stream, float* out, float* lse,
                                       const float* qkv, const AttentionShape& shape);
void launch_flash_attention_tc_backward(cudaStream_t stream, float* dqkv, const float* dout,
                                        const float* out, const float* qkv, const float* lse,
                                        const AttentionShape& shape);
// Both kernels with qkv, out, dout and dqkv of a 16-bit type (the 16-bit attention, kernels.hpp).
void launch_flash_attention16_forward(cudaStream_t stream, void* out, float* lse, const void* qkv,
                                      DType type, const AttentionShape& shape);
void launch_flash_attention16_backward(cudaStream_t stream, void* dqkv, const void* dout,
                                       const void* out, const void* qkv, const float* lse,
                                       DType type, const AttentionShape& shape);
void launch_flash_attention16_tc_forward(cudaStream_t stream, void* out, float* lse,
                                         const void* qkv, DType type, const AttentionShape& shape);
void launch_flash_attention16_tc_backward(cudaStream_t stream, void* dqkv, const void* dout,
                                          const void* out, const void* qkv, const float* lse,
                                          DType type, const AttentionShape& shape);

// llama.cu: the Llama family's operations (kernels.hpp).
void launch_rmsnorm_forward(cudaStream_t stream, float* out, float* rstd, const float* inp,
                            const float* weight, size_t N, size_t C, float eps);
void launch_fused_residual_rmsnorm_forward(cudaStream_t stream, float* residual, float* out,
                                           float* rstd, const float* a, const float* b,
                                           const float* weight, size_t N, size_t C, float eps);
void launch_rmsnorm_backward(cudaStream_t stream, const DeterministicScratch& scratch, float* dinp,
                             float* dweight, const float* dout, const float* inp,
                             const float* weight, const float* rstd, size_t N, size_t C);
// The 16-bit RMSNorms (kernels.hpp): the same kernels with the gain and the output of type.
void launch_rmsnorm16_forward(cudaStream_t stream, void* out, float* rstd, const float* inp,
                              const void* weight, DType type, size_t N, size_t C, float eps);
void launch_fused_residual_rmsnorm16_forward(cudaStream_t stream, float* residual, void* out,
                                             float* rstd, const float* a, const float* b,
                                             const void* weight, DType type, size_t N, size_t C,
                                             float eps);
void launch_rmsnorm16_backward(cudaStream_t stream, const DeterministicScratch& scratch,
                               float* dinp, void* dinp16, float* dweight, const float* dout,
                               const float* inp, const void* weight, const float* rstd, DType type,
                               size_t N, size_t C);
void launch_rope(cudaStream_t stream, float* x, size_t B, size_t T, size_t blocks,
                 size_t block_heads, size_t rotated_heads, size_t hs, size_t pos0,
                 const RopeParams& p, bool inverse);
void launch_swiglu_forward(cudaStream_t stream, float* out, const float* inp, size_t N, size_t H);
// The 16-bit forms (kernels.hpp's rope16_*, swiglu16_*): the fp32 kernels' arithmetic on widened
// values, each output rounded once.
void launch_rope16(cudaStream_t stream, void* x, DType type, size_t B, size_t T, size_t blocks,
                   size_t block_heads, size_t rotated_heads, size_t hs, size_t pos0,
                   const RopeParams& p, bool inverse);
void launch_swiglu16_forward(cudaStream_t stream, void* out, const void* inp, DType type, size_t N,
                             size_t H);
void launch_swiglu16_backward(cudaStream_t stream, void* dinp, const void* inp, const void* dout,
                              DType type, size_t N, size_t H);
void launch_swiglu_backward(cudaStream_t stream, float* dinp, const float* inp, const float* dout,
                            size_t N, size_t H);
void launch_gqa_attention_forward(cudaStream_t stream, float* out, float* att, const float* qkv,
                                  size_t B, size_t T, size_t NH, size_t KVH, size_t hs);
void launch_gqa_attention_backward(cudaStream_t stream, float* dqkv, float* datt, const float* dout,
                                   const float* qkv, const float* att, size_t B, size_t T,
                                   size_t NH, size_t KVH, size_t hs);

// softmax_xent.cu; dlogits null means forward only.
void launch_softmax_xent(cudaStream_t stream, float* dlogits, float* losses, const float* logits,
                         const int32_t* targets, float dloss, size_t N, size_t V, size_t Vp);
// The vocabulary-parallel cross-entropy's two passes (kernels.hpp): partials (N, 3) of this
// rank's logits (N, Vl); then losses (N) and, when dlogits is not null, dlogits (N, Vl) from
// every rank's partials (ranks, N, 3).
void launch_vocab_xent_partials(cudaStream_t stream, float* partials, const float* logits,
                                const int32_t* targets, size_t N, size_t Vl, size_t vocab_start,
                                size_t V);
void launch_vocab_xent_finish(cudaStream_t stream, float* dlogits, float* losses,
                              const float* logits, const float* all_partials, size_t ranks,
                              const int32_t* targets, float dloss, size_t N, size_t Vl,
                              size_t vocab_start, size_t V);
// 16-bit training's classifier: the gradient written in `type` into a buffer of its own.
void launch_softmax_xent16(cudaStream_t stream, void* dlogits, DType type, float* losses,
                           const float* logits, const int32_t* targets, float dloss, size_t N,
                           size_t V, size_t Vp);
void launch_vocab_xent16_finish(cudaStream_t stream, void* dlogits, DType type, float* losses,
                                const float* logits, const float* all_partials, size_t ranks,
                                const int32_t* targets, float dloss, size_t N, size_t Vl,
                                size_t vocab_start, size_t V);
// 16-bit training's embedding: wte_local and wpe of `type`, the stream fp32.
void launch_encoder16_forward(cudaStream_t stream, float* out, const int32_t* tokens,
                              const void* wte_local, const void* wpe, DType type,
                              size_t vocab_start, size_t vocab_count, size_t B, size_t T, size_t C);

}  // namespace tierzero::kernels::cuda_impl
