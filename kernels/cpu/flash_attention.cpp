// Tiled causal self-attention on the CPU, after FlashAttention-2: the scores of a block of
// queries against a block of keys live only in a small tile, the softmax runs online (a running
// max and sum per query row rescale the output accumulated so far), and the forward keeps only
// each row's logsumexp. The backward recomputes the probabilities tile by tile from it and uses
// D = rowsum(dO * O) for the softmax's gradient, so no buffer grows with T^2 (the naive kernel in
// attention.cpp kept a (B, NH, T, T) one per block and stays as the reference).
//
// Tile products go to OpenBLAS on one thread each, with pointers straight into qkv (a tile's rows
// are T rows apart by the qkv row width). Work is split over OpenMP threads by (b, head, query
// block) in the forward and by (b, kv head) in the backward, where a task owns its kv head's dk
// and dv and the dq of its query heads, so no two threads write one element, and each element's
// sums run in one fixed order: the result does not depend on the thread count. The backward writes
// dqkv whole (its first product into each element has beta 0), so the caller fills nothing.
#include <cblas.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "cpu/storage16.hpp"
#include "cpu/vec_math.hpp"
#include "tierzero/core/error.hpp"
#include "tierzero/kernels/cpu_ops.hpp"

namespace tierzero::kernels::cpu {

namespace {

// Query and key rows per tile: at head_dim 128 the q, k and v tiles (32 KiB each), the 64 x 64
// score tile (16 KiB) and the output accumulator (32 KiB) stay within a core's L2 cache.
constexpr size_t kBlock = 64;

void check_shape(const char* op, const AttentionShape& s) {
  const std::string where = std::string(op) + ": ";
  TZ_CHECK(s.n_head > 0 && s.n_kv_head > 0 && s.n_head % s.n_kv_head == 0,
           where + "n_kv_head " + std::to_string(s.n_kv_head) + " does not divide n_head " +
               std::to_string(s.n_head),
           "every kv head serves the same number of query heads");
  TZ_CHECK(s.head_dim > 0, where + "head_dim is 0", "n_embd must be at least n_head");
  TZ_CHECK(s.qkv_width() <= static_cast<size_t>(INT_MAX),
           where + "a qkv row of " + std::to_string(s.qkv_width()) +
               " floats exceeds OpenBLAS's 32-bit limit",
           "use fewer or narrower heads");
}

blasint blas(size_t v) {
  return static_cast<blasint>(v);  // every extent is at most kBlock, head_dim or a checked width
}

// One (b, query head)'s view of qkv: q rows, and the k and v rows of its kv head, `ld` apart.
struct HeadRows {
  const float* q;  // (T, hd), row t at q + t * ld
  const float* k;  // (T, hd)
  const float* v;  // (T, hd)
  size_t ld;       // the qkv row width
};

HeadRows head_rows(const float* qkv, const AttentionShape& s, size_t b, size_t h) {
  const size_t W = s.qkv_width(), hd = s.head_dim;
  const size_t rep = s.n_head / s.n_kv_head, kvh = h / rep;
  const float* row0 = qkv + b * s.T * W;
  if (s.grouped) {  // group kvh: its rep query heads, then its k head, then its v head
    const float* group = row0 + kvh * (rep + 2) * hd;
    return {group + (h % rep) * hd, group + rep * hd, group + (rep + 1) * hd, W};
  }
  return {row0 + h * hd, row0 + s.q_width() + kvh * hd,
          row0 + s.q_width() + s.kv_width() + kvh * hd, W};
}

// S (nq, nk; row stride kBlock) = scale * q (nq, hd) k (nk, hd)^T for the queries q0.. and keys
// k0.., with -inf where the key comes after the query.
void score_tile(float* S, const HeadRows& r, size_t q0, size_t nq, size_t k0, size_t nk, size_t hd,
                float scale) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, blas(nq), blas(nk), blas(hd), scale,
              r.q + q0 * r.ld, blas(r.ld), r.k + k0 * r.ld, blas(r.ld), 0.0f, S, blas(kBlock));
  if (k0 + nk <= q0 + 1) return;  // every key of the tile is at or before every query
  const float minus_inf = -std::numeric_limits<float>::infinity();
  for (size_t i = 0; i < nq; ++i)
    for (size_t j = q0 + i + 1 > k0 ? q0 + i + 1 - k0 : 0; j < nk; ++j)
      S[i * kBlock + j] = minus_inf;
}

