// CUDA kernels that touch each element independently (encoder, whole or over one rank's vocabulary
// range, GELU, residual, bias, scale, fp32 <-> 16-bit conversion of working parameters, and the
// small reductions that go with them (sum of squares for gradient clipping, column sums for
// matmul's bias gradient and pass 2 of every column sum). They are memory-bound, so most are one
// simple grid-stride pass. The gradients that gather many contributions (the token embedding's
// rows, the bias) sum them in a fixed order, without atomics, so a run repeats bit for bit.
#include <bit>
#include <cmath>
#include <cstdint>
#include <cub/device/device_radix_sort.cuh>

#include "cuda/cuda_common.cuh"
#include "cuda/storage16.cuh"
#include "tierzero/core/dtype_bits.hpp"

namespace tierzero::kernels::cuda_impl {

namespace {

// ---- encoder ----

__global__ void encoder_forward_kernel(float* out,             // (B, T, C)
                                       const int32_t* tokens,  // (B, T)
                                       const float* wte,       // (Vp, C)
                                       const float* wpe,       // (maxT, C)
                                       size_t n, size_t T, size_t C) {
  for (size_t i = global_thread_index(); i < n; i += grid_stride()) {
    const size_t bt = i / C;
    const size_t c = i % C;
    const size_t t = bt % T;
    const size_t token = static_cast<size_t>(tokens[bt]);
    out[i] = wte[token * C + c] + wpe[t * C + c];
  }
}

// Position t gets exactly B contributions, so one thread per (t, c) sums them: no atomics, and
// the result is deterministic.
__global__ void encoder_backward_wpe_kernel(float* dwpe,        // (maxT, C) +=
                                            const float* dout,  // (B, T, C)
                                            size_t B, size_t T, size_t C) {
  const size_t n = T * C;
  for (size_t i = global_thread_index(); i < n; i += grid_stride()) {
    float sum = 0.0f;
    for (size_t b = 0; b < B; ++b) sum += dout[b * n + i];
    dwpe[i] += sum;
  }
}

// Vocabulary-parallel forms: this rank holds rows [vocab_start, vocab_start + vocab_count) of wte.
// The row of wte_local holding `token`, or vocab_count when it is not in this range (negative
// tokens wrap to huge values and fall outside too).
__device__ __forceinline__ size_t local_row(int32_t token, size_t vocab_start, size_t vocab_count) {
  const size_t row = static_cast<size_t>(static_cast<int64_t>(token)) - vocab_start;
  return row < vocab_count ? row : vocab_count;
}

// P: the parameters' type, float or a 16-bit one (storage16.cuh) widened as read.
template <typename P>
__global__ void encoder_forward_vocab_range_kernel(float* out,             // (B, T, C)
                                                   const int32_t* tokens,  // (B, T)
                                                   const P* wte_local,     // (vocab_count, C)
                                                   const P* wpe,           // (maxT, C) nullable
                                                   size_t vocab_start, size_t vocab_count, size_t n,
                                                   size_t T, size_t C) {
  for (size_t i = global_thread_index(); i < n; i += grid_stride()) {
    const size_t bt = i / C;
    const size_t c = i % C;
    const size_t row = local_row(tokens[bt], vocab_start, vocab_count);
    float v = row < vocab_count ? to_f32(wte_local[row * C + c]) : 0.0f;
    if (wpe != nullptr) v += to_f32(wpe[(bt % T) * C + c]);  // wte + wpe, as encoder_forward_kernel
    out[i] = v;
  }
}

// The token embedding's gradient, whole vocabulary (vocab_start 0) or one rank's range. Tokens
// repeat within a batch, so a row of dwte gets one contribution per position of its token; atomics
// would add them in whatever order the blocks run. Instead the launcher sorts the positions by
// the row they add to with CUB's radix sort, which is stable, so each row's positions stay in
// position order; then one thread per (row, channel) adds its row's positions onto the gradient
// in that order. Every element of dwte is summed in one fixed order.
//
// A frequent token's positions are summed serially by one thread per channel (a token at 4% of
// 65536 positions is ~2600 loads, 8 in flight at a time): a few hundred microseconds at worst,
// once per micro-batch, under 0.1% of a GPT-2 step at that many tokens. Splitting long runs over
// several threads would need a second pass over per-piece partials; not worth it here.

// Sort keys: the row of dwte_local each position adds to, vocab_count for tokens outside the
// range (sorted last, then skipped); the positions to sort along.
__global__ void encoder_sort_keys_kernel(uint32_t* keys,         // (count)
                                         uint32_t* positions,    // (count)
                                         const int32_t* tokens,  // (count)
                                         size_t vocab_start, size_t vocab_count, size_t count) {
  for (size_t i = global_thread_index(); i < count; i += grid_stride()) {
    keys[i] = static_cast<uint32_t>(local_row(tokens[i], vocab_start, vocab_count));
    positions[i] = static_cast<uint32_t>(i);
  }
}

// dwte_local[key] += the rows of dout at the key's positions, for every key below vocab_count.
// One thread per (sorted index j, channel c) does the work where a run of equal keys starts: it
// finds the run's end by binary search (keys ascend) and sums the run's rows of dout in the
// stable sort's order, i.e. position order. Each (row, channel) of dwte_local has one writer.
__global__ void encoder_backward_runs_kernel(float* dwte_local,          // (vocab_count, C) +=
                                             const float* dout,          // (count, C)
                                             const uint32_t* keys,       // (count) ascending
                                             const uint32_t* positions,  // (count) rows of dout
                                             size_t vocab_count, size_t count, size_t C) {
  const size_t n = count * C;
  for (size_t i = global_thread_index(); i < n; i += grid_stride()) {
    const size_t j = i / C;
    const uint32_t key = keys[j];
    if (key >= vocab_count || (j > 0 && keys[j - 1] == key)) continue;
    size_t end = j + 1, hi = count;  // the first index past the run: keys[end] != key
    while (end < hi) {
      const size_t mid = end + (hi - end) / 2;
      if (keys[mid] == key) {
        end = mid + 1;
      } else {
        hi = mid;
      }
    }
    const size_t c = i % C;
    float* grad = dwte_local + static_cast<size_t>(key) * C + c;
    // Adding onto the prior gradient term by term in position order is the CPU backend's order,
    // so both give the same bits. The loads are independent of the sum, so unrolling lets 8 be in
    // flight; the adds stay in order (nvcc does not reassociate floating-point adds).
    float sum = *grad;
#pragma unroll 8
    for (size_t r = j; r < end; ++r) sum += dout[static_cast<size_t>(positions[r]) * C + c];
    *grad = sum;
  }
}

// ---- GELU (tanh form) ----

constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kGeluCubic = 0.044715f;

// 1 - tanh(u) = 2 / (e^{2u} + 1) and 1 + tanh(u) = e^{2u} (1 - tanh(u)): both keep full relative
// precision where 1 +- tanhf(u) would cancel (GELU's negative tail, sech^2 for |u| of a few
// units), as the CPU backend does. 2u is capped at 80 so e^{2u} stays finite (e * 2 / (e + 1)
// would be inf * 0 = NaN); at that point 1 - tanh is below 1e-34 and 1 + tanh is 2 in fp32.
struct GeluTanhTerms {
  float one_minus;
  float one_plus;
};
__device__ __forceinline__ GeluTanhTerms gelu_tanh_terms(float x) {
  const float u = kGeluScale * (x + kGeluCubic * x * x * x);
  const float e = expf(fminf(2.0f * u, 80.0f));
  const float one_minus = 2.0f / (e + 1.0f);
  return {one_minus, e * one_minus};
}

// T: float, or a 16-bit type (storage16.cuh) for the 16-bit linears' fallback.
template <typename T>
__global__ void gelu_forward_kernel(T* out,        // (n)
                                    const T* inp,  // (n)
                                    size_t n) {
  for (size_t i = global_thread_index(); i < n; i += grid_stride()) {
    const float x = to_f32(inp[i]);
    out[i] = from_f32<T>(0.5f * x * gelu_tanh_terms(x).one_plus);
  }
}

__device__ __forceinline__ float gelu_grad(float x) {
  const GeluTanhTerms th = gelu_tanh_terms(x);
  // sech^2 = (1 - tanh)(1 + tanh): no coshf (which overflows) and no 1 - tanh^2 cancellation.
  const float sech2 = th.one_minus * th.one_plus;
  return 0.5f * th.one_plus + x * 0.5f * sech2 * kGeluScale * (1.0f + 3.0f * kGeluCubic * x * x);
}

// dinp += gelu'(inp) * dout, or with `overwrite` dinp = 0 + gelu'(inp) * dout (the bits of the
// += into a zeroed dinp). dinp may alias dout: each element is read before it is written.
// T as gelu_forward_kernel's.
template <typename T>
__global__ void gelu_backward_kernel(T* dinp,        // (n) += or overwritten
                                     const T* inp,   // (n)
                                     const T* dout,  // (n)
                                     size_t n, bool overwrite) {
  for (size_t i = global_thread_index(); i < n; i += grid_stride()) {
    const float d = to_f32(dout[i]);
    const float prior = overwrite ? 0.0f : to_f32(dinp[i]);
    dinp[i] = from_f32<T>(prior + gelu_grad(to_f32(inp[i])) * d);
  }
}

// ---- residual, scale, bias ----

__global__ void residual_forward_kernel(float* out,      // (n)
                                        const float* a,  // (n)
                                        const float* b,  // (n)
                                        size_t n) {
  for (size_t i = global_thread_index(); i < n; i += grid_stride()) out[i] = a[i] + b[i];
}

__global__ void residual_backward_kernel(float* da,          // (n) +=
                                         float* db,          // (n) +=
                                         const float* dout,  // (n)
                                         size_t n) {
  for (size_t i = global_thread_index(); i < n; i += grid_stride()) {
    const float d = dout[i];  // read once: dout may alias da or db
    da[i] += d;
    db[i] += d;
  }
}

__global__ void scale_kernel(float* x,  // (n)
                             size_t n, float s) {
  for (size_t i = global_thread_index(); i < n; i += grid_stride()) x[i] *= s;
}

// One Unit per thread (grid-stride): out (Y, X, width) from in (X, Y, width), width in Units
// (16, 4, 2 or 1 bytes: the widest that divides the rows and aligns both pointers).
template <typename Unit>
__global__ void transpose_blocks_kernel(Unit* out, const Unit* in, size_t X, size_t Y,
                                        size_t width) {
  const size_t n = X * Y * width;
  for (size_t i = global_thread_index(); i < n; i += grid_stride()) {
    const size_t w = i % width, xy = i / width;
    const size_t x = xy / Y, y = xy % Y;  // i indexes `in` at (x, y, w)
    out[(y * X + x) * width + w] = in[i];
  }
}

// Out and Bias: float, or 16-bit types (storage16.cuh) for the 16-bit linears.
template <typename Out, typename Bias>
__global__ void add_bias_kernel(Out* out,          // (N, OC)
                                const Bias* bias,  // (OC)
                                size_t n, size_t OC) {
  for (size_t i = global_thread_index(); i < n; i += grid_stride())
    out[i] = from_f32<Out>(to_f32(out[i]) + to_f32(bias[i % OC]));
}

// ---- AdamW ----

// Scalars derived on the host in double, as PyTorch does with Python floats.
struct AdamWScalars {
  float beta1;
  float beta2;
  float eps;
  float grad_scale;
  float decay_factor;           // 1 - lr * weight_decay
  float step_size;              // lr / (1 - beta1^step)
  float bias_correction2_sqrt;  // sqrt(1 - beta2^step)
};

// What an AdamW kernel writes beside the parameters: nothing, or their working copy.
enum class AdamWCopy { none, bf16, f16, f32 };

// Follows torch.optim.AdamW's single-tensor path operation by operation:
// p *= 1 - lr*wd; m.lerp_(g, 1-b1); v = v*b2 + (1-b2) g^2;
// p -= step_size * m / (sqrt(v) / sqrt(bc2) + eps).
// With a copy, the updated parameter is also rounded into it (dtype_bits, as convert_from_f32).
template <AdamWCopy kCopy>
__device__ __forceinline__ void adamw_element(float* param, float* m, float* v, const float* grad,
                                              void* copy, size_t i, const AdamWScalars& s,
                                              float decay_factor) {
  const float g = grad[i] * s.grad_scale;
  float mi = m[i];
  float vi = v[i];
  mi = mi + (1.0f - s.beta1) * (g - mi);
  vi = vi * s.beta2 + (1.0f - s.beta2) * g * g;
  float p = param[i] * decay_factor;
  const float denom = sqrtf(vi) / s.bias_correction2_sqrt + s.eps;
  p = p - s.step_size * (mi / denom);
  m[i] = mi;
  v[i] = vi;
  param[i] = p;
  if constexpr (kCopy == AdamWCopy::bf16) {
    static_cast<uint16_t*>(copy)[i] = dtype_bits::float_to_bf16(p);
  } else if constexpr (kCopy == AdamWCopy::f16) {
    static_cast<uint16_t*>(copy)[i] = dtype_bits::float_to_f16(p);
  } else if constexpr (kCopy == AdamWCopy::f32) {
    static_cast<float*>(copy)[i] = p;
  }
}

__global__ void adamw_kernel(float* param,       // (n)
                             float* m,           // (n)
                             float* v,           // (n)
                             const float* grad,  // (n)
                             size_t n, AdamWScalars s) {
  for (size_t i = global_thread_index(); i < n; i += grid_stride())
    adamw_element<AdamWCopy::none>(param, m, v, grad, nullptr, i, s, s.decay_factor);
}

// Segments of one adamw_update_segments launch, by value (1.6 KB of kernel parameters). Segment
// k owns blocks [first_block[k], first_block[k + 1]) of a 1-D grid: as many as its length needs
// (capped as any grid-stride loop's), so a short segment (a bias) takes one block, not as many as
// the longest.
constexpr unsigned kMaxAdamWSegments = 64;
struct AdamWSegmentTable {
  size_t offset[kMaxAdamWSegments];
  size_t count[kMaxAdamWSegments];
  float decay_factor[kMaxAdamWSegments];        // 1 - lr * the segment's weight decay
  unsigned first_block[kMaxAdamWSegments + 1];  // prefix sums of the segments' blocks
};

// Each block finds its segment in the table (at most 64 entries), then runs a grid-stride loop over
// that segment's elements with the segment's own blocks.
template <AdamWCopy kCopy>
__global__ void adamw_segments_kernel(float* param, float* m, float* v, const float* grad,
                                      void* copy, AdamWSegmentTable t, AdamWScalars s) {
  unsigned seg = 0;
  while (blockIdx.x >= t.first_block[seg + 1]) ++seg;
  const size_t n = t.count[seg], base = t.offset[seg];
  const size_t local = blockIdx.x - t.first_block[seg];
  const size_t stride =
      static_cast<size_t>(t.first_block[seg + 1] - t.first_block[seg]) * blockDim.x;
  for (size_t i = local * blockDim.x + threadIdx.x; i < n; i += stride)
    adamw_element<kCopy>(param, m, v, grad, copy, base + i, s, t.decay_factor[seg]);
}

// ---- reductions (gradient norm, column sums) ----

// Double accumulation keeps the global gradient norm exact enough for clipping even over
// billions of elements; the kernel is memory-bound, so the FP64 math is free.
__global__ void sum_squares_kernel(double* partials,  // (gridDim.x)
                                   const float* x,    // (n)
                                   size_t n) {
  __shared__ double scratch[kWarpSize];
  double acc = 0.0;
  for (size_t i = global_thread_index(); i < n; i += grid_stride()) {
    const double xi = static_cast<double>(x[i]);
    acc += xi * xi;
  }
  acc = block_sum(acc, scratch);
  if (threadIdx.x == 0) partials[blockIdx.x] = acc;
}

// One thread: at most kMaxReductionPartials (1024) additions, after a kernel that read the whole
// shard; a parallel tree would change the order and with it the last bits.
__global__ void sum_partials_in_order_kernel(double* result,          // (1)
                                             const double* partials,  // (count)
                                             size_t count) {
  double total = 0.0;
  for (size_t i = 0; i < count; ++i) total += partials[i];
  *result = total;
}

// Pass 1 of dbias[c] += sum_r dout[r, c] (the column sums of cuda_common.cuh): block (x, y)
// reduces column tile x over row slice y, thread (tx, ty) summing rows ty, ty + 8, ... of the
// slice, then thread ty = 0 the 8 lane sums in lane order. With one slice (partials null) that is
// the whole sum and it adds into dbias; otherwise it writes the slice's partial. In: float, or a
// 16-bit type (storage16.cuh) widened as it is read.
template <typename In>
__global__ void bias_backward_kernel(float* dbias,     // (OC) += when partials is null
                                     float* partials,  // (slices, OC) nullable
                                     const In* dout,   // (N, OC)
                                     size_t N, size_t OC, size_t rows_per_slice) {
  __shared__ float partial[kRowLanes][kColumnTile + 1];
  const size_t c = static_cast<size_t>(blockIdx.x) * kColumnTile + threadIdx.x;
  const size_t row_begin = static_cast<size_t>(blockIdx.y) * rows_per_slice;
  const size_t row_end = row_begin + rows_per_slice < N ? row_begin + rows_per_slice : N;
  float acc = 0.0f;
  if (c < OC) {
    for (size_t r = row_begin + threadIdx.y; r < row_end; r += kRowLanes)
      acc += to_f32(dout[r * OC + c]);
  }
  partial[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && c < OC) {
    float sum = 0.0f;
    for (int k = 0; k < kRowLanes; ++k) sum += partial[k][threadIdx.x];
    if (partials == nullptr) {
      dbias[c] += sum;
    } else {
      partials[blockIdx.y * OC + c] = sum;
    }
  }
}

// Pass 2 of every column sum: out[c] += sum_s partials[s, c]. Block x takes column tile x, thread
// (tx, ty) sums slices ty, ty + 8, ..., then thread ty = 0 the 8 lane sums in lane order: one
// fixed order per column, and 8 loads in flight per column rather than one thread walking all
// the slices.
__global__ void column_partials_sum_kernel(float* out,             // (C) +=
                                           const float* partials,  // (slices, C)
                                           size_t slices, size_t C) {
  __shared__ float partial[kRowLanes][kColumnTile + 1];
  const size_t c = static_cast<size_t>(blockIdx.x) * kColumnTile + threadIdx.x;
  float acc = 0.0f;
  if (c < C) {
    for (size_t s = threadIdx.y; s < slices; s += kRowLanes) acc += partials[s * C + c];
  }
  partial[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && c < C) {
    float sum = 0.0f;
    for (int k = 0; k < kRowLanes; ++k) sum += partial[k][threadIdx.x];
    out[c] += sum;
  }
}

// ---- fp32 <-> 16-bit working parameters (the host's bit-exact rounding) ----

__global__ void f32_to_bf16_kernel(uint16_t* dst, const float* src, size_t n) {  // (n) each
  for (size_t i = global_thread_index(); i < n; i += grid_stride())
    dst[i] = dtype_bits::float_to_bf16(src[i]);
}
__global__ void f32_to_f16_kernel(uint16_t* dst, const float* src, size_t n) {  // (n) each
  for (size_t i = global_thread_index(); i < n; i += grid_stride())
    dst[i] = dtype_bits::float_to_f16(src[i]);
}
__global__ void bf16_to_f32_kernel(float* dst, const uint16_t* src, size_t n) {  // (n) each
  for (size_t i = global_thread_index(); i < n; i += grid_stride())
    dst[i] = dtype_bits::bf16_to_float(src[i]);
}
__global__ void f16_to_f32_kernel(float* dst, const uint16_t* src, size_t n) {  // (n) each
  for (size_t i = global_thread_index(); i < n; i += grid_stride())
    dst[i] = dtype_bits::f16_to_float(src[i]);
}

}  // namespace

void launch_encoder_forward(cudaStream_t stream, float* out, const int32_t* tokens,
                            const float* wte, const float* wpe, size_t B, size_t T, size_t C) {
  const size_t n = B * T * C;
  if (n == 0) return;
  encoder_forward_kernel<<<grid_stride_blocks(n), kBlockSize, 0, stream>>>(out, tokens, wte, wpe, n,
                                                                           T, C);
  TZ_CUDA_CHECK_LAUNCH();
}

namespace {

// Positions per sort. The scratch holds keys and positions twice (CUB's double buffers) for this
// many, CUB's temporary storage after them; longer batches are sorted and summed in chunks, one
// after another, so each row of dwte still sums in one fixed order (chunk by chunk).
constexpr size_t kEncoderSortChunk = 131072;
constexpr size_t kEncoderSortArrayBytes = kEncoderSortChunk * sizeof(uint32_t);  // 256-aligned

// dwte_local (vocab_count, C) += dout (BT, C) scattered by token, deterministically (see
// encoder_backward_runs_kernel). The whole-vocabulary form passes vocab_start 0 and vocab_count
// 2^31, every non-negative int32 token.
void launch_encoder_backward_wte(cudaStream_t stream, const DeterministicScratch& scratch,
                                 float* dwte_local, const float* dout, const int32_t* tokens,
                                 size_t vocab_start, size_t vocab_count, size_t BT, size_t C) {
  TZ_CHECK(scratch.data != nullptr && scratch.bytes > 4 * kEncoderSortArrayBytes,
           "the CUDA embedding gradient needs the kernels workspace",
           "call set_workspace() with workspace_bytes() bytes of device memory first");
  TZ_CHECK(vocab_count <= (size_t{1} << 31), "encoder backward: vocab_count too large",
           "a vocabulary range holds at most 2^31 rows");
  auto* base = static_cast<char*>(scratch.data);
  uint32_t* key_buffers[2] = {reinterpret_cast<uint32_t*>(base),  // (kEncoderSortChunk) each
                              reinterpret_cast<uint32_t*>(base + kEncoderSortArrayBytes)};
  uint32_t* position_buffers[2] = {// (kEncoderSortChunk) each
                                   reinterpret_cast<uint32_t*>(base + 2 * kEncoderSortArrayBytes),
                                   reinterpret_cast<uint32_t*>(base + 3 * kEncoderSortArrayBytes)};
  void* temp = base + 4 * kEncoderSortArrayBytes;
  const size_t temp_capacity = scratch.bytes - 4 * kEncoderSortArrayBytes;
  // The keys go up to vocab_count itself (tokens out of range), so the sort looks at its bits.
  const int end_bit = static_cast<int>(std::bit_width(static_cast<uint64_t>(vocab_count)));
  for (size_t begin = 0; begin < BT; begin += kEncoderSortChunk) {
    const size_t count = BT - begin < kEncoderSortChunk ? BT - begin : kEncoderSortChunk;
    encoder_sort_keys_kernel<<<grid_stride_blocks(count), kBlockSize, 0, stream>>>(
        key_buffers[0], position_buffers[0], tokens + begin, vocab_start, vocab_count, count);
    TZ_CUDA_CHECK_LAUNCH();
    cub::DoubleBuffer<uint32_t> keys(key_buffers[0], key_buffers[1]);
    cub::DoubleBuffer<uint32_t> positions(position_buffers[0], position_buffers[1]);
    const int items = static_cast<int>(count);
    size_t temp_bytes = 0;
    TZ_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, keys, positions, items, 0,
                                                  end_bit, stream));
    TZ_CHECK(temp_bytes <= temp_capacity,
             "CUB's radix sort wants " + std::to_string(temp_bytes) + " bytes of scratch, " +
                 std::to_string(temp_capacity) + " are left in the kernels workspace",
             "enlarge kDeterministicScratchBytes (cuda_kernels.cu)");
    TZ_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(temp, temp_bytes, keys, positions, items, 0,
                                                  end_bit, stream));
    encoder_backward_runs_kernel<<<grid_stride_blocks(count * C), kBlockSize, 0, stream>>>(
        dwte_local, dout + begin * C, keys.Current(), positions.Current(), vocab_count, count, C);
    TZ_CUDA_CHECK_LAUNCH();
  }
}

}  // namespace

