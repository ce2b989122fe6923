// CUDA kernels that touch each element independently (encoder, whole or over one rank's vocabulary
// range, GELU, residual, bias, scale, fp32 <-> 16-bit conversion of working parameters, and the
// small reductions that go with them (sum of squares for gradient clipping, column sums for
// matmul's bias gradient). They are memory-bound, so each is one simple grid-stride pass.
#include <cmath>

#include "cuda/cuda_common.cuh"
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

// Tokens repeat within a batch, so rows of dwte receive several contributions: atomics.
__global__ void encoder_backward_wte_kernel(float* dwte,            // (Vp, C) +=
                                            const float* dout,      // (B, T, C)
                                            const int32_t* tokens,  // (B, T)
                                            size_t n, size_t C) {
  for (size_t i = global_thread_index(); i < n; i += grid_stride()) {
    const size_t bt = i / C;
    const size_t c = i % C;
    const size_t token = static_cast<size_t>(tokens[bt]);
    atomicAdd(&dwte[token * C + c], dout[i]);
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

__global__ void encoder_forward_vocab_range_kernel(float* out,              // (B, T, C)
                                                   const int32_t* tokens,   // (B, T)
                                                   const float* wte_local,  // (vocab_count, C)
                                                   const float* wpe,        // (maxT, C) nullable
                                                   size_t vocab_start, size_t vocab_count, size_t n,
                                                   size_t T, size_t C) {
  for (size_t i = global_thread_index(); i < n; i += grid_stride()) {
    const size_t bt = i / C;
    const size_t c = i % C;
    const size_t row = local_row(tokens[bt], vocab_start, vocab_count);
    float v = row < vocab_count ? wte_local[row * C + c] : 0.0f;
    if (wpe != nullptr) v += wpe[(bt % T) * C + c];  // wte + wpe, as encoder_forward_kernel
    out[i] = v;
  }
}

// As encoder_backward_wte_kernel, for the tokens in range only.
__global__ void encoder_backward_vocab_range_kernel(float* dwte_local,      // (vocab_count, C) +=
                                                    const float* dout,      // (B, T, C)
                                                    const int32_t* tokens,  // (B, T)
                                                    size_t vocab_start, size_t vocab_count,
                                                    size_t n, size_t C) {
  for (size_t i = global_thread_index(); i < n; i += grid_stride()) {
    const size_t row = local_row(tokens[i / C], vocab_start, vocab_count);
    if (row < vocab_count) atomicAdd(&dwte_local[row * C + i % C], dout[i]);
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

__global__ void gelu_forward_kernel(float* out,        // (n)
                                    const float* inp,  // (n)
                                    size_t n) {
  for (size_t i = global_thread_index(); i < n; i += grid_stride()) {
    const float x = inp[i];
    out[i] = 0.5f * x * gelu_tanh_terms(x).one_plus;
  }
}

__global__ void gelu_backward_kernel(float* dinp,        // (n) +=
                                     const float* inp,   // (n)
                                     const float* dout,  // (n)
                                     size_t n) {
  for (size_t i = global_thread_index(); i < n; i += grid_stride()) {
    const float x = inp[i];
    const float d = dout[i];  // read before writing: dinp may alias dout
    const GeluTanhTerms th = gelu_tanh_terms(x);
    // sech^2 = (1 - tanh)(1 + tanh): no coshf (which overflows) and no 1 - tanh^2 cancellation.
    const float sech2 = th.one_minus * th.one_plus;
    const float local_grad =
        0.5f * th.one_plus + x * 0.5f * sech2 * kGeluScale * (1.0f + 3.0f * kGeluCubic * x * x);
    dinp[i] += local_grad * d;
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

// One element per thread (grid-stride): out (Y, X, width) from in (X, Y, width).
__global__ void transpose_blocks_kernel(float* out, const float* in, size_t X, size_t Y,
                                        size_t width) {
  const size_t n = X * Y * width;
  for (size_t i = global_thread_index(); i < n; i += grid_stride()) {
    const size_t w = i % width, xy = i / width;
    const size_t x = xy / Y, y = xy % Y;  // i indexes `in` at (x, y, w)
    out[(y * X + x) * width + w] = in[i];
  }
}

__global__ void add_bias_kernel(float* out,         // (N, OC)
                                const float* bias,  // (OC)
                                size_t n, size_t OC) {
  for (size_t i = global_thread_index(); i < n; i += grid_stride()) out[i] += bias[i % OC];
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

// Follows torch.optim.AdamW's single-tensor path operation by operation:
// p *= 1 - lr*wd; m.lerp_(g, 1-b1); v = v*b2 + (1-b2) g^2;
// p -= step_size * m / (sqrt(v) / sqrt(bc2) + eps).
__global__ void adamw_kernel(float* param,       // (n)
                             float* m,           // (n)
                             float* v,           // (n)
                             const float* grad,  // (n)
                             size_t n, AdamWScalars s) {
  for (size_t i = global_thread_index(); i < n; i += grid_stride()) {
    const float g = grad[i] * s.grad_scale;
    float mi = m[i];
    float vi = v[i];
    mi = mi + (1.0f - s.beta1) * (g - mi);
    vi = vi * s.beta2 + (1.0f - s.beta2) * g * g;
    float p = param[i] * s.decay_factor;
    const float denom = sqrtf(vi) / s.bias_correction2_sqrt + s.eps;
    p = p - s.step_size * (mi / denom);
    m[i] = mi;
    v[i] = vi;
    param[i] = p;
  }
}

// ---- reductions ----

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

constexpr int kColumnTile = 32;  // columns per block: one coalesced 128-byte row segment
constexpr int kRowLanes = 8;     // threads per column, each walking every 8th row
constexpr size_t kRowsPerBlock = 256;

// dbias[c] += sum_r dout[r, c]. Each block reduces a tile of 32 columns over a slice of rows in
// shared memory, then adds once per column with an atomic, so that N can be split over many
// blocks for parallelism without a second pass.
__global__ void bias_backward_kernel(float* dbias,       // (OC) +=
                                     const float* dout,  // (N, OC)
                                     size_t N, size_t OC, size_t rows_per_block) {
  __shared__ float partial[kRowLanes][kColumnTile + 1];
  const size_t c = static_cast<size_t>(blockIdx.x) * kColumnTile + threadIdx.x;
  const size_t row_begin = static_cast<size_t>(blockIdx.y) * rows_per_block;
  const size_t row_end = row_begin + rows_per_block < N ? row_begin + rows_per_block : N;
  float acc = 0.0f;
  if (c < OC) {
    for (size_t r = row_begin + threadIdx.y; r < row_end; r += kRowLanes) acc += dout[r * OC + c];
  }
  partial[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && c < OC) {
    float sum = 0.0f;
    for (int k = 0; k < kRowLanes; ++k) sum += partial[k][threadIdx.x];
    atomicAdd(&dbias[c], sum);
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

void launch_encoder_backward(cudaStream_t stream, float* dwte, float* dwpe, const float* dout,
                             const int32_t* tokens, size_t B, size_t T, size_t C) {
  const size_t n = B * T * C;
  if (n == 0) return;
  encoder_backward_wte_kernel<<<grid_stride_blocks(n), kBlockSize, 0, stream>>>(dwte, dout, tokens,
                                                                                n, C);
  TZ_CUDA_CHECK_LAUNCH();
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

void launch_encoder_backward_vocab_range(cudaStream_t stream, float* dwte_local, float* dwpe,
                                         const float* dout, const int32_t* tokens,
                                         size_t vocab_start, size_t vocab_count, size_t B, size_t T,
                                         size_t C) {
  const size_t n = B * T * C;
  if (n == 0) return;
  if (vocab_count > 0) {
    encoder_backward_vocab_range_kernel<<<grid_stride_blocks(n), kBlockSize, 0, stream>>>(
        dwte_local, dout, tokens, vocab_start, vocab_count, n, C);
    TZ_CUDA_CHECK_LAUNCH();
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
  gelu_backward_kernel<<<grid_stride_blocks(n), kBlockSize, 0, stream>>>(dinp, inp, dout, n);
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

void launch_transpose_blocks(cudaStream_t stream, float* out, const float* in, size_t X, size_t Y,
                             size_t width) {
  const size_t n = X * Y * width;
  if (n == 0) return;
  transpose_blocks_kernel<<<grid_stride_blocks(n), kBlockSize, 0, stream>>>(out, in, X, Y, width);
  TZ_CUDA_CHECK_LAUNCH();
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

void launch_adamw(cudaStream_t stream, float* param, float* m, float* v, const float* grad,
                  size_t n, const AdamWParams& p) {
  TZ_CHECK(p.step >= 1, "adamw_update: step must be >= 1, got " + std::to_string(p.step),
           "the step count is 1-based (bias correction divides by 1 - beta^step)");
  if (n == 0) return;
  const double step = static_cast<double>(p.step);
  const double bias_correction1 = 1.0 - std::pow(static_cast<double>(p.beta1), step);
  const double bias_correction2 = 1.0 - std::pow(static_cast<double>(p.beta2), step);
  AdamWScalars s{};
  s.beta1 = p.beta1;
  s.beta2 = p.beta2;
  s.eps = p.eps;
  s.grad_scale = p.grad_scale;
  s.decay_factor =
      static_cast<float>(1.0 - static_cast<double>(p.lr) * static_cast<double>(p.weight_decay));
  s.step_size = static_cast<float>(static_cast<double>(p.lr) / bias_correction1);
  s.bias_correction2_sqrt = static_cast<float>(std::sqrt(bias_correction2));
  adamw_kernel<<<grid_stride_blocks(n), kBlockSize, 0, stream>>>(param, m, v, grad, n, s);
  TZ_CUDA_CHECK_LAUNCH();
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

void launch_bias_backward(cudaStream_t stream, float* dbias, const float* dout, size_t N,
                          size_t OC) {
  if (N == 0 || OC == 0) return;
  const size_t column_blocks = ceil_div(OC, static_cast<size_t>(kColumnTile));
  size_t row_blocks = ceil_div(N, kRowsPerBlock);
  if (row_blocks > kMaxGridY) row_blocks = kMaxGridY;
  const size_t rows_per_block = ceil_div(N, row_blocks);
  TZ_CHECK(column_blocks <= kMaxGridX, "bias gradient too wide: " + std::to_string(OC),
           "this many output channels cannot be launched in one grid");
  const dim3 grid(static_cast<unsigned>(column_blocks), static_cast<unsigned>(row_blocks));
  const dim3 block(kColumnTile, kRowLanes);
  bias_backward_kernel<<<grid, block, 0, stream>>>(dbias, dout, N, OC, rows_per_block);
  TZ_CUDA_CHECK_LAUNCH();
}

}  // namespace tierzero::kernels::cuda_impl
