// Causal self-attention on CUDA after FlashAttention-2, with nothing of size T^2 in memory: the
// same algorithm as the CPU's tiled kernel (kernels/cpu/flash_attention.cpp), for both qkv
// layouts (q | k | v, and the Llama family's grouped one) and grouped kv heads.
//
// Forward: one block per (query tile of 64 rows, b, query head). It walks the key tiles up to the
// diagonal, keeps a running row max and row sum (online softmax, in the log2 domain so exp2f does
// the exponentials) and the output accumulator in registers, and writes the output and each row's
// natural-log logsumexp, the only thing kept for the backward: lse (B, NH, T).
//
// Backward: two kernels, each recomputing the probabilities from lse and D = rowsum(dout * out)
// (computed per query tile, so no scratch buffer). The dk/dv kernel runs one block per (key tile
// of 64 rows, b, kv head): it owns dk and dv of its keys (kept in registers, stored into dqkv once
// at the end) and walks every query head of its kv group and every query tile at or after its
// keys. The dq kernel runs one block per (query tile, b, query head): it owns dq of its rows and
// walks the key tiles up to the diagonal in order (FlashAttention-2's deterministic mode). Every
// element of dqkv thus has one writer and sums in one fixed order: the backward, like the
// forward, repeats bit for bit from run to run, and dqkv is written whole: it needs no fill.
//
// fp32 throughout on the CUDA cores, written for correctness first: 256 threads as a 16 x 16
// grid; thread (ty, tx) computes the score rows ty + 16 ii and columns tx + 16 jj (ii, jj < 4) of
// a 64 x 64 tile, and the output / gradient columns tx + 16 c, c < kMaxDim / 16. Shared-memory
// rows are kMaxDim + 1 floats long (odd), so the column-strided reads of a warp fall in distinct
// banks. Head dims up to 128 are supported (a template on 32, 64 or 128 with zero-padded
// columns); larger ones are refused with an Error.
#include <cmath>
#include <string>

#include "cuda/cuda_common.cuh"
#include "cuda/flash_attention_launch.cuh"