void launch_encoder_backward(cudaStream_t stream, const DeterministicScratch& scratch, float* dwte,
                             float* dwpe, const float* dout, const int32_t* tokens, size_t B,
                             size_t T, size_t C) {
  const size_t n = B * T * C;
  if (n == 0) return;
  launch_encoder_backward_wte(stream, scratch, dwte, dout, tokens, 0, size_t{1} << 31, B * T, C);
  encoder_backward_wpe_kernel<<<grid_stride_blocks(T * C), kBlockSize, 0, stream>>>(dwpe, dout, B,
                                                                                    T, C);
  TZ_CUDA_CHECK_LAUNCH();
}

void launch_encoder_forward_vocab_range(cudaStream_t stream, float* out, const int32_t* tokens,
                                        const float* wte_local, const float* wpe,
                                        size_t vocab_start, size_t vocab_count, size_t B, size_t T,
                                        size_t C) {
  const size_t n = B * T * C;
  if (n == 0) return;
  encoder_forward_vocab_range_kernel<<<grid_stride_blocks(n), kBlockSize, 0, stream>>>(
      out, tokens, wte_local, wpe, vocab_start, vocab_count, n, T, C);
  TZ_CUDA_CHECK_LAUNCH();
}

void launch_encoder16_forward(cudaStream_t stream, float* out, const int32_t* tokens,
                              const void* wte_local, const void* wpe, DType type,
                              size_t vocab_start, size_t vocab_count, size_t B, size_t T,
                              size_t C) {
  const size_t n = B * T * C;
  if (n == 0) return;
  with_16bit_type(type, [&](auto p) {
    using P = decltype(p);
    encoder_forward_vocab_range_kernel<<<grid_stride_blocks(n), kBlockSize, 0, stream>>>(
        out, tokens, static_cast<const P*>(wte_local), static_cast<const P*>(wpe), vocab_start,
        vocab_count, n, T, C);
    TZ_CUDA_CHECK_LAUNCH();
  });
}

