// Causal self-attention on the tensor cores, for 16-bit compute (matmul precision bf16 or fp16):
// the algorithm of flash_attention.cu (FlashAttention-2's online softmax, nothing of size T^2,
// the natural-log logsumexp (B, NH, T) kept for the backward, a dk/dv pass and a dq pass in which
// every element of dqkv has one writer and sums in a fixed order, so runs repeat bit for bit, and
// dqkv is written whole, with no fill),
// with every tile product on the tensor cores through WMMA's 16 x 16 x 16 fragments: bf16
// operands, fp32 accumulation. q, k, v and dout are rounded to bf16 as their tiles are loaded,
// the probabilities and score gradients as they enter a product; softmax, its statistics, the
// output and every gradient stay fp32. fp32 mode keeps the CUDA-core kernels (the reference).
//
// 128 threads per block: four warps, each owning 16 of the tile's 64 rows (queries, or keys in
// the dk/dv pass), so after a tile is loaded a warp only meets its own rows of the score tiles:
// __syncwarp, not __syncthreads, between its products and its softmax. In the softmax two lanes
// share a row, 32 columns each. Fragments are opaque, so the per-row rescaling of the forward's
// output runs on an fp32 copy in shared memory; the backward's dk, dv and dq stay in fragments
// (registers) from the first tile to the last. Head dims up to 128 (32, 64 or 128 with
// zero-padded columns), both qkv layouts and grouped kv heads, as the fp32 kernels.
#include <cuda_bf16.h>
#include <mma.h>

#include "cuda/cuda_common.cuh"
#include "cuda/flash_attention_launch.cuh"