// The per-thread tiles of the forward.
struct ForwardTiles {
  std::vector<float> scores;  // (kBlock, kBlock) scores, then probabilities
  std::vector<float> acc;     // (kBlock, hd) the output before the division by the row sums
  std::vector<float> max;     // (kBlock) running row maxima
  std::vector<float> sum;     // (kBlock) running row sums of exp(score - max)
  explicit ForwardTiles(size_t hd)
      : scores(kBlock * kBlock), acc(kBlock * hd), max(kBlock), sum(kBlock) {}
};

// One query block (queries q0..q0+nq of one (b, h)): out rows (ld q_width) and lse (nq).
void forward_block(float* out, float* lse, const HeadRows& r, size_t q0, size_t nq,
                   const AttentionShape& s, ForwardTiles& t) {
  const size_t hd = s.head_dim;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  float* S = t.scores.data();
  float* acc = t.acc.data();
  std::fill(t.acc.begin(), t.acc.begin() + nq * hd, 0.0f);
  std::fill(t.max.begin(), t.max.end(), -std::numeric_limits<float>::infinity());
  std::fill(t.sum.begin(), t.sum.end(), 0.0f);
  for (size_t k0 = 0; k0 < q0 + nq; k0 += kBlock) {
    const size_t nk = std::min(kBlock, q0 + nq - k0);
    score_tile(S, r, q0, nq, k0, nk, hd, scale);
    for (size_t i = 0; i < nq; ++i) {
      float* row = S + i * kBlock;  // (nk)
      float m = t.max[i];           // -inf before the first tile, whose key 0 every row sees
      for (size_t j = 0; j < nk; ++j) m = row[j] > m ? row[j] : m;
      const float correction = exp_approx(t.max[i] - m);  // 0 on the first tile
      float row_sum = 0.0f;
#pragma omp simd reduction(+ : row_sum)
      for (size_t j = 0; j < nk; ++j) {
        row[j] = exp_approx(row[j] - m);
        row_sum += row[j];
      }
      t.sum[i] = t.sum[i] * correction + row_sum;
      t.max[i] = m;
      float* acc_row = acc + i * hd;
#pragma omp simd
      for (size_t d = 0; d < hd; ++d) acc_row[d] *= correction;
    }
    // acc (nq, hd) += P (nq, nk) v (nk, hd)
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, blas(nq), blas(hd), blas(nk), 1.0f, S,
                blas(kBlock), r.v + k0 * r.ld, blas(r.ld), 1.0f, acc, blas(hd));
  }
  const size_t ldo = s.q_width();
  for (size_t i = 0; i < nq; ++i) {
    const float inv = 1.0f / t.sum[i];
    float* out_row = out + i * ldo;
    const float* acc_row = acc + i * hd;
#pragma omp simd
    for (size_t d = 0; d < hd; ++d) out_row[d] = acc_row[d] * inv;
    lse[i] = t.max[i] + std::log(t.sum[i]);
  }
}

// The per-thread tiles of the backward.
struct BackwardTiles {
  std::vector<float> probs;  // (kBlock, kBlock) scores, then probabilities
  std::vector<float> grad;   // (kBlock, kBlock) dP, then dS
  std::vector<float> delta;  // (kBlock) D = rowsum(dO * O) of the query block
  BackwardTiles() : probs(kBlock * kBlock), grad(kBlock * kBlock), delta(kBlock) {}
};