void launch_encoder_backward_vocab_range(cudaStream_t stream, const DeterministicScratch& scratch,
                                         float* dwte_local, float* dwpe, const float* dout,
                                         const int32_t* tokens, size_t vocab_start,
                                         size_t vocab_count, size_t B, size_t T, size_t C) {
  const size_t n = B * T * C;
  if (n == 0) return;
  if (vocab_count > 0) {
    launch_encoder_backward_wte(stream, scratch, dwte_local, dout, tokens, vocab_start, vocab_count,
                                B * T, C);
  }
  if (dwpe != nullptr) {
    encoder_backward_wpe_kernel<<<grid_stride_blocks(T * C), kBlockSize, 0, stream>>>(dwpe, dout, B,
                                                                                      T, C);
    TZ_CUDA_CHECK_LAUNCH();
  }
}

void launch_gelu_forward(cudaStream_t stream, float* out, const float* inp, size_t n) {
  if (n == 0) return;
  gelu_forward_kernel<<<grid_stride_blocks(n), kBlockSize, 0, stream>>>(out, inp, n);
  TZ_CUDA_CHECK_LAUNCH();
}

void launch_gelu_backward(cudaStream_t stream, float* dinp, const float* inp, const float* dout,
                          size_t n) {
  if (n == 0) return;
  gelu_backward_kernel<<<grid_stride_blocks(n), kBlockSize, 0, stream>>>(dinp, inp, dout, n, false);
  TZ_CUDA_CHECK_LAUNCH();
}

