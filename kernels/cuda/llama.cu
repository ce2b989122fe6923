// The Llama family's operations on CUDA, in the style of the GPT-2 kernels beside them (clarity
// over speed): RMSNorm (one warp per row; the gain's gradient as a two-pass column sum, per-slice
// partials then each column's partials in slice order, so it repeats bit for bit), rotary
// embeddings (one thread per rotated pair), SwiGLU (grid-stride), and grouped-query attention on
// the grouped q, k, v layout (kernels.hpp): one warp per query row forward; backward a query-row
// kernel then a key-row kernel that sums each kv head's gradient over its group's query heads, so
// every gradient element has one writer.
#include "cuda/cuda_common.cuh"
#include "cuda/storage16.cuh"

namespace tierzero::kernels::cuda_impl {

namespace {

__device__ __forceinline__ size_t warp_row() {
  return static_cast<size_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / kWarpSize;
}

// The rest of an RMSNorm of one row by one warp, after the sum of squares' pass: `sq` is this
// lane's sum of x[c]^2 over c = lane, lane + 32, ..., in that order. y (C) = weight (x rstd); lane
// 0 writes rstd. Both forward kernels end here, so the fused residual + RMSNorm gives the bits of
// residual_forward then rmsnorm_forward. T, the gain's and y's type: float, or a 16-bit type
// (storage16.cuh) read widened and written rounded from the fp32 value.
template <typename T>
__device__ __forceinline__ void rmsnorm_row_finish(T* y,             // (C)
                                                   float* rstd,      // (1)
                                                   const float* x,   // (C)
                                                   const T* weight,  // (C)
                                                   size_t C, size_t lane, float sq, float eps) {
  const float s = rsqrtf(warp_sum(sq) / static_cast<float>(C) + eps);
  for (size_t c = lane; c < C; c += kWarpSize) y[c] = from_f32<T>(to_f32(weight[c]) * (x[c] * s));
  if (lane == 0) *rstd = s;
}

template <typename T>
__global__ void rmsnorm_forward_kernel(T* out,            // (N, C)
                                       float* rstd,       // (N)
                                       const float* inp,  // (N, C)
                                       const T* weight,   // (C)
                                       size_t N, size_t C, float eps) {
  const size_t row = warp_row();
  const size_t lane = threadIdx.x % kWarpSize;
  if (row >= N) return;  // warp-uniform
  const float* x = inp + row * C;
  float sq = 0.0f;
  for (size_t c = lane; c < C; c += kWarpSize) sq += x[c] * x[c];
  rmsnorm_row_finish(out + row * C, rstd + row, x, weight, C, lane, sq, eps);
}

// residual = a + b and out = rmsnorm(residual), one warp per row: the sum of squares' pass is the
// add itself (each lane squares the values it writes, in the order rmsnorm_forward_kernel reads
// them), and the normalising pass re-reads the row this lane just wrote, from cache. Each lane
// reads a[c], b[c] and writes residual[c] for the same c, so residual may alias a or b.
template <typename T>
__global__ void fused_residual_rmsnorm_forward_kernel(float* residual,  // (N, C)
                                                      T* out,           // (N, C)
                                                      float* rstd,      // (N)
                                                      const float* a,   // (N, C)
                                                      const float* b,   // (N, C)
                                                      const T* weight,  // (C)
                                                      size_t N, size_t C, float eps) {
  const size_t row = warp_row();
  const size_t lane = threadIdx.x % kWarpSize;
  if (row >= N) return;  // warp-uniform
  float* r = residual + row * C;
  float sq = 0.0f;
  for (size_t c = lane; c < C; c += kWarpSize) {
    const float v = a[row * C + c] + b[row * C + c];  // residual_forward's one rounding
    r[c] = v;
    sq += v * v;
  }
  rmsnorm_row_finish(out + row * C, rstd + row, r, weight, C, lane, sq, eps);
}

// dinp += s (dnorm - x s^2 mean(dnorm x)), dnorm = dout weight; one warp per row. T: the
// gain's type, as rmsnorm_row_finish's; dinp16 (nullable) the new dinp rounded to it, as
// layernorm_backward_input_kernel's.
template <typename T>
__global__ void rmsnorm_backward_input_kernel(float* dinp, T* dinp16, const float* dout,
                                              const float* inp, const T* weight, const float* rstd,
                                              size_t N, size_t C) {
  const size_t row = warp_row();
  const size_t lane = threadIdx.x % kWarpSize;
  if (row >= N) return;
  const float* x = inp + row * C;
  const float* dy = dout + row * C;
  float* dx = dinp + row * C;
  const float s = rstd[row];
  float dot = 0.0f;
  for (size_t c = lane; c < C; c += kWarpSize) dot += dy[c] * to_f32(weight[c]) * x[c];
  const float k = warp_sum(dot) / static_cast<float>(C) * s * s;
  T* dx16 = dinp16 != nullptr ? dinp16 + row * C : nullptr;  // (C)
  for (size_t c = lane; c < C; c += kWarpSize) {
    const float v = dx[c] + s * (dy[c] * to_f32(weight[c]) - x[c] * k);
    dx[c] = v;
    if (dx16 != nullptr) dx16[c] = from_f32<T>(v);
  }
}

// Pass 1 of dweight[c] += sum_r dout[r,c] * inp[r,c] * rstd[r] (the column sums of
// cuda_common.cuh): block (x, y) reduces column tile x over row slice y, thread (tx, ty) summing
// rows ty, ty + 8, ... of the slice, then thread ty = 0 the 8 lane sums in lane order. With one
// slice (partials null) it adds into dweight; otherwise it writes the slice's partial.
__global__ void rmsnorm_backward_weight_kernel(float* dweight,     // (C) += when partials is null
                                               float* partials,    // (slices, C) nullable
                                               const float* dout,  // (N, C)
                                               const float* inp,   // (N, C)
                                               const float* rstd,  // (N)
                                               size_t N, size_t C, size_t rows_per_slice) {
  __shared__ float partial[kRowLanes][kColumnTile + 1];
  const size_t c = static_cast<size_t>(blockIdx.x) * kColumnTile + threadIdx.x;
  const size_t row_begin = static_cast<size_t>(blockIdx.y) * rows_per_slice;
  const size_t row_end = row_begin + rows_per_slice < N ? row_begin + rows_per_slice : N;
  float dw = 0.0f;
  if (c < C)
    for (size_t r = row_begin + threadIdx.y; r < row_end; r += kRowLanes)
      dw += dout[r * C + c] * (inp[r * C + c] * rstd[r]);
  partial[threadIdx.y][threadIdx.x] = dw;
  __syncthreads();
  if (threadIdx.y == 0 && c < C) {
    float sum = 0.0f;
    for (int k = 0; k < kRowLanes; ++k) sum += partial[k][threadIdx.x];
    if (partials == nullptr) {
      dweight[c] += sum;
    } else {
      partials[blockIdx.y * C + c] = sum;
    }
  }
}

// The same frequencies as rope_inv_freq (rope.cpp), computed per thread.
__device__ float inv_freq(size_t i, size_t hs, RopeParams p) {
  float f = 1.0f / powf(p.theta, static_cast<float>(2 * i) / static_cast<float>(hs));
  if (!p.llama3) return f;
  const float wavelen = 6.283185307179586f / f;
  if (wavelen > p.original_max / p.low_freq_factor) return f / p.factor;
  if (wavelen < p.original_max / p.high_freq_factor) return f;
  const float smooth =
      (p.original_max / wavelen - p.low_freq_factor) / (p.high_freq_factor - p.low_freq_factor);
  return (1.0f - smooth) * f / p.factor + smooth * f;
}

// One thread per (b, t, block, rotated head, pair i). E: float, or a 16-bit type (storage16.cuh)
// read widened and written rounded, the same fp32 arithmetic between.
template <typename E>
__global__ void rope_kernel(E* x, size_t B, size_t T, size_t blocks, size_t block_heads,
                            size_t rotated_heads, size_t hs, size_t pos0, RopeParams p,
                            float sign) {
  const size_t half = hs / 2;
  const size_t n = B * T * blocks * rotated_heads * half;
  for (size_t idx = global_thread_index(); idx < n; idx += grid_stride()) {
    const size_t i = idx % half;
    size_t rest = idx / half;
    const size_t h = rest % rotated_heads;
    rest /= rotated_heads;
    const size_t g = rest % blocks;
    const size_t bt = rest / blocks;
    const size_t t = bt % T;
    E* head = x + bt * blocks * block_heads * hs + (g * block_heads + h) * hs;
    const float angle = static_cast<float>(pos0 + t) * inv_freq(i, hs, p);
    const float c = cosf(angle), s = sign * sinf(angle);
    const float x1 = to_f32(head[i]), x2 = to_f32(head[half + i]);
    head[i] = from_f32<E>(x1 * c - x2 * s);
    head[half + i] = from_f32<E>(x2 * c + x1 * s);
  }
}

// E: float or a 16-bit type, as rope_kernel's.
template <typename E>
__global__ void swiglu_forward_kernel(E* out, const E* inp, size_t N, size_t H) {
  for (size_t idx = global_thread_index(); idx < N * H; idx += grid_stride()) {
    const size_t n = idx / H, i = idx % H;
    const float g = to_f32(inp[n * 2 * H + i]), u = to_f32(inp[n * 2 * H + H + i]);
    out[idx] = from_f32<E>(g / (1.0f + expf(-g)) * u);
  }
}

template <typename E>
__global__ void swiglu_backward_kernel(E* dinp, const E* inp, const E* dout, size_t N, size_t H) {
  for (size_t idx = global_thread_index(); idx < N * H; idx += grid_stride()) {
    const size_t n = idx / H, i = idx % H;
    const float g = to_f32(inp[n * 2 * H + i]), u = to_f32(inp[n * 2 * H + H + i]);
    const float dy = to_f32(dout[idx]);
    const float sig = 1.0f / (1.0f + expf(-g));
    dinp[n * 2 * H + i] = from_f32<E>(dy * u * sig * (1.0f + g * (1.0f - sig)));  // written whole
    dinp[n * 2 * H + H + i] = from_f32<E>(dy * g * sig);
  }
}

// The grouped layout's offsets (see kernels.hpp): query head h, its group's k and v.
struct Grouped {
  size_t rep, hs, row;
  __device__ size_t q(size_t h) const { return (h / rep * (rep + 2) + h % rep) * hs; }
  __device__ size_t k(size_t h) const { return (h / rep * (rep + 2) + rep) * hs; }
  __device__ size_t v(size_t h) const { return k(h) + hs; }
};

__device__ __forceinline__ float dot(const float* a, const float* b, size_t n) {
  float s = 0.0f;
  for (size_t i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

// One warp per query row (b, h, t).
__global__ void gqa_forward_kernel(float* out, float* att, const float* qkv, size_t B, size_t T,
                                   size_t NH, Grouped L) {
  const size_t row = warp_row();
  const size_t lane = threadIdx.x % kWarpSize;
  if (row >= B * NH * T) return;
  const size_t t = row % T, h = (row / T) % NH, b = row / T / NH;
  const size_t hs = L.hs;
  const float scale = 1.0f / sqrtf(static_cast<float>(hs));
  const float* q = qkv + (b * T + t) * L.row + L.q(h);
  const float* k0 = qkv + b * T * L.row + L.k(h);
  const float* v0 = qkv + b * T * L.row + L.v(h);
  float* att_row = att + row * T;
  float max_score = -CUDART_INF_F;
  for (size_t t2 = lane; t2 <= t; t2 += kWarpSize) {
    const float score = dot(q, k0 + t2 * L.row, hs) * scale;
    att_row[t2] = score;
    max_score = fmaxf(max_score, score);
  }
  max_score = warp_max(max_score);
  float sum = 0.0f;
  for (size_t t2 = lane; t2 <= t; t2 += kWarpSize) {
    const float e = expf(att_row[t2] - max_score);
    att_row[t2] = e;
    sum += e;
  }
  const float inv_sum = 1.0f / warp_sum(sum);
  for (size_t t2 = lane; t2 < T; t2 += kWarpSize)
    att_row[t2] = t2 <= t ? att_row[t2] * inv_sum : 0.0f;
  __syncwarp();
  float* y = out + (b * T + t) * NH * hs + h * hs;
  for (size_t d = lane; d < hs; d += kWarpSize) {
    float acc = 0.0f;
    for (size_t t2 = 0; t2 <= t; ++t2) acc += att_row[t2] * v0[t2 * L.row + d];
    y[d] = acc;
  }
}

// Per query row: the pre-softmax gradient into datt, then dq.
__global__ void gqa_backward_query_kernel(float* dqkv, float* datt, const float* dout,
                                          const float* qkv, const float* att, size_t B, size_t T,
                                          size_t NH, Grouped L) {
  const size_t row = warp_row();
  const size_t lane = threadIdx.x % kWarpSize;
  if (row >= B * NH * T) return;
  const size_t t = row % T, h = (row / T) % NH, b = row / T / NH;
  const size_t hs = L.hs;
  const float scale = 1.0f / sqrtf(static_cast<float>(hs));
  const float* dy = dout + (b * T + t) * NH * hs + h * hs;
  const float* k0 = qkv + b * T * L.row + L.k(h);
  const float* v0 = qkv + b * T * L.row + L.v(h);
  const float* att_row = att + row * T;
  float* dpre = datt + row * T;
  float row_dot = 0.0f;
  for (size_t t2 = lane; t2 <= t; t2 += kWarpSize) {
    const float g = dot(dy, v0 + t2 * L.row, hs);
    dpre[t2] = g;
    row_dot += att_row[t2] * g;
  }
  row_dot = warp_sum(row_dot);
  for (size_t t2 = lane; t2 <= t; t2 += kWarpSize) dpre[t2] = att_row[t2] * (dpre[t2] - row_dot);
  __syncwarp();
  float* dq = dqkv + (b * T + t) * L.row + L.q(h);
  for (size_t d = lane; d < hs; d += kWarpSize) {
    float acc = 0.0f;
    for (size_t t2 = 0; t2 <= t; ++t2) acc += dpre[t2] * k0[t2 * L.row + d];
    dq[d] += scale * acc;
  }
}

// Per key row (b, kv group g, t2): dk, dv summed over the group's query heads and later queries.
__global__ void gqa_backward_key_kernel(float* dqkv, const float* dpre, const float* dout,
                                        const float* qkv, const float* att, size_t B, size_t T,
                                        size_t NH, size_t KVH, Grouped L) {
  const size_t row = warp_row();
  const size_t lane = threadIdx.x % kWarpSize;
  if (row >= B * KVH * T) return;
  const size_t t2 = row % T, g = (row / T) % KVH, b = row / T / KVH;
  const size_t hs = L.hs;
  const float scale = 1.0f / sqrtf(static_cast<float>(hs));
  float* dk = dqkv + (b * T + t2) * L.row + L.k(g * L.rep);
  float* dv = dk + hs;
  for (size_t d = lane; d < hs; d += kWarpSize) {
    float dk_acc = 0.0f, dv_acc = 0.0f;
    for (size_t j = 0; j < L.rep; ++j) {
      const size_t h = g * L.rep + j;
      const float* q0 = qkv + b * T * L.row + L.q(h);
      const float* dy0 = dout + b * T * NH * hs + h * hs;
      const float* dpre_col = dpre + (b * NH + h) * T * T + t2;
      const float* att_col = att + (b * NH + h) * T * T + t2;
      for (size_t t = t2; t < T; ++t) {
        dk_acc += dpre_col[t * T] * q0[t * L.row + d];
        dv_acc += att_col[t * T] * dy0[t * NH * hs + d];
      }
    }
    dk[d] += scale * dk_acc;
    dv[d] += dv_acc;
  }
}

Grouped grouped(const char* op, size_t NH, size_t KVH, size_t hs) {
  TZ_CHECK(NH > 0 && KVH > 0 && NH % KVH == 0,
           std::string(op) + ": NH (" + std::to_string(NH) + ") must be a multiple of KVH (" +
               std::to_string(KVH) + ")",
           "check n_head and num_key_value_heads in the model config");
  const size_t rep = NH / KVH;
  return Grouped{rep, hs, KVH * (rep + 2) * hs};
}

template <typename T>
void rmsnorm_forward(cudaStream_t stream, T* out, float* rstd, const float* inp, const T* weight,
                     size_t N, size_t C, float eps) {
  if (N == 0 || C == 0) return;
  rmsnorm_forward_kernel<<<warp_per_row_blocks(N), kBlockSize, 0, stream>>>(out, rstd, inp, weight,
                                                                            N, C, eps);
  TZ_CUDA_CHECK_LAUNCH();
}

template <typename T>
void fused_residual_rmsnorm_forward(cudaStream_t stream, float* residual, T* out, float* rstd,
                                    const float* a, const float* b, const T* weight, size_t N,
                                    size_t C, float eps) {
  if (N == 0 || C == 0) return;
  fused_residual_rmsnorm_forward_kernel<<<warp_per_row_blocks(N), kBlockSize, 0, stream>>>(
      residual, out, rstd, a, b, weight, N, C, eps);
  TZ_CUDA_CHECK_LAUNCH();
}

template <typename T>
void rmsnorm_backward(cudaStream_t stream, const DeterministicScratch& scratch, float* dinp,
                      T* dinp16, float* dweight, const float* dout, const float* inp,
                      const T* weight, const float* rstd, size_t N, size_t C) {
  if (N == 0 || C == 0) return;
  // The gain's kernels run first, as layernorm's: they read dout, which the input kernel would
  // overwrite if dinp aliased dout.
  const size_t column_blocks = ceil_div(C, static_cast<size_t>(kColumnTile));
  TZ_CHECK(column_blocks <= kMaxGridX, "rmsnorm_backward: C too large: " + std::to_string(C),
           "this many channels cannot be launched in one grid");
  const ColumnSlices split = column_slices(N, C, scratch.bytes / sizeof(float));
  float* partials = split.slices > 1 ? static_cast<float*>(scratch.data) : nullptr;  // (slices, C)
  const dim3 grid(static_cast<unsigned>(column_blocks), static_cast<unsigned>(split.slices));
  rmsnorm_backward_weight_kernel<<<grid, dim3(kColumnTile, kRowLanes), 0, stream>>>(
      dweight, partials, dout, inp, rstd, N, C, split.rows_per_slice);
  TZ_CUDA_CHECK_LAUNCH();
  if (partials != nullptr) launch_column_partials_sum(stream, dweight, partials, split.slices, C);
  rmsnorm_backward_input_kernel<<<warp_per_row_blocks(N), kBlockSize, 0, stream>>>(
      dinp, dinp16, dout, inp, weight, rstd, N, C);
  TZ_CUDA_CHECK_LAUNCH();
}

}  // namespace

void launch_rmsnorm_forward(cudaStream_t stream, float* out, float* rstd, const float* inp,
                            const float* weight, size_t N, size_t C, float eps) {
  rmsnorm_forward(stream, out, rstd, inp, weight, N, C, eps);
}

void launch_fused_residual_rmsnorm_forward(cudaStream_t stream, float* residual, float* out,
                                           float* rstd, const float* a, const float* b,
                                           const float* weight, size_t N, size_t C, float eps) {
  fused_residual_rmsnorm_forward(stream, residual, out, rstd, a, b, weight, N, C, eps);
}

void launch_rmsnorm_backward(cudaStream_t stream, const DeterministicScratch& scratch, float* dinp,
                             float* dweight, const float* dout, const float* inp,
                             const float* weight, const float* rstd, size_t N, size_t C) {
  rmsnorm_backward(stream, scratch, dinp, static_cast<float*>(nullptr), dweight, dout, inp, weight,
                   rstd, N, C);
}

void launch_rmsnorm16_forward(cudaStream_t stream, void* out, float* rstd, const float* inp,
                              const void* weight, DType type, size_t N, size_t C, float eps) {
  with_16bit_type(type, [&](auto t) {
    using T = decltype(t);
    rmsnorm_forward(stream, static_cast<T*>(out), rstd, inp, static_cast<const T*>(weight), N, C,
                    eps);
  });
}

void launch_fused_residual_rmsnorm16_forward(cudaStream_t stream, float* residual, void* out,
                                             float* rstd, const float* a, const float* b,
                                             const void* weight, DType type, size_t N, size_t C,
                                             float eps) {
  with_16bit_type(type, [&](auto t) {
    using T = decltype(t);
    fused_residual_rmsnorm_forward(stream, residual, static_cast<T*>(out), rstd, a, b,
                                   static_cast<const T*>(weight), N, C, eps);
  });
}

void launch_rmsnorm16_backward(cudaStream_t stream, const DeterministicScratch& scratch,
                               float* dinp, void* dinp16, float* dweight, const float* dout,
                               const float* inp, const void* weight, const float* rstd, DType type,
                               size_t N, size_t C) {
  with_16bit_type(type, [&](auto t) {
    using T = decltype(t);
    rmsnorm_backward(stream, scratch, dinp, static_cast<T*>(dinp16), dweight, dout, inp,
                     static_cast<const T*>(weight), rstd, N, C);
  });
}

namespace {
template <typename E>
void rope(cudaStream_t stream, E* x, size_t B, size_t T, size_t blocks, size_t block_heads,
          size_t rotated_heads, size_t hs, size_t pos0, const RopeParams& p, bool inverse) {
  const size_t n = B * T * blocks * rotated_heads * (hs / 2);
  if (n == 0) return;
  rope_kernel<<<grid_stride_blocks(n), kBlockSize, 0, stream>>>(
      x, B, T, blocks, block_heads, rotated_heads, hs, pos0, p, inverse ? -1.0f : 1.0f);
  TZ_CUDA_CHECK_LAUNCH();
}

template <typename E>
void swiglu_forward(cudaStream_t stream, E* out, const E* inp, size_t N, size_t H) {
  if (N * H == 0) return;
  swiglu_forward_kernel<<<grid_stride_blocks(N * H), kBlockSize, 0, stream>>>(out, inp, N, H);
  TZ_CUDA_CHECK_LAUNCH();
}

template <typename E>
void swiglu_backward(cudaStream_t stream, E* dinp, const E* inp, const E* dout, size_t N,
                     size_t H) {
  if (N * H == 0) return;
  swiglu_backward_kernel<<<grid_stride_blocks(N * H), kBlockSize, 0, stream>>>(dinp, inp, dout, N,
                                                                               H);
  TZ_CUDA_CHECK_LAUNCH();
}
}  // namespace

void launch_rope(cudaStream_t stream, float* x, size_t B, size_t T, size_t blocks,
                 size_t block_heads, size_t rotated_heads, size_t hs, size_t pos0,
                 const RopeParams& p, bool inverse) {
  rope(stream, x, B, T, blocks, block_heads, rotated_heads, hs, pos0, p, inverse);
}

void launch_rope16(cudaStream_t stream, void* x, DType type, size_t B, size_t T, size_t blocks,
                   size_t block_heads, size_t rotated_heads, size_t hs, size_t pos0,
                   const RopeParams& p, bool inverse) {
  with_16bit_type(type, [&](auto t) {
    rope(stream, static_cast<decltype(t)*>(x), B, T, blocks, block_heads, rotated_heads, hs, pos0,
         p, inverse);
  });
}

void launch_swiglu_forward(cudaStream_t stream, float* out, const float* inp, size_t N, size_t H) {
  swiglu_forward(stream, out, inp, N, H);
}

void launch_swiglu_backward(cudaStream_t stream, float* dinp, const float* inp, const float* dout,
                            size_t N, size_t H) {
  swiglu_backward(stream, dinp, inp, dout, N, H);
}

void launch_swiglu16_forward(cudaStream_t stream, void* out, const void* inp, DType type, size_t N,
                             size_t H) {
  with_16bit_type(type, [&](auto t) {
    using E = decltype(t);
    swiglu_forward(stream, static_cast<E*>(out), static_cast<const E*>(inp), N, H);
  });
}

void launch_swiglu16_backward(cudaStream_t stream, void* dinp, const void* inp, const void* dout,
                              DType type, size_t N, size_t H) {
  with_16bit_type(type, [&](auto t) {
    using E = decltype(t);
    swiglu_backward(stream, static_cast<E*>(dinp), static_cast<const E*>(inp),
                    static_cast<const E*>(dout), N, H);
  });
}

void launch_gqa_attention_forward(cudaStream_t stream, float* out, float* att, const float* qkv,
                                  size_t B, size_t T, size_t NH, size_t KVH, size_t hs) {
  const Grouped L = grouped("gqa_attention_forward", NH, KVH, hs);
  const size_t rows = B * NH * T;
  if (rows == 0 || hs == 0) return;
  gqa_forward_kernel<<<warp_per_row_blocks(rows), kBlockSize, 0, stream>>>(out, att, qkv, B, T, NH,
                                                                           L);
  TZ_CUDA_CHECK_LAUNCH();
}

void launch_gqa_attention_backward(cudaStream_t stream, float* dqkv, float* datt, const float* dout,
                                   const float* qkv, const float* att, size_t B, size_t T,
                                   size_t NH, size_t KVH, size_t hs) {
  const Grouped L = grouped("gqa_attention_backward", NH, KVH, hs);
  const size_t rows = B * NH * T;
  if (rows == 0 || hs == 0) return;
  gqa_backward_query_kernel<<<warp_per_row_blocks(rows), kBlockSize, 0, stream>>>(
      dqkv, datt, dout, qkv, att, B, T, NH, L);
  TZ_CUDA_CHECK_LAUNCH();
  gqa_backward_key_kernel<<<warp_per_row_blocks(B * KVH * T), kBlockSize, 0, stream>>>(
      dqkv, datt, dout, qkv, att, B, T, NH, KVH, L);
  TZ_CUDA_CHECK_LAUNCH();
}

}  // namespace tierzero::kernels::cuda_impl