// The gradients from one query block of one (b, h): dq of its rows, dk and dv of every key
// before them. dout and out point at the block's first row (ld q_width), dq/dk/dv like r's.
// Nothing is added into a fill: a product whose tile is the first to reach its rows writes them
// (beta 0). That is key tile 0 for dq, and for dk and dv the diagonal tile of the kv group's
// first head (`first_head`): query blocks run in order, and the first to reach a key block is
// the query block at the same rows.
void backward_block(float* dq, float* dk, float* dv, const float* dout, const float* out,
                    const float* lse, const HeadRows& r, size_t q0, size_t nq, bool first_head,
                    const AttentionShape& s, BackwardTiles& t) {
  const size_t hd = s.head_dim, ldo = s.q_width(), ld = r.ld;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  float* P = t.probs.data();
  float* G = t.grad.data();
  for (size_t i = 0; i < nq; ++i) {
    float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
    for (size_t d = 0; d < hd; ++d) dot += dout[i * ldo + d] * out[i * ldo + d];
    t.delta[i] = dot;
  }
  for (size_t k0 = 0; k0 < q0 + nq; k0 += kBlock) {
    const size_t nk = std::min(kBlock, q0 + nq - k0);
    const float dq_beta = k0 == 0 ? 0.0f : 1.0f;
    const float dkv_beta = first_head && k0 == q0 ? 0.0f : 1.0f;
    score_tile(P, r, q0, nq, k0, nk, hd, scale);
    for (size_t i = 0; i < nq; ++i) {
      float* row = P + i * kBlock;
      const float l = lse[i];
#pragma omp simd
      for (size_t j = 0; j < nk; ++j) row[j] = exp_approx(row[j] - l);
    }
    // dv (nk, hd) (+)= P^T dout; dP (nq, nk) = dout v^T
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, blas(nk), blas(hd), blas(nq), 1.0f, P,
                blas(kBlock), dout, blas(ldo), dkv_beta, dv + k0 * ld, blas(ld));
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, blas(nq), blas(nk), blas(hd), 1.0f, dout,
                blas(ldo), r.v + k0 * ld, blas(ld), 0.0f, G, blas(kBlock));
    // dS = P (dP - D), with the scores' scale folded in
    for (size_t i = 0; i < nq; ++i) {
      const float delta = t.delta[i];
      float* g = G + i * kBlock;
      const float* p = P + i * kBlock;
#pragma omp simd
      for (size_t j = 0; j < nk; ++j) g[j] = p[j] * (g[j] - delta) * scale;
    }
    // dq (nq, hd) (+)= dS k; dk (nk, hd) (+)= dS^T q
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, blas(nq), blas(hd), blas(nk), 1.0f, G,
                blas(kBlock), r.k + k0 * ld, blas(ld), dq_beta, dq + q0 * ld, blas(ld));
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, blas(nk), blas(hd), blas(nq), 1.0f, G,
                blas(kBlock), r.q + q0 * ld, blas(ld), dkv_beta, dk + k0 * ld, blas(ld));
  }
}

size_t blocks_of(size_t T) {
  return (T + kBlock - 1) / kBlock;
}

}  // namespace

void flash_attention_forward(float* out,        // (B, T, NH hd)
                             float* lse,        // (B, NH, T)
                             const float* qkv,  // (B, T, (NH + 2 NKV) hd)
                             const AttentionShape& s) {
  check_shape("attention_forward", s);
  if (s.B == 0 || s.T == 0) return;
  if (openblas_get_num_threads() != 1) openblas_set_num_threads(1);
  const size_t NB = blocks_of(s.T), tasks = s.B * s.n_head * NB;
#pragma omp parallel
  {
    ForwardTiles tiles(s.head_dim);
    // The last query blocks cost the most: they go first, and dynamic scheduling fills in.
#pragma omp for schedule(dynamic, 1)
    for (size_t task = 0; task < tasks; ++task) {
      const size_t block = NB - 1 - task % NB, bh = task / NB;
      const size_t b = bh / s.n_head, h = bh % s.n_head;
      const size_t q0 = block * kBlock, nq = std::min(kBlock, s.T - q0);
      forward_block(out + (b * s.T + q0) * s.q_width() + h * s.head_dim, lse + bh * s.T + q0,
                    head_rows(qkv, s, b, h), q0, nq, s, tiles);
    }
  }
}