namespace tierzero::kernels::cuda_impl {

namespace {

using bf16 = __nv_bfloat16;
namespace wmma = nvcuda::wmma;

constexpr int kTcWarps = 4;  // each owns 16 rows of the 64-row tile
constexpr int kTcThreads = kTcWarps * kWarpSize;
constexpr int kFrag = 16;            // WMMA's m = n = k
constexpr int kScoreLd = kTile + 4;  // a row of a (64, 64) fp32 tile in shared memory
constexpr int kProbLd = kTile + 8;   // a row of a (64, 64) bf16 tile
[[maybe_unused]] constexpr int kTileFrags = kTile / kFrag;  // 4

using FragA = wmma::fragment<wmma::matrix_a, kFrag, kFrag, kFrag, bf16, wmma::row_major>;
using FragBRow = wmma::fragment<wmma::matrix_b, kFrag, kFrag, kFrag, bf16, wmma::row_major>;
using FragBCol = wmma::fragment<wmma::matrix_b, kFrag, kFrag, kFrag, bf16, wmma::col_major>;
using FragC = wmma::fragment<wmma::accumulator, kFrag, kFrag, kFrag, float>;

// Row lengths (elements) of the (64, kMaxDim) tiles: padded against bank conflicts, and multiples
// of 8 (bf16) and 4 (fp32) as WMMA requires.
template <int kMaxDim>
constexpr int head_ld() {
  return kMaxDim + 8;  // bf16
}
template <int kMaxDim>
constexpr int out_ld() {
  return kMaxDim + 4;  // fp32
}
// Shared-memory regions start at multiples of 128 bytes (WMMA needs 32).
constexpr size_t align128(size_t bytes) {
  return (bytes + 127) / 128 * 128;
}
template <int kMaxDim>
constexpr size_t head_tile_bytes() {
  return align128(static_cast<size_t>(kTile) * head_ld<kMaxDim>() * sizeof(bf16));
}
constexpr size_t score_tile_bytes = align128(static_cast<size_t>(kTile) * kScoreLd * sizeof(float));
constexpr size_t prob_tile_bytes = align128(static_cast<size_t>(kTile) * kProbLd * sizeof(bf16));
constexpr size_t row_stats_bytes = align128(kTile * sizeof(float));

// tile (kTile, head_ld) bf16 <- rows row0.. of a (B, T, ld) tensor of batch b, channels
// offset..offset+D, rounded to bf16; rows past T and columns past D are zero. E, the element type
// of qkv, out, dout and dqkv in every kernel below: float, or a 16-bit type (storage16.cuh, the
// 16-bit attention of kernels.hpp) read widened (a bf16 one loads as it is) and written rounded
// from the fp32 value.
template <int kMaxDim, typename E>
__device__ __forceinline__ void load_tile_bf16(bf16* tile, const E* src, size_t ld, size_t offset,
                                               const FlashDims& s, size_t b, size_t row0) {
  for (int idx = threadIdx.x; idx < kTile * kMaxDim; idx += kTcThreads) {
    const int r = idx / kMaxDim, d = idx % kMaxDim;
    const size_t t = row0 + static_cast<size_t>(r);
    float v = 0.0f;
    if (t < s.T && static_cast<size_t>(d) < s.D) v = to_f32(src[(b * s.T + t) * ld + offset + d]);
    tile[r * head_ld<kMaxDim>() + d] = __float2bfloat16(v);
  }
}

// dst (this warp's 16 rows, 64 columns) fp32 = rows (16, kMaxDim) · tile^T, tile (64, kMaxDim):
// a score tile S = q k^T (or S^T = k q^T, dP = dout v^T, dP^T = v dout^T).
template <int kMaxDim>
__device__ __forceinline__ void warp_product_nt(float* dst,        // (16, kScoreLd) fp32
                                                const bf16* rows,  // (16, head_ld) bf16
                                                const bf16* tile)  // (kTile, head_ld) bf16
{
  constexpr int ld = head_ld<kMaxDim>();
#pragma unroll
  for (int n = 0; n < kTileFrags; ++n) {
    FragC c;
    wmma::fill_fragment(c, 0.0f);
#pragma unroll
    for (int kk = 0; kk < kMaxDim / kFrag; ++kk) {
      FragA a;
      FragBCol bt;  // column-major (k, n) at [n ld + k]: the transpose of the tile's rows
      wmma::load_matrix_sync(a, rows + kk * kFrag, ld);
      wmma::load_matrix_sync(bt, tile + n * kFrag * ld + kk * kFrag, ld);
      wmma::mma_sync(c, a, bt, c);
    }
    wmma::store_matrix_sync(dst + n * kFrag, c, kScoreLd, wmma::mem_row_major);
  }
}

// acc (this warp's 16 rows, kMaxDim) += rows (16, 64) · tile (64, kMaxDim): dv += P^T dout,
// dk += dS^T q, dq += dS k.
template <int kMaxDim>
__device__ __forceinline__ void warp_product_nn(FragC (&acc)[kMaxDim / kFrag],
                                                const bf16* rows,  // (16, kProbLd) bf16
                                                const bf16* tile)  // (kTile, head_ld) bf16
{
  constexpr int ld = head_ld<kMaxDim>();
#pragma unroll
  for (int kk = 0; kk < kTileFrags; ++kk) {
    FragA a;
    wmma::load_matrix_sync(a, rows + kk * kFrag, kProbLd);
#pragma unroll
    for (int n = 0; n < kMaxDim / kFrag; ++n) {
      FragBRow bm;
      wmma::load_matrix_sync(bm, tile + kk * kFrag * ld + n * kFrag, ld);
      wmma::mma_sync(acc[n], a, bm, acc[n]);
    }
  }
}

// dst (B, T, W) = acc, the warp's 16 rows from row0 (rows past T and columns past D skipped) at
// channel offset `offset`; scratch (16, kScoreLd) fp32 is the warp's own.
template <int kMaxDim, typename E>
__device__ __forceinline__ void store_fragments(E* dst, const FragC (&acc)[kMaxDim / kFrag],
                                                float* scratch, const FlashDims& s, size_t b,
                                                size_t row0, size_t offset) {
  const int lane = threadIdx.x % kWarpSize;
#pragma unroll
  for (int n = 0; n < kMaxDim / kFrag; ++n) {
    __syncwarp();  // the previous fragment's readers are done
    wmma::store_matrix_sync(scratch, acc[n], kScoreLd, wmma::mem_row_major);
    __syncwarp();
    for (int e = lane; e < kFrag * kFrag; e += kWarpSize) {
      const int r = e / kFrag, c = e % kFrag;
      const size_t t = row0 + static_cast<size_t>(r), d = static_cast<size_t>(n * kFrag + c);
      if (t < s.T && d < s.D)
        dst[(b * s.T + t) * s.W + offset + d] = from_f32<E>(scratch[r * kScoreLd + c]);
    }
  }
}

// The forward's shared memory: q, k, v (bf16), S (fp32), P (bf16), the output rows (fp32).
template <int kMaxDim>
constexpr size_t forward_bytes() {
  return 3 * head_tile_bytes<kMaxDim>() + score_tile_bytes + prob_tile_bytes +
         align128(static_cast<size_t>(kTile) * out_ld<kMaxDim>() * sizeof(float));
}

template <int kMaxDim, typename E>
__global__ void __launch_bounds__(kTcThreads) flash_tc_forward_kernel(E* out,        // (B, T, NH D)
                                                                      float* lse,    // (B, NH, T)
                                                                      const E* qkv,  // (B, T, W)
                                                                      FlashDims s) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
  __trap();  // bf16 WMMA needs sm_80; CudaKernels never launches this below it
#else
  constexpr int ld = head_ld<kMaxDim>(), old = out_ld<kMaxDim>();
  extern __shared__ __align__(128) unsigned char tc_smem[];
  auto* q_s = reinterpret_cast<bf16*>(tc_smem);                                   // (64, ld)
  auto* k_s = reinterpret_cast<bf16*>(tc_smem + head_tile_bytes<kMaxDim>());      // (64, ld)
  auto* v_s = reinterpret_cast<bf16*>(tc_smem + 2 * head_tile_bytes<kMaxDim>());  // (64, ld)
  unsigned char* rest = tc_smem + 3 * head_tile_bytes<kMaxDim>();
  auto* s_s = reinterpret_cast<float*>(rest);                    // (64, kScoreLd)
  auto* p_s = reinterpret_cast<bf16*>(rest + score_tile_bytes);  // (64, kProbLd)
  auto* o_s = reinterpret_cast<float*>(rest + score_tile_bytes + prob_tile_bytes);  // (64, old)