void launch_gelu_backward_in_place(cudaStream_t stream, float* d, const float* inp, size_t n) {
  if (n == 0) return;
  gelu_backward_kernel<<<grid_stride_blocks(n), kBlockSize, 0, stream>>>(d, inp, d, n, true);
  TZ_CUDA_CHECK_LAUNCH();
}

void launch_residual_forward(cudaStream_t stream, float* out, const float* a, const float* b,
                             size_t n) {
  if (n == 0) return;
  residual_forward_kernel<<<grid_stride_blocks(n), kBlockSize, 0, stream>>>(out, a, b, n);
  TZ_CUDA_CHECK_LAUNCH();
}

void launch_residual_backward(cudaStream_t stream, float* da, float* db, const float* dout,
                              size_t n) {
  if (n == 0) return;
  residual_backward_kernel<<<grid_stride_blocks(n), kBlockSize, 0, stream>>>(da, db, dout, n);
  TZ_CUDA_CHECK_LAUNCH();
}

void launch_scale(cudaStream_t stream, float* x, size_t n, float s) {
  if (n == 0) return;
  scale_kernel<<<grid_stride_blocks(n), kBlockSize, 0, stream>>>(x, n, s);
  TZ_CUDA_CHECK_LAUNCH();
}

namespace {
template <typename Unit>
void launch_transpose_units(cudaStream_t stream, void* out, const void* in, size_t X, size_t Y,
                            size_t row_bytes) {
  const size_t width = row_bytes / sizeof(Unit), n = X * Y * width;
  transpose_blocks_kernel<Unit><<<grid_stride_blocks(n), kBlockSize, 0, stream>>>(
      static_cast<Unit*>(out), static_cast<const Unit*>(in), X, Y, width);
  TZ_CUDA_CHECK_LAUNCH();
}
}  // namespace