void flash_attention_backward(float* dqkv,        // (B, T, (NH + 2 NKV) hd) written whole
                              const float* dout,  // (B, T, NH hd)
                              const float* out,   // (B, T, NH hd)
                              const float* qkv,   // (B, T, (NH + 2 NKV) hd)
                              const float* lse,   // (B, NH, T)
                              const AttentionShape& s) {
  check_shape("attention_backward", s);
  if (s.B == 0 || s.T == 0) return;
  if (openblas_get_num_threads() != 1) openblas_set_num_threads(1);
  const size_t NB = blocks_of(s.T), group = s.n_head / s.n_kv_head;
  const size_t tasks = s.B * s.n_kv_head, ldo = s.q_width();
#pragma omp parallel
  {
    BackwardTiles tiles;
#pragma omp for schedule(dynamic, 1)
    for (size_t task = 0; task < tasks; ++task) {
      const size_t b = task / s.n_kv_head, kvh = task % s.n_kv_head;
      for (size_t h = kvh * group; h < (kvh + 1) * group; ++h) {
        const HeadRows r = head_rows(qkv, s, b, h);
        // The gradients sit where their values sit in qkv.
        float* dq = dqkv + (r.q - qkv);
        float* dk = dqkv + (r.k - qkv);
        float* dv = dqkv + (r.v - qkv);
        for (size_t block = 0; block < NB; ++block) {
          const size_t q0 = block * kBlock, nq = std::min(kBlock, s.T - q0);
          const size_t first = (b * s.T + q0) * ldo + h * s.head_dim;
          backward_block(dq, dk, dv, dout + first, out + first, lse + (b * s.n_head + h) * s.T + q0,
                         r, q0, nq, h == kvh * group, s, tiles);
        }
      }
    }
  }
}

// The 16-bit forms: the tensors widened, the kernels above, the results rounded once.
void flash_attention16_forward(void* out, float* lse, const void* qkv, DType type,
                               const AttentionShape& s) {
  check_16bit_types("attention16_forward", type, type);
  const size_t rows = s.B * s.T;
  const std::vector<float> qkv32 = widened(qkv, type, rows * s.qkv_width());  // (B, T, W)
  std::vector<float> out32(rows * s.q_width());                               // (B, T, NH hd)
  flash_attention_forward(out32.data(), lse, qkv32.data(), s);
  tierzero::convert_from_f32(out, type, out32.data(), out32.size());
}

void flash_attention16_backward(void* dqkv, const void* dout, const void* out, const void* qkv,
                                const float* lse, DType type, const AttentionShape& s) {
  check_16bit_types("attention16_backward", type, type);
  const size_t rows = s.B * s.T;
  const std::vector<float> qkv32 = widened(qkv, type, rows * s.qkv_width());  // (B, T, W)
  const std::vector<float> out32 = widened(out, type, rows * s.q_width());    // (B, T, NH hd)
  const std::vector<float> dout32 = widened(dout, type, rows * s.q_width());  // (B, T, NH hd)
  std::vector<float> dqkv32(qkv32.size());                                    // (B, T, W)
  flash_attention_backward(dqkv32.data(), dout32.data(), out32.data(), qkv32.data(), lse, s);
  tierzero::convert_from_f32(dqkv, type, dqkv32.data(), dqkv32.size());
}

}  // namespace tierzero::kernels::cpu