  // The last query tiles cost the most; they get the lowest block indices.
  const size_t qt = s.tiles - 1 - blockIdx.x % s.tiles;
  const size_t bh = blockIdx.x / s.tiles;
  const size_t b = bh / s.NH, h = bh % s.NH, kvh = h / s.rep;
  const size_t q0 = qt * kTile;
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  const int w0 = warp * kFrag;                   // the warp's first row of the tile
  const int r = w0 + lane / 2, half = lane % 2;  // this lane's row, and which half of it
  const size_t i = q0 + static_cast<size_t>(r);  // its query
  constexpr int kHalfDim = kMaxDim / 2;

  load_tile_bf16<kMaxDim>(q_s, qkv, s.W, q_offset(s, h), s, b, q0);
  for (int d = half * kHalfDim; d < (half + 1) * kHalfDim; ++d) o_s[r * old + d] = 0.0f;
  float m = -CUDART_INF_F, l = 0.0f;  // the row's running max (log2 domain) and sum

  for (size_t kt = 0; kt <= qt; ++kt) {
    const size_t k0 = kt * kTile;
    __syncthreads();  // the previous tile's readers of k_s and v_s are done
    load_tile_bf16<kMaxDim>(k_s, qkv, s.W, k_offset(s, kvh), s, b, k0);
    load_tile_bf16<kMaxDim>(v_s, qkv, s.W, v_offset(s, kvh), s, b, k0);
    __syncthreads();

    warp_product_nt<kMaxDim>(s_s + w0 * kScoreLd, q_s + w0 * ld, k_s);
    __syncwarp();
    float* srow = s_s + r * kScoreLd;
    float row_max = -CUDART_INF_F;
    for (int c = half * 32; c < half * 32 + 32; ++c) {
      const size_t j = k0 + static_cast<size_t>(c);
      // Causal: key j <= query i (< T for a real row; rows past T are never written).
      const float v = (j <= i && i < s.T) ? srow[c] * s.scale_log2 : -CUDART_INF_F;
      srow[c] = v;
      row_max = fmaxf(row_max, v);
    }
    row_max = fmaxf(row_max, __shfl_xor_sync(0xffffffffu, row_max, 1));
    const float m_new = fmaxf(m, row_max);
    // A real row always sees key 0 in its first tile, so m_new is finite for it; the guards keep
    // rows past T (all masked) free of inf - inf.
    const float correction = m == -CUDART_INF_F ? 0.0f : exp2f(m - m_new);
    float row_sum = 0.0f;
    for (int c = half * 32; c < half * 32 + 32; ++c) {
      const bf16 p = __float2bfloat16(m_new == -CUDART_INF_F ? 0.0f : exp2f(srow[c] - m_new));
      p_s[r * kProbLd + c] = p;
      row_sum += __bfloat162float(p);  // the weights the product below uses
    }
    row_sum += __shfl_xor_sync(0xffffffffu, row_sum, 1);
    l = l * correction + row_sum;
    m = m_new;
    for (int d = half * kHalfDim; d < (half + 1) * kHalfDim; ++d) o_s[r * old + d] *= correction;
    __syncwarp();  // P and the rescaled output rows complete

    // o (the warp's rows) += P (16, 64) v (64, kMaxDim), through fragments loaded from o_s.
#pragma unroll
    for (int n = 0; n < kMaxDim / kFrag; ++n) {
      FragC c;
      wmma::load_matrix_sync(c, o_s + w0 * old + n * kFrag, old, wmma::mem_row_major);
#pragma unroll
      for (int kk = 0; kk < kTileFrags; ++kk) {
        FragA a;
        FragBRow bm;
        wmma::load_matrix_sync(a, p_s + w0 * kProbLd + kk * kFrag, kProbLd);
        wmma::load_matrix_sync(bm, v_s + kk * kFrag * ld + n * kFrag, ld);
        wmma::mma_sync(c, a, bm, c);
      }
      wmma::store_matrix_sync(o_s + w0 * old + n * kFrag, c, old, wmma::mem_row_major);
    }
    __syncwarp();  // the output rows are stored before the next rescaling reads them
  }