namespace tierzero::kernels::cuda_impl {

namespace {

constexpr int kThreads = 256;           // a 16 x 16 grid of threads
constexpr int kGrid = 16;               // threads per side of that grid
constexpr int kPer = kTile / kGrid;     // rows (and columns) of a tile per thread: 4
constexpr int kProbStride = kTile + 1;  // a row of the (64, 64) probability tile in shared memory

// tile (kTile, kMaxDim + 1) <- rows row0.. of a (B, T, ld) tensor of batch b, channels
// offset..offset+D, widened to fp32; rows past T and columns past D are zero. E, the element type
// of qkv, out, dout and dqkv in every kernel below: float, or a 16-bit type (storage16.cuh, the
// 16-bit attention of kernels.hpp) read widened and written rounded from the fp32 value.
template <int kMaxDim, typename E>
__device__ __forceinline__ void load_tile(float* tile, const E* src, size_t ld, size_t offset,
                                          const FlashDims& s, size_t b, size_t row0) {
  constexpr int kStride = kMaxDim + 1;
  for (int idx = threadIdx.x; idx < kTile * kMaxDim; idx += kThreads) {
    const int r = idx / kMaxDim, d = idx % kMaxDim;
    const size_t t = row0 + static_cast<size_t>(r);
    float v = 0.0f;
    if (t < s.T && static_cast<size_t>(d) < s.D) v = to_f32(src[(b * s.T + t) * ld + offset + d]);
    tile[r * kStride + d] = v;
  }
}

template <int kMaxDim, typename E>
__global__ void __launch_bounds__(kThreads) flash_forward_kernel(E* out,        // (B, T, NH D)
                                                                 float* lse,    // (B, NH, T)
                                                                 const E* qkv,  // (B, T, W)
                                                                 FlashDims s) {
  constexpr int kStride = kMaxDim + 1;
  constexpr int kCols = kMaxDim / kGrid;  // output columns per thread
  extern __shared__ float smem[];
  float* q_tile = smem;                      // (kTile, kStride)
  float* k_tile = q_tile + kTile * kStride;  // (kTile, kStride)
  float* v_tile = k_tile + kTile * kStride;  // (kTile, kStride)
  float* p_tile = v_tile + kTile * kStride;  // (kTile, kProbStride)

  // The last query tiles cost the most; they get the lowest block indices.
  const size_t qt = s.tiles - 1 - blockIdx.x % s.tiles;
  const size_t bh = blockIdx.x / s.tiles;
  const size_t b = bh / s.NH, h = bh % s.NH, kvh = h / s.rep;
  const size_t q0 = qt * kTile;
  const int ty = threadIdx.x / kGrid, tx = threadIdx.x % kGrid;

  load_tile<kMaxDim>(q_tile, qkv, s.W, q_offset(s, h), s, b, q0);

  float m[kPer], l[kPer], o[kPer][kCols];  // running max (log2 domain), sum, output accumulator
#pragma unroll
  for (int ii = 0; ii < kPer; ++ii) {
    m[ii] = -CUDART_INF_F;
    l[ii] = 0.0f;
#pragma unroll
    for (int c = 0; c < kCols; ++c) o[ii][c] = 0.0f;
  }

  for (size_t kt = 0; kt <= qt; ++kt) {
    const size_t k0 = kt * kTile;
    __syncthreads();  // the previous tile's readers of k_tile, v_tile and p_tile are done
    load_tile<kMaxDim>(k_tile, qkv, s.W, k_offset(s, kvh), s, b, k0);
    load_tile<kMaxDim>(v_tile, qkv, s.W, v_offset(s, kvh), s, b, k0);
    __syncthreads();

    float sc[kPer][kPer];  // scores of rows ty + 16 ii, columns tx + 16 jj
#pragma unroll
    for (int ii = 0; ii < kPer; ++ii)
#pragma unroll
      for (int jj = 0; jj < kPer; ++jj) sc[ii][jj] = 0.0f;
    for (int d = 0; d < static_cast<int>(s.D); ++d) {
      float qv[kPer], kv[kPer];
#pragma unroll
      for (int x = 0; x < kPer; ++x) {
        qv[x] = q_tile[(ty + kGrid * x) * kStride + d];
        kv[x] = k_tile[(tx + kGrid * x) * kStride + d];
      }
#pragma unroll
      for (int ii = 0; ii < kPer; ++ii)
#pragma unroll
        for (int jj = 0; jj < kPer; ++jj) sc[ii][jj] += qv[ii] * kv[jj];
    }

#pragma unroll
    for (int ii = 0; ii < kPer; ++ii) {
      const size_t i = q0 + ty + kGrid * ii;
      float row_max = -CUDART_INF_F;
#pragma unroll
      for (int jj = 0; jj < kPer; ++jj) {
        const size_t j = k0 + tx + kGrid * jj;
        // Causal: key j <= query i (< T for a real row; rows past T are never written).
        sc[ii][jj] = (j <= i && i < s.T) ? sc[ii][jj] * s.scale_log2 : -CUDART_INF_F;
        row_max = fmaxf(row_max, sc[ii][jj]);
      }
      // The row's 64 columns are spread over the 16 lanes sharing ty (one half of the warp).
#pragma unroll
      for (int offset = kGrid / 2; offset > 0; offset /= 2)
        row_max = fmaxf(row_max, __shfl_xor_sync(0xffffffffu, row_max, offset));
      const float m_new = fmaxf(m[ii], row_max);
      // A real row always sees key 0 in its first tile, so m_new is finite for it; the guards
      // keep rows past T (all masked) free of inf - inf.
      const float correction = m[ii] == -CUDART_INF_F ? 0.0f : exp2f(m[ii] - m_new);
      float row_sum = 0.0f;
#pragma unroll
      for (int jj = 0; jj < kPer; ++jj) {
        const float p = m_new == -CUDART_INF_F ? 0.0f : exp2f(sc[ii][jj] - m_new);
        p_tile[(ty + kGrid * ii) * kProbStride + tx + kGrid * jj] = p;
        row_sum += p;
      }
#pragma unroll
      for (int offset = kGrid / 2; offset > 0; offset /= 2)
        row_sum += __shfl_xor_sync(0xffffffffu, row_sum, offset);
      l[ii] = l[ii] * correction + row_sum;
      m[ii] = m_new;
#pragma unroll
      for (int c = 0; c < kCols; ++c) o[ii][c] *= correction;
    }
    __syncthreads();  // p_tile complete

    // o (rows ty + 16 ii, columns tx + 16 c) += P (64, 64) v (64, D)
    for (int j = 0; j < kTile; ++j) {
      float pv[kPer], vv[kCols];
#pragma unroll
      for (int ii = 0; ii < kPer; ++ii) pv[ii] = p_tile[(ty + kGrid * ii) * kProbStride + j];
#pragma unroll
      for (int c = 0; c < kCols; ++c) vv[c] = v_tile[j * kStride + tx + kGrid * c];
#pragma unroll
      for (int ii = 0; ii < kPer; ++ii)
#pragma unroll
        for (int c = 0; c < kCols; ++c) o[ii][c] += pv[ii] * vv[c];
    }
  }

  const size_t q_width = s.NH * s.D;
#pragma unroll
  for (int ii = 0; ii < kPer; ++ii) {
    const size_t i = q0 + ty + kGrid * ii;
    if (i >= s.T) continue;
    const float inv = 1.0f / l[ii];
    E* out_row = out + (b * s.T + i) * q_width + h * s.D;
#pragma unroll
    for (int c = 0; c < kCols; ++c) {
      const size_t d = tx + kGrid * c;
      if (d < s.D) out_row[d] = from_f32<E>(o[ii][c] * inv);
    }
    // Natural log, as the CPU kernel keeps it: lse = ln(sum) + max.
    if (tx == 0) lse[bh * s.T + i] = (m[ii] + log2f(l[ii])) * kLn2;
  }
}

// The probabilities and score gradients of the (query tile q0, key tile k0) pair, for rows
// ty + 16 ii and columns tx + 16 jj: S = q k^T, dP = dout v^T, P = exp(scale S - lse) where
// key <= query < T (else 0), dS = P (dP - D) scale. Both backward kernels call this, so they
// see the same P and dS bit for bit.
template <int kMaxDim>
__device__ __forceinline__ void probs_and_score_grads(float (&p)[kPer][kPer],   // out: P
                                                      float (&ds)[kPer][kPer],  // out: dS
                                                      const float* q_tile,      // (kTile, kStride)
                                                      const float* do_tile,     // (kTile, kStride)
                                                      const float* k_tile,      // (kTile, kStride)
                                                      const float* v_tile,      // (kTile, kStride)
                                                      const float* lse_tile,    // (kTile)
                                                      const float* delta_tile,  // (kTile)
                                                      const FlashDims& s, size_t q0, size_t k0) {
  constexpr int kStride = kMaxDim + 1;
  const int ty = threadIdx.x / kGrid, tx = threadIdx.x % kGrid;
  float sc[kPer][kPer], dp[kPer][kPer];
#pragma unroll
  for (int ii = 0; ii < kPer; ++ii)
#pragma unroll
    for (int jj = 0; jj < kPer; ++jj) sc[ii][jj] = dp[ii][jj] = 0.0f;
  for (int d = 0; d < static_cast<int>(s.D); ++d) {
    float qv[kPer], gv[kPer], kv[kPer], vv[kPer];
#pragma unroll
    for (int x = 0; x < kPer; ++x) {
      qv[x] = q_tile[(ty + kGrid * x) * kStride + d];
      gv[x] = do_tile[(ty + kGrid * x) * kStride + d];
      kv[x] = k_tile[(tx + kGrid * x) * kStride + d];
      vv[x] = v_tile[(tx + kGrid * x) * kStride + d];
    }
#pragma unroll
    for (int ii = 0; ii < kPer; ++ii)
#pragma unroll
      for (int jj = 0; jj < kPer; ++jj) {
        sc[ii][jj] += qv[ii] * kv[jj];
        dp[ii][jj] += gv[ii] * vv[jj];
      }
  }
#pragma unroll
  for (int ii = 0; ii < kPer; ++ii) {
    const int r = ty + kGrid * ii;
    const size_t i = q0 + r;
#pragma unroll
    for (int jj = 0; jj < kPer; ++jj) {
      const size_t j = k0 + tx + kGrid * jj;
      p[ii][jj] = (j <= i && i < s.T) ? exp2f(sc[ii][jj] * s.scale_log2 - lse_tile[r]) : 0.0f;
      ds[ii][jj] = p[ii][jj] * (dp[ii][jj] - delta_tile[r]) * s.scale;
    }
  }
}

// dk and dv: one block per (key tile, b, kv head), the only writer of its keys' dk and dv.
template <int kMaxDim, typename E>
__global__ void __launch_bounds__(kThreads)
    flash_backward_dkdv_kernel(E* dqkv,           // (B, T, W) = (the k and v columns)
                               const E* dout,     // (B, T, NH D)
                               const E* out,      // (B, T, NH D)
                               const E* qkv,      // (B, T, W)
                               const float* lse,  // (B, NH, T)
                               FlashDims s) {
  constexpr int kStride = kMaxDim + 1;
  constexpr int kCols = kMaxDim / kGrid;
  extern __shared__ float smem[];
  float* k_tile = smem;                            // (kTile, kStride) this block's keys
  float* v_tile = k_tile + kTile * kStride;        // (kTile, kStride) and values
  float* q_tile = v_tile + kTile * kStride;        // (kTile, kStride) the current query tile
  float* do_tile = q_tile + kTile * kStride;       // (kTile, kStride) its dout
  float* p_tile = do_tile + kTile * kStride;       // (kTile, kProbStride) P, then dS
  float* lse_tile = p_tile + kTile * kProbStride;  // (kTile) the query rows' lse, log2 domain
  float* delta_tile = lse_tile + kTile;            // (kTile) D = rowsum(dout * out)

  const size_t kt = blockIdx.x % s.tiles;
  const size_t bk = blockIdx.x / s.tiles;
  const size_t b = bk / s.NKV, kvh = bk % s.NKV;
  const size_t k0 = kt * kTile;
  const int ty = threadIdx.x / kGrid, tx = threadIdx.x % kGrid;
  const size_t q_width = s.NH * s.D;

  load_tile<kMaxDim>(k_tile, qkv, s.W, k_offset(s, kvh), s, b, k0);
  load_tile<kMaxDim>(v_tile, qkv, s.W, v_offset(s, kvh), s, b, k0);

  // dk and dv of key rows ty + 16 jj, columns tx + 16 c.
  float dk[kPer][kCols], dv[kPer][kCols];
#pragma unroll
  for (int jj = 0; jj < kPer; ++jj)
#pragma unroll
    for (int c = 0; c < kCols; ++c) dk[jj][c] = dv[jj][c] = 0.0f;

  for (size_t h = kvh * s.rep; h < (kvh + 1) * s.rep; ++h) {
    for (size_t qt = kt; qt < s.tiles; ++qt) {  // query tiles at or after this key tile
      const size_t q0 = qt * kTile;
      __syncthreads();  // the previous tile's readers of q_tile, do_tile, p_tile are done
      load_tile<kMaxDim>(q_tile, qkv, s.W, q_offset(s, h), s, b, q0);
      load_tile<kMaxDim>(do_tile, dout, q_width, h * s.D, s, b, q0);
      load_row_stats<kThreads>(lse_tile, delta_tile, dout, out, lse, s, b, h, q0);
      __syncthreads();

      float p[kPer][kPer], ds[kPer][kPer];
      probs_and_score_grads<kMaxDim>(p, ds, q_tile, do_tile, k_tile, v_tile, lse_tile, delta_tile,
                                     s, q0, k0);
#pragma unroll
      for (int ii = 0; ii < kPer; ++ii)
#pragma unroll
        for (int jj = 0; jj < kPer; ++jj)
          p_tile[(ty + kGrid * ii) * kProbStride + tx + kGrid * jj] = p[ii][jj];
      __syncthreads();  // P complete

      // dv (key rows ty + 16 jj, columns tx + 16 c) += P^T dout
      for (int i = 0; i < kTile; ++i) {
        float pv[kPer], gv[kCols];
#pragma unroll
        for (int jj = 0; jj < kPer; ++jj) pv[jj] = p_tile[i * kProbStride + ty + kGrid * jj];
#pragma unroll
        for (int c = 0; c < kCols; ++c) gv[c] = do_tile[i * kStride + tx + kGrid * c];
#pragma unroll
        for (int jj = 0; jj < kPer; ++jj)
#pragma unroll
          for (int c = 0; c < kCols; ++c) dv[jj][c] += pv[jj] * gv[c];
      }
      __syncthreads();  // every reader of P is done: the tile now takes dS
#pragma unroll
      for (int ii = 0; ii < kPer; ++ii)
#pragma unroll
        for (int jj = 0; jj < kPer; ++jj)
          p_tile[(ty + kGrid * ii) * kProbStride + tx + kGrid * jj] = ds[ii][jj];
      __syncthreads();  // dS complete

      // dk (key rows ty + 16 jj, columns tx + 16 c) += dS^T q
      for (int i = 0; i < kTile; ++i) {
        float dsv[kPer], qv[kCols];
#pragma unroll
        for (int jj = 0; jj < kPer; ++jj) dsv[jj] = p_tile[i * kProbStride + ty + kGrid * jj];
#pragma unroll
        for (int c = 0; c < kCols; ++c) qv[c] = q_tile[i * kStride + tx + kGrid * c];
#pragma unroll
        for (int jj = 0; jj < kPer; ++jj)
#pragma unroll
          for (int c = 0; c < kCols; ++c) dk[jj][c] += dsv[jj] * qv[c];
      }
    }
  }

  // This block is the only writer of its keys' dk and dv.
#pragma unroll
  for (int jj = 0; jj < kPer; ++jj) {
    const size_t j = k0 + ty + kGrid * jj;
    if (j >= s.T) continue;
    E* dk_row = dqkv + (b * s.T + j) * s.W + k_offset(s, kvh);
    E* dv_row = dqkv + (b * s.T + j) * s.W + v_offset(s, kvh);
#pragma unroll
    for (int c = 0; c < kCols; ++c) {
      const size_t d = tx + kGrid * c;
      if (d < s.D) {
        dk_row[d] = from_f32<E>(dk[jj][c]);
        dv_row[d] = from_f32<E>(dv[jj][c]);
      }
    }
  }
}

// dq: one block per (query tile, b, query head), the only writer of its rows' dq. It walks the
// key tiles 0..qt in that order, recomputing P and dS as the dk/dv kernel does, and keeps dq in
// registers: every element's sum runs in one fixed order, so the result repeats bit for bit. The
// price is computing S and dP a second time (two of the backward's seven tile products), where
// adding dq from the dk/dv blocks with atomics would have summed in whatever order they ran.
template <int kMaxDim, typename E>
__global__ void __launch_bounds__(kThreads)
    flash_backward_dq_kernel(E* dqkv,           // (B, T, W) = (the q columns)
                             const E* dout,     // (B, T, NH D)
                             const E* out,      // (B, T, NH D)
                             const E* qkv,      // (B, T, W)
                             const float* lse,  // (B, NH, T)
                             FlashDims s) {
  constexpr int kStride = kMaxDim + 1;
  constexpr int kCols = kMaxDim / kGrid;
  extern __shared__ float smem[];
  float* q_tile = smem;                             // (kTile, kStride) this block's queries
  float* do_tile = q_tile + kTile * kStride;        // (kTile, kStride) and their dout
  float* k_tile = do_tile + kTile * kStride;        // (kTile, kStride) the current key tile
  float* v_tile = k_tile + kTile * kStride;         // (kTile, kStride) and its values
  float* ds_tile = v_tile + kTile * kStride;        // (kTile, kProbStride) dS
  float* lse_tile = ds_tile + kTile * kProbStride;  // (kTile) the query rows' lse, log2 domain
  float* delta_tile = lse_tile + kTile;             // (kTile) D = rowsum(dout * out)

  // The last query tiles cost the most; they get the lowest block indices.
  const size_t qt = s.tiles - 1 - blockIdx.x % s.tiles;
  const size_t bh = blockIdx.x / s.tiles;
  const size_t b = bh / s.NH, h = bh % s.NH, kvh = h / s.rep;
  const size_t q0 = qt * kTile;
  const int ty = threadIdx.x / kGrid, tx = threadIdx.x % kGrid;
  const size_t q_width = s.NH * s.D;

  load_tile<kMaxDim>(q_tile, qkv, s.W, q_offset(s, h), s, b, q0);
  load_tile<kMaxDim>(do_tile, dout, q_width, h * s.D, s, b, q0);
  load_row_stats<kThreads>(lse_tile, delta_tile, dout, out, lse, s, b, h, q0);

  // dq of query rows ty + 16 ii, columns tx + 16 c.
  float dq[kPer][kCols];
#pragma unroll
  for (int ii = 0; ii < kPer; ++ii)
#pragma unroll
    for (int c = 0; c < kCols; ++c) dq[ii][c] = 0.0f;

  for (size_t kt = 0; kt <= qt; ++kt) {  // key tiles up to the diagonal, in order
    const size_t k0 = kt * kTile;
    __syncthreads();  // the previous tile's readers of k_tile, v_tile, ds_tile are done
    load_tile<kMaxDim>(k_tile, qkv, s.W, k_offset(s, kvh), s, b, k0);
    load_tile<kMaxDim>(v_tile, qkv, s.W, v_offset(s, kvh), s, b, k0);
    __syncthreads();

    float p[kPer][kPer], ds[kPer][kPer];
    probs_and_score_grads<kMaxDim>(p, ds, q_tile, do_tile, k_tile, v_tile, lse_tile, delta_tile, s,
                                   q0, k0);
#pragma unroll
    for (int ii = 0; ii < kPer; ++ii)
#pragma unroll
      for (int jj = 0; jj < kPer; ++jj)
        ds_tile[(ty + kGrid * ii) * kProbStride + tx + kGrid * jj] = ds[ii][jj];
    __syncthreads();  // dS complete

    // dq (query rows ty + 16 ii, columns tx + 16 c) += dS k
    for (int j = 0; j < kTile; ++j) {
      float dsv[kPer], kv[kCols];
#pragma unroll
      for (int ii = 0; ii < kPer; ++ii) dsv[ii] = ds_tile[(ty + kGrid * ii) * kProbStride + j];
#pragma unroll
      for (int c = 0; c < kCols; ++c) kv[c] = k_tile[j * kStride + tx + kGrid * c];
#pragma unroll
      for (int ii = 0; ii < kPer; ++ii)
#pragma unroll
        for (int c = 0; c < kCols; ++c) dq[ii][c] += dsv[ii] * kv[c];
    }
  }

  // This block is the only writer of its rows' dq.
#pragma unroll
  for (int ii = 0; ii < kPer; ++ii) {
    const size_t i = q0 + ty + kGrid * ii;
    if (i >= s.T) continue;
    E* dq_row = dqkv + (b * s.T + i) * s.W + q_offset(s, h);
#pragma unroll
    for (int c = 0; c < kCols; ++c) {
      const size_t d = tx + kGrid * c;
      if (d < s.D) dq_row[d] = from_f32<E>(dq[ii][c]);
    }
  }
}

constexpr size_t forward_smem_bytes(int max_dim) {
  return (3 * static_cast<size_t>(kTile) * (max_dim + 1) +
          static_cast<size_t>(kTile) * kProbStride) *
         sizeof(float);
}
constexpr size_t backward_smem_bytes(int max_dim) {
  return (4 * static_cast<size_t>(kTile) * (max_dim + 1) +
          static_cast<size_t>(kTile) * kProbStride + 2 * static_cast<size_t>(kTile)) *
         sizeof(float);
}

template <int kMaxDim, typename E>
void forward(cudaStream_t stream, E* out, float* lse, const E* qkv, const FlashDims& s) {
  constexpr size_t bytes = forward_smem_bytes(kMaxDim);
  allow_shared_memory(flash_forward_kernel<kMaxDim, E>, bytes, s);
  const unsigned blocks = grid_of(s.tiles * s.B * s.NH);
  flash_forward_kernel<kMaxDim, E><<<blocks, kThreads, bytes, stream>>>(out, lse, qkv, s);
  TZ_CUDA_CHECK_LAUNCH();
}

template <int kMaxDim, typename E>
void backward(cudaStream_t stream, E* dqkv, const E* dout, const E* out, const E* qkv,
              const float* lse, const FlashDims& s) {
  // Both kernels hold four (kTile, kMaxDim + 1) tiles, P or dS and two rows of kTile floats. They
  // write disjoint columns of dqkv (k and v; q), each element by one block, and together every
  // element of it.
  constexpr size_t bytes = backward_smem_bytes(kMaxDim);
  allow_shared_memory(flash_backward_dkdv_kernel<kMaxDim, E>, bytes, s);
  allow_shared_memory(flash_backward_dq_kernel<kMaxDim, E>, bytes, s);
  const unsigned kv_blocks = grid_of(s.tiles * s.B * s.NKV);
  flash_backward_dkdv_kernel<kMaxDim, E>
      <<<kv_blocks, kThreads, bytes, stream>>>(dqkv, dout, out, qkv, lse, s);
  TZ_CUDA_CHECK_LAUNCH();
  const unsigned q_blocks = grid_of(s.tiles * s.B * s.NH);
  flash_backward_dq_kernel<kMaxDim, E>
      <<<q_blocks, kThreads, bytes, stream>>>(dqkv, dout, out, qkv, lse, s);
  TZ_CUDA_CHECK_LAUNCH();
}

}  // namespace

void launch_flash_attention_forward(cudaStream_t stream, float* out, float* lse, const float* qkv,
                                    const AttentionShape& shape) {
  const FlashDims s = flash_dims(shape);
  if (s.B == 0 || s.T == 0) return;
  with_max_dim(s, [&]<int kMaxDim>() { forward<kMaxDim>(stream, out, lse, qkv, s); });
}

void launch_flash_attention_backward(cudaStream_t stream, float* dqkv, const float* dout,
                                     const float* out, const float* qkv, const float* lse,
                                     const AttentionShape& shape) {
  const FlashDims s = flash_dims(shape);
  if (s.B == 0 || s.T == 0) return;
  with_max_dim(s, [&]<int kMaxDim>() { backward<kMaxDim>(stream, dqkv, dout, out, qkv, lse, s); });
}

void launch_flash_attention16_forward(cudaStream_t stream, void* out, float* lse, const void* qkv,
                                      DType type, const AttentionShape& shape) {
  const FlashDims s = flash_dims(shape);
  if (s.B == 0 || s.T == 0) return;
  with_16bit_max_dim(type, s, [&]<int kMaxDim, typename E>() {
    forward<kMaxDim>(stream, static_cast<E*>(out), lse, static_cast<const E*>(qkv), s);
  });
}

void launch_flash_attention16_backward(cudaStream_t stream, void* dqkv, const void* dout,
                                       const void* out, const void* qkv, const float* lse,
                                       DType type, const AttentionShape& shape) {
  const FlashDims s = flash_dims(shape);
  if (s.B == 0 || s.T == 0) return;
  with_16bit_max_dim(type, s, [&]<int kMaxDim, typename E>() {
    backward<kMaxDim>(stream, static_cast<E*>(dqkv), static_cast<const E*>(dout),
                      static_cast<const E*>(out), static_cast<const E*>(qkv), lse, s);
  });
}

}  // namespace tierzero::kernels::cuda_impl