void launch_transpose_blocks(cudaStream_t stream, void* out, const void* in, size_t X, size_t Y,
                             size_t row_bytes) {
  if (X * Y * row_bytes == 0) return;
  const auto fits = [&](size_t unit) {
    return row_bytes % unit == 0 && reinterpret_cast<uintptr_t>(out) % unit == 0 &&
           reinterpret_cast<uintptr_t>(in) % unit == 0;
  };
  if (fits(16))
    launch_transpose_units<uint4>(stream, out, in, X, Y, row_bytes);
  else if (fits(4))
    launch_transpose_units<uint32_t>(stream, out, in, X, Y, row_bytes);
  else if (fits(2))
    launch_transpose_units<uint16_t>(stream, out, in, X, Y, row_bytes);
  else
    launch_transpose_units<uint8_t>(stream, out, in, X, Y, row_bytes);
}

void launch_convert_from_f32(cudaStream_t stream, void* dst, DType dst_type, const float* src,
                             size_t n) {
  if (n == 0) return;
  auto* bits = static_cast<uint16_t*>(dst);
  switch (dst_type) {
    case DType::f32:
      TZ_CUDA_CHECK(cudaMemcpyAsync(dst, src, n * sizeof(float), cudaMemcpyDeviceToDevice, stream));
      return;
    case DType::bf16:
      f32_to_bf16_kernel<<<grid_stride_blocks(n), kBlockSize, 0, stream>>>(bits, src, n);
      break;
    case DType::f16:
      f32_to_f16_kernel<<<grid_stride_blocks(n), kBlockSize, 0, stream>>>(bits, src, n);
      break;
  }
  TZ_CUDA_CHECK_LAUNCH();
}