  if (i >= s.T) return;
  const float inv = 1.0f / l;
  E* out_row = out + (b * s.T + i) * (s.NH * s.D) + h * s.D;
  for (int d = half * kHalfDim; d < (half + 1) * kHalfDim; ++d)
    if (static_cast<size_t>(d) < s.D) out_row[d] = from_f32<E>(o_s[r * old + d] * inv);
  // Natural log, as the fp32 kernels keep it: lse = ln(sum) + max.
  if (half == 0) lse[bh * s.T + i] = (m + log2f(l)) * kLn2;
#endif
}

// The backward's shared memory: four (64, kMaxDim) bf16 tiles, two fp32 score tiles, two bf16
// probability tiles and the two row statistics.
template <int kMaxDim>
struct BackwardSmem {
  bf16 *own_a, *own_b;    // the block's own rows: k, v (dk/dv pass) or q, dout (dq pass)
  bf16 *walk_a, *walk_b;  // the tile walked: q, dout (dk/dv pass) or k, v (dq pass)
  float *scores, *grads;  // (64, kScoreLd): S and dP (or their transposes)
  bf16 *probs, *dscores;  // (64, kProbLd): P (or P^T) and dS (or dS^T), rounded to bf16
  float *lse, *delta;     // (kTile)

  __device__ explicit BackwardSmem(unsigned char* base) {
    constexpr size_t t = head_tile_bytes<kMaxDim>();
    own_a = reinterpret_cast<bf16*>(base);
    own_b = reinterpret_cast<bf16*>(base + t);
    walk_a = reinterpret_cast<bf16*>(base + 2 * t);
    walk_b = reinterpret_cast<bf16*>(base + 3 * t);
    unsigned char* rest = base + 4 * t;
    scores = reinterpret_cast<float*>(rest);
    grads = reinterpret_cast<float*>(rest + score_tile_bytes);
    probs = reinterpret_cast<bf16*>(rest + 2 * score_tile_bytes);
    dscores = reinterpret_cast<bf16*>(rest + 2 * score_tile_bytes + prob_tile_bytes);
    lse = reinterpret_cast<float*>(rest + 2 * score_tile_bytes + 2 * prob_tile_bytes);
    delta = reinterpret_cast<float*>(rest + 2 * score_tile_bytes + 2 * prob_tile_bytes +
                                     row_stats_bytes);
  }
  static constexpr size_t bytes() {
    return 4 * head_tile_bytes<kMaxDim>() + 2 * score_tile_bytes + 2 * prob_tile_bytes +
           2 * row_stats_bytes;
  }
};

// dk and dv: one block per (key tile, b, kv head), the only writer of its keys' dk and dv. Each
// warp owns 16 keys; for every query head of the group and query tile at or after the keys it
// forms S^T = k q^T and dP^T = v dout^T, then P^T and dS^T, and adds P^T dout and dS^T q.
template <int kMaxDim, typename E>
__global__ void __launch_bounds__(kTcThreads)
    flash_tc_backward_dkdv_kernel(E* dqkv,           // (B, T, W) = (the k and v columns)
                                  const E* dout,     // (B, T, NH D)
                                  const E* out,      // (B, T, NH D)
                                  const E* qkv,      // (B, T, W)
                                  const float* lse,  // (B, NH, T)
                                  FlashDims s) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
  __trap();  // bf16 WMMA needs sm_80; CudaKernels never launches this below it
#else
  constexpr int ld = head_ld<kMaxDim>();
  extern __shared__ __align__(128) unsigned char tc_smem[];
  const BackwardSmem<kMaxDim> sm(tc_smem);
  const size_t kt = blockIdx.x % s.tiles;
  const size_t bk = blockIdx.x / s.tiles;
  const size_t b = bk / s.NKV, kvh = bk % s.NKV;
  const size_t k0 = kt * kTile;
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  const int w0 = warp * kFrag;
  const int r = w0 + lane / 2, half = lane % 2;  // this lane's key row, and which half of it
  const size_t j = k0 + static_cast<size_t>(r);
  const size_t q_width = s.NH * s.D;

