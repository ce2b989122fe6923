// LayerNorm forward and backward on CUDA. Rows are independent, so one warp normalises one row
// (GPT-2's C = 768..1600 is a few dozen elements per lane). The weight and bias gradients sum
// over all rows: a block per (column tile, slice of rows) reduces its tile in shared memory into
// per-slice partials, and a second pass adds each column's partials in slice order (the column
// sums of cuda_common.cuh), so they repeat bit for bit where atomics would not. The forward also
// comes fused with the residual add before it (the add is its first pass over the row).
#include "cuda/cuda_common.cuh"
#include "cuda/storage16.cuh"

namespace tierzero::kernels::cuda_impl {

namespace {

constexpr float kLayerNormEps = 1e-5f;

// The rest of a layernorm of one row by one warp, after the mean's pass: `sum` is this lane's
// sum of x[c] over c = lane, lane + 32, ..., in that order. y (C) = (x - mean) rstd weight + bias;
// lane 0 writes mean and rstd. Both forward kernels end here, so the fused residual + layernorm
// gives the bits of residual_forward then layernorm_forward. T, the parameters' and y's type:
// float, or a 16-bit type (storage16.cuh) read widened and written rounded from the fp32 value.
template <typename T>
__device__ __forceinline__ void layernorm_row_finish(T* y,             // (C)
                                                     float* mean,      // (1)
                                                     float* rstd,      // (1)
                                                     const float* x,   // (C)
                                                     const T* weight,  // (C)
                                                     const T* bias,    // (C)
                                                     size_t C, size_t lane, float sum) {
  const float inv_c = 1.0f / static_cast<float>(C);
  const float m = warp_sum(sum) * inv_c;

  // Two passes (mean, then squared deviations) avoid the cancellation of E[x^2] - E[x]^2.
  float sq = 0.0f;
  for (size_t c = lane; c < C; c += kWarpSize) {
    const float d = x[c] - m;
    sq += d * d;
  }
  const float s = rsqrtf(warp_sum(sq) * inv_c + kLayerNormEps);

  for (size_t c = lane; c < C; c += kWarpSize)
    y[c] = from_f32<T>((x[c] - m) * s * to_f32(weight[c]) + to_f32(bias[c]));
  if (lane == 0) {
    *mean = m;
    *rstd = s;
  }
}

template <typename T>
__global__ void layernorm_forward_kernel(T* out,            // (N, C)
                                         float* mean,       // (N)
                                         float* rstd,       // (N)
                                         const float* inp,  // (N, C)
                                         const T* weight,   // (C)
                                         const T* bias,     // (C)
                                         size_t N, size_t C) {
  const size_t row = static_cast<size_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / kWarpSize;
  const size_t lane = threadIdx.x % kWarpSize;
  // `row` is the same for the whole warp, so the warp leaves together and shuffles stay valid.
  if (row >= N) return;
  const float* x = inp + row * C;  // (C)
  float sum = 0.0f;
  for (size_t c = lane; c < C; c += kWarpSize) sum += x[c];
  layernorm_row_finish(out + row * C, mean + row, rstd + row, x, weight, bias, C, lane, sum);
}

// residual = a + b and out = layernorm(residual), one warp per row. The mean's pass is the add
// itself: each lane sums the values it writes, in the order layernorm_forward_kernel would read
// them back, so a and b are read once and the sum is not read from memory for its mean (its two
// other passes re-read the row this lane just wrote, from cache). Each lane reads a[c], b[c] and
// writes residual[c] for the same c, so residual may alias a or b.
template <typename T>
__global__ void fused_residual_layernorm_forward_kernel(float* residual,  // (N, C)
                                                        T* out,           // (N, C)
                                                        float* mean,      // (N)
                                                        float* rstd,      // (N)
                                                        const float* a,   // (N, C)
                                                        const float* b,   // (N, C)
                                                        const T* weight,  // (C)
                                                        const T* bias,    // (C)
                                                        size_t N, size_t C) {
  const size_t row = static_cast<size_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / kWarpSize;
  const size_t lane = threadIdx.x % kWarpSize;
  if (row >= N) return;           // warp-uniform, see the forward kernel
  float* r = residual + row * C;  // (C)
  float sum = 0.0f;
  for (size_t c = lane; c < C; c += kWarpSize) {
    const float v = a[row * C + c] + b[row * C + c];  // residual_forward's one rounding
    r[c] = v;
    sum += v;
  }
  layernorm_row_finish(out + row * C, mean + row, rstd + row, r, weight, bias, C, lane, sum);
}

// dinp for one row per warp:
// dinp += rstd * (dnorm - mean(dnorm) - norm * mean(dnorm * norm)), dnorm = weight * dout.
// T: the weight's type, as layernorm_row_finish's; dinp16 (nullable) the new dinp rounded to it,
// the 16-bit copy of the stream's gradient written in this pass.
template <typename T>
__global__ void layernorm_backward_input_kernel(float* dinp,        // (N, C) +=
                                                T* dinp16,          // (N, C) nullable
                                                const float* dout,  // (N, C)
                                                const float* inp,   // (N, C)
                                                const T* weight,    // (C)
                                                const float* mean,  // (N)
                                                const float* rstd,  // (N)
                                                size_t N, size_t C) {
  const size_t row = static_cast<size_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / kWarpSize;
  const size_t lane = threadIdx.x % kWarpSize;
  if (row >= N) return;              // warp-uniform, see the forward kernel
  const float* x = inp + row * C;    // (C)
  const float* dy = dout + row * C;  // (C)
  float* dx = dinp + row * C;        // (C)
  const float m = mean[row];
  const float s = rstd[row];
  const float inv_c = 1.0f / static_cast<float>(C);

  float dnorm_sum = 0.0f;
  float dnorm_norm_sum = 0.0f;
  for (size_t c = lane; c < C; c += kWarpSize) {
    const float norm = (x[c] - m) * s;
    const float dnorm = to_f32(weight[c]) * dy[c];
    dnorm_sum += dnorm;
    dnorm_norm_sum += dnorm * norm;
  }
  const float dnorm_mean = warp_sum(dnorm_sum) * inv_c;
  const float dnorm_norm_mean = warp_sum(dnorm_norm_sum) * inv_c;

  // Each lane reads dy[c] and writes dx[c] for the same c, so dinp may alias dout.
  T* dx16 = dinp16 != nullptr ? dinp16 + row * C : nullptr;  // (C)
  for (size_t c = lane; c < C; c += kWarpSize) {
    const float norm = (x[c] - m) * s;
    const float dnorm = to_f32(weight[c]) * dy[c];
    const float v = dx[c] + (dnorm - dnorm_mean - norm * dnorm_norm_mean) * s;
    dx[c] = v;
    if (dx16 != nullptr) dx16[c] = from_f32<T>(v);
  }
}

// Pass 1 of dweight[c] += sum_r dout[r,c] * norm[r,c] and dbias[c] += sum_r dout[r,c] (the
// column sums of cuda_common.cuh): block (x, y) reduces column tile x over row slice y, thread
// (tx, ty) summing rows ty, ty + 8, ... of the slice, then thread ty = 0 the 8 lane sums in lane
// order. With one slice (partials null) it adds into dweight and dbias; otherwise it writes the
// slice's partials, dweight's then dbias's.
__global__ void layernorm_backward_params_kernel(float* dweight,     // (C) += when partials null
                                                 float* dbias,       // (C) += when partials null
                                                 float* partials,    // (2, slices, C) nullable
                                                 const float* dout,  // (N, C)
                                                 const float* inp,   // (N, C)
                                                 const float* mean,  // (N)
                                                 const float* rstd,  // (N)
                                                 size_t N, size_t C, size_t rows_per_slice) {
  __shared__ float dweight_partial[kRowLanes][kColumnTile + 1];
  __shared__ float dbias_partial[kRowLanes][kColumnTile + 1];
  const size_t c = static_cast<size_t>(blockIdx.x) * kColumnTile + threadIdx.x;
  const size_t row_begin = static_cast<size_t>(blockIdx.y) * rows_per_slice;
  const size_t row_end = row_begin + rows_per_slice < N ? row_begin + rows_per_slice : N;
  float dw = 0.0f;
  float db = 0.0f;
  if (c < C) {
    for (size_t r = row_begin + threadIdx.y; r < row_end; r += kRowLanes) {
      const float dy = dout[r * C + c];
      const float norm = (inp[r * C + c] - mean[r]) * rstd[r];
      dw += dy * norm;
      db += dy;
    }
  }
  dweight_partial[threadIdx.y][threadIdx.x] = dw;
  dbias_partial[threadIdx.y][threadIdx.x] = db;
  __syncthreads();
  if (threadIdx.y == 0 && c < C) {
    float dw_sum = 0.0f;
    float db_sum = 0.0f;
    for (int k = 0; k < kRowLanes; ++k) {
      dw_sum += dweight_partial[k][threadIdx.x];
      db_sum += dbias_partial[k][threadIdx.x];
    }
    if (partials == nullptr) {
      dweight[c] += dw_sum;
      dbias[c] += db_sum;
    } else {
      const size_t slices = gridDim.y;
      partials[blockIdx.y * C + c] = dw_sum;
      partials[(slices + blockIdx.y) * C + c] = db_sum;
    }
  }
}

template <typename T>
void layernorm_forward(cudaStream_t stream, T* out, float* mean, float* rstd, const float* inp,
                       const T* weight, const T* bias, size_t N, size_t C) {
  if (N == 0) return;
  TZ_CHECK(C > 0, "layernorm_forward: C must be > 0", "check the model's channel count");
  layernorm_forward_kernel<<<warp_per_row_blocks(N), kBlockSize, 0, stream>>>(out, mean, rstd, inp,
                                                                              weight, bias, N, C);
  TZ_CUDA_CHECK_LAUNCH();
}

template <typename T>
void fused_residual_layernorm_forward(cudaStream_t stream, float* residual, T* out, float* mean,
                                      float* rstd, const float* a, const float* b, const T* weight,
                                      const T* bias, size_t N, size_t C) {
  if (N == 0) return;
  TZ_CHECK(C > 0, "fused_residual_layernorm_forward: C must be > 0",
           "check the model's channel count");
  fused_residual_layernorm_forward_kernel<<<warp_per_row_blocks(N), kBlockSize, 0, stream>>>(
      residual, out, mean, rstd, a, b, weight, bias, N, C);
  TZ_CUDA_CHECK_LAUNCH();
}

template <typename T>
void layernorm_backward(cudaStream_t stream, const DeterministicScratch& scratch, float* dinp,
                        T* dinp16, float* dweight, float* dbias, const float* dout,
                        const float* inp, const T* weight, const float* mean, const float* rstd,
                        size_t N, size_t C) {
  if (N == 0) return;
  TZ_CHECK(C > 0, "layernorm_backward: C must be > 0", "check the model's channel count");
  // The parameter kernel runs first: it reads dout, which the input kernel overwrites when dinp
  // aliases dout.
  const size_t column_blocks = ceil_div(C, static_cast<size_t>(kColumnTile));
  TZ_CHECK(column_blocks <= kMaxGridX, "layernorm_backward: C too large: " + std::to_string(C),
           "this many channels cannot be launched in one grid");
  const ColumnSlices split = column_slices(N, 2 * C, scratch.bytes / sizeof(float));
  float* partials =  // (2, slices, C): dweight's, then dbias's
      split.slices > 1 ? static_cast<float*>(scratch.data) : nullptr;
  const dim3 grid(static_cast<unsigned>(column_blocks), static_cast<unsigned>(split.slices));
  const dim3 block(kColumnTile, kRowLanes);
  layernorm_backward_params_kernel<<<grid, block, 0, stream>>>(
      dweight, dbias, partials, dout, inp, mean, rstd, N, C, split.rows_per_slice);
  TZ_CUDA_CHECK_LAUNCH();
  if (partials != nullptr) {
    launch_column_partials_sum(stream, dweight, partials, split.slices, C);
    launch_column_partials_sum(stream, dbias, partials + split.slices * C, split.slices, C);
  }
  layernorm_backward_input_kernel<<<warp_per_row_blocks(N), kBlockSize, 0, stream>>>(
      dinp, dinp16, dout, inp, weight, mean, rstd, N, C);
  TZ_CUDA_CHECK_LAUNCH();
}

}  // namespace

void launch_layernorm_forward(cudaStream_t stream, float* out, float* mean, float* rstd,
                              const float* inp, const float* weight, const float* bias, size_t N,
                              size_t C) {
  layernorm_forward(stream, out, mean, rstd, inp, weight, bias, N, C);
}

void launch_fused_residual_layernorm_forward(cudaStream_t stream, float* residual, float* out,
                                             float* mean, float* rstd, const float* a,
                                             const float* b, const float* weight, const float* bias,
                                             size_t N, size_t C) {
  fused_residual_layernorm_forward(stream, residual, out, mean, rstd, a, b, weight, bias, N, C);
}

void launch_layernorm_backward(cudaStream_t stream, const DeterministicScratch& scratch,
                               float* dinp, float* dweight, float* dbias, const float* dout,
                               const float* inp, const float* weight, const float* mean,
                               const float* rstd, size_t N, size_t C) {
  layernorm_backward(stream, scratch, dinp, static_cast<float*>(nullptr), dweight, dbias, dout, inp,
                     weight, mean, rstd, N, C);
}

void launch_layernorm16_forward(cudaStream_t stream, void* out, float* mean, float* rstd,
                                const float* inp, const void* weight, const void* bias, DType type,
                                size_t N, size_t C) {
  with_16bit_type(type, [&](auto t) {
    using T = decltype(t);
    layernorm_forward(stream, static_cast<T*>(out), mean, rstd, inp, static_cast<const T*>(weight),
                      static_cast<const T*>(bias), N, C);
  });
}

void launch_fused_residual_layernorm16_forward(cudaStream_t stream, float* residual, void* out,
                                               float* mean, float* rstd, const float* a,
                                               const float* b, const void* weight, const void* bias,
                                               DType type, size_t N, size_t C) {
  with_16bit_type(type, [&](auto t) {
    using T = decltype(t);
    fused_residual_layernorm_forward(stream, residual, static_cast<T*>(out), mean, rstd, a, b,
                                     static_cast<const T*>(weight), static_cast<const T*>(bias), N,
                                     C);
  });
}

void launch_layernorm16_backward(cudaStream_t stream, const DeterministicScratch& scratch,
                                 float* dinp, void* dinp16, float* dweight, float* dbias,
                                 const float* dout, const float* inp, const void* weight,
                                 const float* mean, const float* rstd, DType type, size_t N,
                                 size_t C) {
  with_16bit_type(type, [&](auto t) {
    using T = decltype(t);
    layernorm_backward(stream, scratch, dinp, static_cast<T*>(dinp16), dweight, dbias, dout, inp,
                       static_cast<const T*>(weight), mean, rstd, N, C);
  });
}

}  // namespace tierzero::kernels::cuda_impl