void launch_convert_to_f32(cudaStream_t stream, float* dst, const void* src, DType src_type,
                           size_t n) {
  if (n == 0) return;
  const auto* bits = static_cast<const uint16_t*>(src);
  switch (src_type) {
    case DType::f32:
      TZ_CUDA_CHECK(cudaMemcpyAsync(dst, src, n * sizeof(float), cudaMemcpyDeviceToDevice, stream));
      return;
    case DType::bf16:
      bf16_to_f32_kernel<<<grid_stride_blocks(n), kBlockSize, 0, stream>>>(dst, bits, n);
      break;
    case DType::f16:
      f16_to_f32_kernel<<<grid_stride_blocks(n), kBlockSize, 0, stream>>>(dst, bits, n);
      break;
  }
  TZ_CUDA_CHECK_LAUNCH();
}

namespace {

void check_adamw_step(const AdamWParams& p) {
  TZ_CHECK(p.step >= 1, "adamw_update: step must be >= 1, got " + std::to_string(p.step),
           "the step count is 1-based (bias correction divides by 1 - beta^step)");
}

float decay_multiplier(float lr, float weight_decay) {
  return static_cast<float>(1.0 - static_cast<double>(lr) * static_cast<double>(weight_decay));
}

AdamWScalars adamw_scalars(const AdamWParams& p) {
  const double step = static_cast<double>(p.step);
  const double bias_correction1 = 1.0 - std::pow(static_cast<double>(p.beta1), step);
  const double bias_correction2 = 1.0 - std::pow(static_cast<double>(p.beta2), step);
  AdamWScalars s{};
  s.beta1 = p.beta1;
  s.beta2 = p.beta2;
  s.eps = p.eps;
  s.grad_scale = p.grad_scale;
  s.decay_factor = decay_multiplier(p.lr, p.weight_decay);
  s.step_size = static_cast<float>(static_cast<double>(p.lr) / bias_correction1);
  s.bias_correction2_sqrt = static_cast<float>(std::sqrt(bias_correction2));
  return s;
}

AdamWCopy adamw_copy_kind(const void* copy, DType copy_type) {
  if (copy == nullptr) return AdamWCopy::none;
  if (copy_type == DType::bf16) return AdamWCopy::bf16;
  return copy_type == DType::f16 ? AdamWCopy::f16 : AdamWCopy::f32;
}

template <AdamWCopy kCopy>
void launch_segments_kernel(cudaStream_t stream, unsigned blocks, float* param, float* m, float* v,
                            const float* grad, void* copy, const AdamWSegmentTable& t,
                            const AdamWScalars& s) {
  adamw_segments_kernel<kCopy><<<blocks, kBlockSize, 0, stream>>>(param, m, v, grad, copy, t, s);
}

}  // namespace