  load_tile_bf16<kMaxDim>(sm.own_a, qkv, s.W, k_offset(s, kvh), s, b, k0);
  load_tile_bf16<kMaxDim>(sm.own_b, qkv, s.W, v_offset(s, kvh), s, b, k0);
  FragC dk[kMaxDim / kFrag], dv[kMaxDim / kFrag];  // the warp's 16 keys
#pragma unroll
  for (int n = 0; n < kMaxDim / kFrag; ++n) {
    wmma::fill_fragment(dk[n], 0.0f);
    wmma::fill_fragment(dv[n], 0.0f);
  }

  for (size_t h = kvh * s.rep; h < (kvh + 1) * s.rep; ++h) {
    for (size_t qt = kt; qt < s.tiles; ++qt) {  // query tiles at or after this key tile
      const size_t q0 = qt * kTile;
      __syncthreads();  // the previous tile's readers of the walked tiles and stats are done
      load_tile_bf16<kMaxDim>(sm.walk_a, qkv, s.W, q_offset(s, h), s, b, q0);
      load_tile_bf16<kMaxDim>(sm.walk_b, dout, q_width, h * s.D, s, b, q0);
      load_row_stats<kTcThreads>(sm.lse, sm.delta, dout, out, lse, s, b, h, q0);
      __syncthreads();

      warp_product_nt<kMaxDim>(sm.scores + w0 * kScoreLd, sm.own_a + w0 * ld, sm.walk_a);
      warp_product_nt<kMaxDim>(sm.grads + w0 * kScoreLd, sm.own_b + w0 * ld, sm.walk_b);
      __syncwarp();
      for (int c = half * 32; c < half * 32 + 32; ++c) {
        const size_t i = q0 + static_cast<size_t>(c);  // the query of column c
        const float p = (j <= i && i < s.T)
                            ? exp2f(sm.scores[r * kScoreLd + c] * s.scale_log2 - sm.lse[c])
                            : 0.0f;
        sm.probs[r * kProbLd + c] = __float2bfloat16(p);
        sm.dscores[r * kProbLd + c] =
            __float2bfloat16(p * (sm.grads[r * kScoreLd + c] - sm.delta[c]) * s.scale);
      }
      __syncwarp();
      warp_product_nn<kMaxDim>(dv, sm.probs + w0 * kProbLd, sm.walk_b);    // += P^T dout
      warp_product_nn<kMaxDim>(dk, sm.dscores + w0 * kProbLd, sm.walk_a);  // += dS^T q
    }
  }
  // This block is the only writer of its keys' dk and dv.
  store_fragments<kMaxDim>(dqkv, dk, sm.scores + w0 * kScoreLd, s, b, k0 + w0, k_offset(s, kvh));
  store_fragments<kMaxDim>(dqkv, dv, sm.scores + w0 * kScoreLd, s, b, k0 + w0, v_offset(s, kvh));
#endif
}

