// Causal multi-head self-attention forward and backward on CUDA, written for clarity rather than
// speed (this is the reference-grade backend; a fused flash kernel can replace it later).
// Forward: one warp per query row (b, h, t) computes scores, softmax and the weighted sum of v.
// Backward runs in two kernels so that every gradient element has exactly one writer (no
// atomics, deterministic): one warp per query row produces the pre-softmax gradient and dq, then
// one warp per key row sums the contributions of all later queries into dk and dv.
#include "cuda/cuda_common.cuh"

namespace tierzero::kernels::cuda_impl {

namespace {

// Where row `row` of the (B, NH, T) row space lives.
struct AttentionRow {
  size_t b;
  size_t h;
  size_t t;
  size_t bh;  // b * NH + h
};

__device__ __forceinline__ AttentionRow split_row(size_t row, size_t T, size_t NH) {
  AttentionRow r;
  r.t = row % T;
  r.bh = row / T;
  r.h = r.bh % NH;
  r.b = r.bh / NH;
  return r;
}

__device__ __forceinline__ float dot(const float* a, const float* b, size_t n) {
  float s = 0.0f;
  for (size_t i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

__global__ void attention_forward_kernel(float* out,        // (B, T, C)
                                         float* att,        // (B, NH, T, T)
                                         const float* qkv,  // (B, T, 3C)
                                         size_t B, size_t T, size_t C, size_t NH) {
  const size_t row = static_cast<size_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / kWarpSize;
  const size_t lane = threadIdx.x % kWarpSize;
  if (row >= B * NH * T) return;  // warp-uniform: the warp leaves together
  const AttentionRow r = split_row(row, T, NH);
  const size_t hs = C / NH;
  const size_t C3 = 3 * C;
  const float scale = 1.0f / sqrtf(static_cast<float>(hs));
  const float* q = qkv + (r.b * T + r.t) * C3 + r.h * hs;   // (hs)
  const float* k0 = qkv + r.b * T * C3 + C + r.h * hs;      // key t2 at k0 + t2 * C3, (hs)
  const float* v0 = qkv + r.b * T * C3 + 2 * C + r.h * hs;  // value t2 at v0 + t2 * C3, (hs)
  float* att_row = att + row * T;                           // (T)

  // Lanes own keys t2 = lane, lane + 32, ... through the three softmax passes, so these passes
  // read only what the same lane wrote.
  float max_score = -CUDART_INF_F;
  for (size_t t2 = lane; t2 <= r.t; t2 += kWarpSize) {
    const float score = dot(q, k0 + t2 * C3, hs) * scale;
    att_row[t2] = score;
    max_score = fmaxf(max_score, score);
  }
  max_score = warp_max(max_score);  // finite: every row has at least key 0

  float sum = 0.0f;
  for (size_t t2 = lane; t2 <= r.t; t2 += kWarpSize) {
    const float e = expf(att_row[t2] - max_score);
    att_row[t2] = e;
    sum += e;
  }
  const float inv_sum = 1.0f / warp_sum(sum);
  for (size_t t2 = lane; t2 < T; t2 += kWarpSize) {
    att_row[t2] = t2 <= r.t ? att_row[t2] * inv_sum : 0.0f;
  }
  // The weighted sum reads probabilities written by other lanes.
  __syncwarp();

  float* y = out + (r.b * T + r.t) * C + r.h * hs;  // (hs)
  for (size_t d = lane; d < hs; d += kWarpSize) {
    float acc = 0.0f;
    for (size_t t2 = 0; t2 <= r.t; ++t2) acc += att_row[t2] * v0[t2 * C3 + d];
    y[d] = acc;
  }
}

// Per query row: datt = dout . v, then the softmax backward
// dpre[t2] = att[t2] * (datt[t2] - sum_j att[j] datt[j]) stored in `datt`, then dq.
__global__ void attention_backward_query_kernel(float* dqkv,        // (B, T, 3C) +=
                                                float* datt,        // (B, NH, T, T) scratch
                                                const float* dout,  // (B, T, C)
                                                const float* qkv,   // (B, T, 3C)
                                                const float* att,   // (B, NH, T, T)
                                                size_t B, size_t T, size_t C, size_t NH) {
  const size_t row = static_cast<size_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / kWarpSize;
  const size_t lane = threadIdx.x % kWarpSize;
  if (row >= B * NH * T) return;  // warp-uniform
  const AttentionRow r = split_row(row, T, NH);
  const size_t hs = C / NH;
  const size_t C3 = 3 * C;
  const float scale = 1.0f / sqrtf(static_cast<float>(hs));
  const float* dy = dout + (r.b * T + r.t) * C + r.h * hs;  // (hs)
  const float* k0 = qkv + r.b * T * C3 + C + r.h * hs;      // key t2 at k0 + t2 * C3
  const float* v0 = qkv + r.b * T * C3 + 2 * C + r.h * hs;  // value t2 at v0 + t2 * C3
  const float* att_row = att + row * T;                     // (T)
  float* dpre_row = datt + row * T;                         // (T), only t2 <= t is used

  float row_dot = 0.0f;
  for (size_t t2 = lane; t2 <= r.t; t2 += kWarpSize) {
    const float g = dot(dy, v0 + t2 * C3, hs);
    dpre_row[t2] = g;
    row_dot += att_row[t2] * g;
  }
  row_dot = warp_sum(row_dot);
  for (size_t t2 = lane; t2 <= r.t; t2 += kWarpSize) {
    dpre_row[t2] = att_row[t2] * (dpre_row[t2] - row_dot);
  }
  __syncwarp();  // dq below reads every lane's dpre entries

  float* dq = dqkv + (r.b * T + r.t) * C3 + r.h * hs;  // (hs), this row's only writer
  for (size_t d = lane; d < hs; d += kWarpSize) {
    float acc = 0.0f;
    for (size_t t2 = 0; t2 <= r.t; ++t2) acc += dpre_row[t2] * k0[t2 * C3 + d];
    dq[d] += scale * acc;
  }
}

// Per key row (b, h, t2): dk += scale * sum_{t >= t2} dpre[t, t2] q[t],
// dv += sum_{t >= t2} att[t, t2] dout[t]. Runs after the query kernel has written dpre.
__global__ void attention_backward_key_kernel(float* dqkv,        // (B, T, 3C) +=
                                              const float* dpre,  // (B, NH, T, T)
                                              const float* dout,  // (B, T, C)
                                              const float* qkv,   // (B, T, 3C)
                                              const float* att,   // (B, NH, T, T)
                                              size_t B, size_t T, size_t C, size_t NH) {
  const size_t row = static_cast<size_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / kWarpSize;
  const size_t lane = threadIdx.x % kWarpSize;
  if (row >= B * NH * T) return;
  const AttentionRow r = split_row(row, T, NH);  // r.t is the key position t2 here
  const size_t hs = C / NH;
  const size_t C3 = 3 * C;
  const float scale = 1.0f / sqrtf(static_cast<float>(hs));
  const float* q0 = qkv + r.b * T * C3 + r.h * hs;         // query t at q0 + t * C3
  const float* dy0 = dout + r.b * T * C + r.h * hs;        // dout of query t at dy0 + t * C
  const float* dpre_col = dpre + r.bh * T * T + r.t;       // dpre[t, t2] at dpre_col[t * T]
  const float* att_col = att + r.bh * T * T + r.t;         // att[t, t2] at att_col[t * T]
  float* dk = dqkv + (r.b * T + r.t) * C3 + C + r.h * hs;  // (hs), this row's only writer
  float* dv = dk + C;                                      // (hs)

  for (size_t d = lane; d < hs; d += kWarpSize) {
    float dk_acc = 0.0f;
    float dv_acc = 0.0f;
    for (size_t t = r.t; t < T; ++t) {
      dk_acc += dpre_col[t * T] * q0[t * C3 + d];
      dv_acc += att_col[t * T] * dy0[t * C + d];
    }
    dk[d] += scale * dk_acc;
    dv[d] += dv_acc;
  }
}

void check_attention_shape(const char* op, size_t C, size_t NH) {
  TZ_CHECK(NH > 0 && C % NH == 0,
           std::string(op) + ": C (" + std::to_string(C) + ") must be a positive multiple of NH (" +
               std::to_string(NH) + ")",
           "check n_embd and n_head in the model config");
}

}  // namespace

void launch_attention_forward(cudaStream_t stream, float* out, float* att, const float* qkv,
                              size_t B, size_t T, size_t C, size_t NH) {
  check_attention_shape("attention_forward", C, NH);
  const size_t rows = B * NH * T;
  if (rows == 0 || C == 0) return;
  attention_forward_kernel<<<warp_per_row_blocks(rows), kBlockSize, 0, stream>>>(out, att, qkv, B,
                                                                                 T, C, NH);
  TZ_CUDA_CHECK_LAUNCH();
}

void launch_attention_backward(cudaStream_t stream, float* dqkv, float* datt, const float* dout,
                               const float* qkv, const float* att, size_t B, size_t T, size_t C,
                               size_t NH) {
  check_attention_shape("attention_backward", C, NH);
  const size_t rows = B * NH * T;
  if (rows == 0 || C == 0) return;
  const unsigned blocks = warp_per_row_blocks(rows);
  attention_backward_query_kernel<<<blocks, kBlockSize, 0, stream>>>(dqkv, datt, dout, qkv, att, B,
                                                                     T, C, NH);
  TZ_CUDA_CHECK_LAUNCH();
  attention_backward_key_kernel<<<blocks, kBlockSize, 0, stream>>>(dqkv, datt, dout, qkv, att, B, T,
                                                                   C, NH);
  TZ_CUDA_CHECK_LAUNCH();
}

}  // namespace tierzero::kernels::cuda_impl