void launch_adamw(cudaStream_t stream, float* param, float* m, float* v, const float* grad,
                  size_t n, const AdamWParams& p) {
  check_adamw_step(p);
  if (n == 0) return;
  adamw_kernel<<<grid_stride_blocks(n), kBlockSize, 0, stream>>>(param, m, v, grad, n,
                                                                 adamw_scalars(p));
  TZ_CUDA_CHECK_LAUNCH();
}

void launch_adamw_segments(cudaStream_t stream, float* param, float* m, float* v, const float* grad,
                           void* copy, DType copy_type, const AdamWSegment* segments,
                           size_t num_segments, const AdamWParams& p) {
  check_adamw_step(p);
  const AdamWScalars s = adamw_scalars(p);
  size_t i = 0;
  while (i < num_segments) {  // up to 64 non-empty segments per launch
    AdamWSegmentTable t{};
    unsigned used = 0;
    for (; i < num_segments && used < kMaxAdamWSegments; ++i) {
      if (segments[i].count == 0) continue;
      t.offset[used] = segments[i].offset;
      t.count[used] = segments[i].count;
      t.decay_factor[used] = decay_multiplier(p.lr, segments[i].weight_decay);
      t.first_block[used + 1] = t.first_block[used] + grid_stride_blocks(segments[i].count);
      ++used;
    }
    if (used == 0) continue;
    const unsigned blocks = t.first_block[used];
    // The copy's type as a template argument: the update without a copy has no branch in it.
    switch (adamw_copy_kind(copy, copy_type)) {
      case AdamWCopy::none:
        launch_segments_kernel<AdamWCopy::none>(stream, blocks, param, m, v, grad, copy, t, s);
        break;
      case AdamWCopy::bf16:
        launch_segments_kernel<AdamWCopy::bf16>(stream, blocks, param, m, v, grad, copy, t, s);
        break;
      case AdamWCopy::f16:
        launch_segments_kernel<AdamWCopy::f16>(stream, blocks, param, m, v, grad, copy, t, s);
        break;
      case AdamWCopy::f32:
        launch_segments_kernel<AdamWCopy::f32>(stream, blocks, param, m, v, grad, copy, t, s);
        break;
    }
    TZ_CUDA_CHECK_LAUNCH();
  }
}

void launch_add_bias(cudaStream_t stream, float* out, const float* bias, size_t N, size_t OC) {
  const size_t n = N * OC;
  if (n == 0) return;
  add_bias_kernel<<<grid_stride_blocks(n), kBlockSize, 0, stream>>>(out, bias, n, OC);
  TZ_CUDA_CHECK_LAUNCH();
}