// dq: one block per (query tile, b, query head), the only writer of its rows' dq, walking the key
// tiles 0..qt in that order (FlashAttention-2's deterministic mode).
template <int kMaxDim, typename E>
__global__ void __launch_bounds__(kTcThreads)
    flash_tc_backward_dq_kernel(E* dqkv,           // (B, T, W) = (the q columns)
                                const E* dout,     // (B, T, NH D)
                                const E* out,      // (B, T, NH D)
                                const E* qkv,      // (B, T, W)
                                const float* lse,  // (B, NH, T)
                                FlashDims s) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
  __trap();  // bf16 WMMA needs sm_80; CudaKernels never launches this below it
#else
  constexpr int ld = head_ld<kMaxDim>();
  extern __shared__ __align__(128) unsigned char tc_smem[];
  const BackwardSmem<kMaxDim> sm(tc_smem);
  // The last query tiles cost the most; they get the lowest block indices.
  const size_t qt = s.tiles - 1 - blockIdx.x % s.tiles;
  const size_t bh = blockIdx.x / s.tiles;
  const size_t b = bh / s.NH, h = bh % s.NH, kvh = h / s.rep;
  const size_t q0 = qt * kTile;
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  const int w0 = warp * kFrag;
  const int r = w0 + lane / 2, half = lane % 2;  // this lane's query row, and which half of it
  const size_t i = q0 + static_cast<size_t>(r);
  const size_t q_width = s.NH * s.D;

  load_tile_bf16<kMaxDim>(sm.own_a, qkv, s.W, q_offset(s, h), s, b, q0);
  load_tile_bf16<kMaxDim>(sm.own_b, dout, q_width, h * s.D, s, b, q0);
  load_row_stats<kTcThreads>(sm.lse, sm.delta, dout, out, lse, s, b, h, q0);
  FragC dq[kMaxDim / kFrag];  // the warp's 16 queries
#pragma unroll
  for (int n = 0; n < kMaxDim / kFrag; ++n) wmma::fill_fragment(dq[n], 0.0f);

  for (size_t kt = 0; kt <= qt; ++kt) {  // key tiles up to the diagonal, in order
    const size_t k0 = kt * kTile;
    __syncthreads();  // the previous tile's readers of k and v are done (and the first loads)
    load_tile_bf16<kMaxDim>(sm.walk_a, qkv, s.W, k_offset(s, kvh), s, b, k0);
    load_tile_bf16<kMaxDim>(sm.walk_b, qkv, s.W, v_offset(s, kvh), s, b, k0);
    __syncthreads();

    warp_product_nt<kMaxDim>(sm.scores + w0 * kScoreLd, sm.own_a + w0 * ld, sm.walk_a);
    warp_product_nt<kMaxDim>(sm.grads + w0 * kScoreLd, sm.own_b + w0 * ld, sm.walk_b);
    __syncwarp();
    for (int c = half * 32; c < half * 32 + 32; ++c) {
      const size_t key = k0 + static_cast<size_t>(c);
      const float p = (key <= i && i < s.T)
                          ? exp2f(sm.scores[r * kScoreLd + c] * s.scale_log2 - sm.lse[r])
                          : 0.0f;
      sm.dscores[r * kProbLd + c] =
          __float2bfloat16(p * (sm.grads[r * kScoreLd + c] - sm.delta[r]) * s.scale);
    }
    __syncwarp();
    warp_product_nn<kMaxDim>(dq, sm.dscores + w0 * kProbLd, sm.walk_a);  // += dS k
  }
  // This block is the only writer of its rows' dq.
  store_fragments<kMaxDim>(dqkv, dq, sm.scores + w0 * kScoreLd, s, b, q0 + w0, q_offset(s, h));