size_t launch_sum_squares_partials(cudaStream_t stream, double* partials, size_t max_partials,
                                   const float* x, size_t n) {
  if (n == 0 || max_partials == 0) return 0;
  unsigned blocks = grid_stride_blocks(n);
  if (blocks > max_partials) blocks = static_cast<unsigned>(max_partials);
  sum_squares_kernel<<<blocks, kBlockSize, 0, stream>>>(partials, x, n);
  TZ_CUDA_CHECK_LAUNCH();
  return blocks;
}

void launch_sum_partials_in_order(cudaStream_t stream, double* result, const double* partials,
                                  size_t count) {
  sum_partials_in_order_kernel<<<1, 1, 0, stream>>>(result, partials, count);
  TZ_CUDA_CHECK_LAUNCH();
}

namespace {

template <typename In>
void bias_backward(cudaStream_t stream, const DeterministicScratch& scratch, float* dbias,
                   const In* dout, size_t N, size_t OC) {
  if (N == 0 || OC == 0) return;
  const size_t column_blocks = ceil_div(OC, static_cast<size_t>(kColumnTile));
  TZ_CHECK(column_blocks <= kMaxGridX, "bias gradient too wide: " + std::to_string(OC),
           "this many output channels cannot be launched in one grid");
  const ColumnSlices split = column_slices(N, OC, scratch.bytes / sizeof(float));
  float* partials = split.slices > 1 ? static_cast<float*>(scratch.data) : nullptr;  // (slices, OC)
  const dim3 grid(static_cast<unsigned>(column_blocks), static_cast<unsigned>(split.slices));
  const dim3 block(kColumnTile, kRowLanes);
  bias_backward_kernel<<<grid, block, 0, stream>>>(dbias, partials, dout, N, OC,
                                                   split.rows_per_slice);
  TZ_CUDA_CHECK_LAUNCH();
  if (partials != nullptr) launch_column_partials_sum(stream, dbias, partials, split.slices, OC);
}

}  // namespace

void launch_bias_backward(cudaStream_t stream, const DeterministicScratch& scratch, float* dbias,
                          const float* dout, size_t N, size_t OC) {
  bias_backward(stream, scratch, dbias, dout, N, OC);
}

void launch_bias_backward(cudaStream_t stream, const DeterministicScratch& scratch, float* dbias,
                          const void* dout, DType dout_type, size_t N, size_t OC) {
  with_16bit_type(dout_type, [&](auto t) {
    bias_backward(stream, scratch, dbias, static_cast<const decltype(t)*>(dout), N, OC);
  });
}

void launch_add_bias(cudaStream_t stream, void* out, DType out_type, const void* bias,
                     DType bias_type, size_t N, size_t OC) {
  const size_t n = N * OC;
  if (n == 0) return;
  with_16bit_type(bias_type, [&](auto b) {
    using Bias = decltype(b);
    const auto* typed_bias = static_cast<const Bias*>(bias);
    if (out_type == DType::f32) {
      add_bias_kernel<<<grid_stride_blocks(n), kBlockSize, 0, stream>>>(static_cast<float*>(out),
                                                                        typed_bias, n, OC);
    } else {
      TZ_CHECK(out_type == bias_type,
               std::string("add_bias: ") + dtype_name(out_type) + " output, " +
                   dtype_name(bias_type) + " bias",
               "the output is fp32 or of the bias's type");
      add_bias_kernel<<<grid_stride_blocks(n), kBlockSize, 0, stream>>>(static_cast<Bias*>(out),
                                                                        typed_bias, n, OC);
    }
    TZ_CUDA_CHECK_LAUNCH();
  });
}

void launch_gelu_forward(cudaStream_t stream, void* out, const void* inp, DType type, size_t n) {
  if (n == 0) return;
  with_16bit_type(type, [&](auto t) {
    using T = decltype(t);
    gelu_forward_kernel<<<grid_stride_blocks(n), kBlockSize, 0, stream>>>(
        static_cast<T*>(out), static_cast<const T*>(inp), n);
    TZ_CUDA_CHECK_LAUNCH();
  });
}

void launch_gelu_backward_in_place(cudaStream_t stream, void* d, const void* inp, DType type,
                                   size_t n) {
  if (n == 0) return;
  with_16bit_type(type, [&](auto t) {
    using T = decltype(t);
    gelu_backward_kernel<<<grid_stride_blocks(n), kBlockSize, 0, stream>>>(
        static_cast<T*>(d), static_cast<const T*>(inp), static_cast<const T*>(d), n, true);
    TZ_CUDA_CHECK_LAUNCH();
  });
}

void launch_column_partials_sum(cudaStream_t stream, float* out, const float* partials,
                                size_t slices, size_t C) {
  if (slices == 0 || C == 0) return;
  const size_t column_blocks = ceil_div(C, static_cast<size_t>(kColumnTile));
  TZ_CHECK(column_blocks <= kMaxGridX, "column sum too wide: " + std::to_string(C),
           "this many columns cannot be launched in one grid");
  column_partials_sum_kernel<<<static_cast<unsigned>(column_blocks), dim3(kColumnTile, kRowLanes),
                               0, stream>>>(out, partials, slices, C);
  TZ_CUDA_CHECK_LAUNCH();
}

}  // namespace tierzero::kernels::cuda_impl