#endif
}

// ---- launches (the host emulation of the kernels above stops here) ----

template <int kMaxDim, typename E>
void forward_tc(cudaStream_t stream, E* out, float* lse, const E* qkv, const FlashDims& s) {
  constexpr size_t bytes = forward_bytes<kMaxDim>();
  allow_shared_memory(flash_tc_forward_kernel<kMaxDim, E>, bytes, s);
  const unsigned blocks = grid_of(s.tiles * s.B * s.NH);
  flash_tc_forward_kernel<kMaxDim, E><<<blocks, kTcThreads, bytes, stream>>>(out, lse, qkv, s);
  TZ_CUDA_CHECK_LAUNCH();
}

template <int kMaxDim, typename E>
void backward_tc(cudaStream_t stream, E* dqkv, const E* dout, const E* out, const E* qkv,
                 const float* lse, const FlashDims& s) {
  // The two kernels write disjoint columns of dqkv (k and v; q), each element by one block, and
  // together every element of it.
  constexpr size_t bytes = BackwardSmem<kMaxDim>::bytes();
  allow_shared_memory(flash_tc_backward_dkdv_kernel<kMaxDim, E>, bytes, s);
  allow_shared_memory(flash_tc_backward_dq_kernel<kMaxDim, E>, bytes, s);
  const unsigned kv_blocks = grid_of(s.tiles * s.B * s.NKV);
  flash_tc_backward_dkdv_kernel<kMaxDim, E>
      <<<kv_blocks, kTcThreads, bytes, stream>>>(dqkv, dout, out, qkv, lse, s);
  TZ_CUDA_CHECK_LAUNCH();
  const unsigned q_blocks = grid_of(s.tiles * s.B * s.NH);
  flash_tc_backward_dq_kernel<kMaxDim, E>
      <<<q_blocks, kTcThreads, bytes, stream>>>(dqkv, dout, out, qkv, lse, s);
  TZ_CUDA_CHECK_LAUNCH();
}

}  // namespace

void launch_flash_attention_tc_forward(cudaStream_t stream, float* out, float* lse,
                                       const float* qkv, const AttentionShape& shape) {
  const FlashDims s = flash_dims(shape);
  if (s.B == 0 || s.T == 0) return;
  with_max_dim(s, [&]<int kMaxDim>() { forward_tc<kMaxDim>(stream, out, lse, qkv, s); });
}

void launch_flash_attention_tc_backward(cudaStream_t stream, float* dqkv, const float* dout,
                                        const float* out, const float* qkv, const float* lse,
                                        const AttentionShape& shape) {
  const FlashDims s = flash_dims(shape);
  if (s.B == 0 || s.T == 0) return;
  with_max_dim(s,
               [&]<int kMaxDim>() { backward_tc<kMaxDim>(stream, dqkv, dout, out, qkv, lse, s); });
}

void launch_flash_attention16_tc_forward(cudaStream_t stream, void* out, float* lse,
                                         const void* qkv, DType type, const AttentionShape& shape) {
  const FlashDims s = flash_dims(shape);
  if (s.B == 0 || s.T == 0) return;
  with_16bit_max_dim(type, s, [&]<int kMaxDim, typename E>() {
    forward_tc<kMaxDim>(stream, static_cast<E*>(out), lse, static_cast<const E*>(qkv), s);
  });
}

void launch_flash_attention16_tc_backward(cudaStream_t stream, void* dqkv, const void* dout,
                                          const void* out, const void* qkv, const float* lse,
                                          DType type, const AttentionShape& shape) {
  const FlashDims s = flash_dims(shape);
  if (s.B == 0 || s.T == 0) return;
  with_16bit_max_dim(type, s, [&]<int kMaxDim, typename E>() {
    backward_tc<kMaxDim>(stream, static_cast<E*>(dqkv), static_cast<const E*>(dout),
                         static_cast<const E*>(out), static_cast<const E*>(qkv), lse, s);
  });
}

}  // namespace tierzero::kernels::cuda_impl
