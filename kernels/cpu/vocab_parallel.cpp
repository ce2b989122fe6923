// The vocabulary-parallel kernels (tensor parallelism) on the CPU: the embedding lookup and its
// gradient for the rows [vocab_start, vocab_start + vocab_count) of wte one rank holds, and the
// cross-entropy over the logit columns one rank holds, in two passes around the caller's
// all-gather of per-row partials {max, sum of exponentials, target logit}.
// Over the whole vocabulary the encoder kernels give the same bits as encoder.cpp (the same
// additions in the same order), and the cross-entropy reduces rows like softmax_xent.cpp
// (softmax_rows.hpp), so a one-rank split differs from it only by rounding the partials to fp32.
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "cpu/softmax_rows.hpp"
#include "cpu/storage16.hpp"
#include "cpu/vec_math.hpp"
#include "tierzero/core/error.hpp"
#include "tierzero/kernels/cpu_ops.hpp"

namespace tierzero::kernels::cpu {

namespace {

// The row of wte_local holding `token`, or vocab_count when the token is not in this range
// (negative tokens wrap to huge values and fall outside too).
inline size_t local_row(int32_t token, size_t vocab_start, size_t vocab_count) {
  const size_t row = static_cast<size_t>(static_cast<int64_t>(token)) - vocab_start;
  return row < vocab_count ? row : vocab_count;
}

// Cheap argument checks, made before any thread starts (an exception cannot leave a parallel
// region).
void check_xent_args(const char* what, const int32_t* targets, size_t N, size_t V) {
  TZ_CHECK(V > 0, std::string(what) + ": the real vocabulary size V is 0",
           "pass the real (unpadded) vocabulary size");
  for (size_t n = 0; n < N; ++n) {
    TZ_CHECK(targets[n] >= 0 && static_cast<size_t>(targets[n]) < V,
             std::string(what) + ": target " + std::to_string(targets[n]) + " at row " +
                 std::to_string(n) + " is outside 0.." + std::to_string(V - 1),
             "the token data does not match the model's vocabulary");
  }
}

// How many of a rank's Vl columns, starting at global column vocab_start, are real (< V).
inline size_t real_columns(size_t Vl, size_t vocab_start, size_t V) {
  if (vocab_start >= V) return 0;
  return V - vocab_start < Vl ? V - vocab_start : Vl;
}

}  // namespace

void encoder_forward_vocab_range(float* out,              // (B, T, C)
                                 const int32_t* tokens,   // (B, T)
                                 const float* wte_local,  // (vocab_count, C)
                                 const float* wpe,        // (maxT, C) nullable
                                 size_t vocab_start, size_t vocab_count, size_t B, size_t T,
                                 size_t C) {
#pragma omp parallel for schedule(static)
  for (size_t bt = 0; bt < B * T; ++bt) {
    const size_t t = bt % T;
    const size_t row = local_row(tokens[bt], vocab_start, vocab_count);
    float* out_row = out + bt * C;  // (C)
    if (row < vocab_count) {
      const float* wte_row = wte_local + row * C;  // (C)
      if (wpe != nullptr) {
        const float* wpe_row = wpe + t * C;  // (C)
#pragma omp simd
        for (size_t c = 0; c < C; ++c) out_row[c] = wte_row[c] + wpe_row[c];
      } else {
#pragma omp simd
        for (size_t c = 0; c < C; ++c) out_row[c] = wte_row[c];
      }
    } else if (wpe != nullptr) {
      const float* wpe_row = wpe + t * C;  // (C)
      // 0 + wpe as the contract states (a -0 position entry comes out +0).
#pragma omp simd
      for (size_t c = 0; c < C; ++c) out_row[c] = 0.0f + wpe_row[c];
    } else {
#pragma omp simd
      for (size_t c = 0; c < C; ++c) out_row[c] = 0.0f;
    }
  }
}

// The 16-bit form: each token's row widened as it is read (wpe's rows used, once), then the
// fp32 sums above.
void encoder16_forward(float* out, const int32_t* tokens, const void* wte_local, const void* wpe,
                       DType type, size_t vocab_start, size_t vocab_count, size_t B, size_t T,
                       size_t C) {
  check_16bit_types("encoder16_forward", type, type);
  const std::vector<float> wpe32 = widened(wpe, type, T * C);  // (T, C): the positions used
  const auto* wte_bytes = static_cast<const unsigned char*>(wte_local);
  const size_t row_bytes = C * dtype_size(type);
#pragma omp parallel
  {
    std::vector<float> wte_row(C);  // (C) the token's row, widened
#pragma omp for schedule(static)
    for (size_t bt = 0; bt < B * T; ++bt) {
      const size_t row = local_row(tokens[bt], vocab_start, vocab_count);
      const float* wpe_row = wpe32.empty() ? nullptr : wpe32.data() + (bt % T) * C;  // (C)
      float* out_row = out + bt * C;                                                 // (C)
      if (row < vocab_count) {
        tierzero::convert_to_f32(wte_row.data(), wte_bytes + row * row_bytes, type, C);
        for (size_t c = 0; c < C; ++c)
          out_row[c] = wpe_row != nullptr ? wte_row[c] + wpe_row[c] : wte_row[c];
      } else {
        for (size_t c = 0; c < C; ++c) out_row[c] = wpe_row != nullptr ? 0.0f + wpe_row[c] : 0.0f;
      }
    }
  }
}

void encoder_backward_vocab_range(float* dwte_local,      // (vocab_count, C) +=
                                  float* dwpe,            // (maxT, C) += nullable
                                  const float* dout,      // (B, T, C)
                                  const int32_t* tokens,  // (B, T)
                                  size_t vocab_start, size_t vocab_count, size_t B, size_t T,
                                  size_t C) {
  // As encoder_backward: tokens repeat, so each thread owns a slice of the channels for every
  // row; race-free, no atomics, and every element adds its terms in (b, t) order.
  constexpr size_t kSlice = 64;
  const size_t slices = (C + kSlice - 1) / kSlice;
#pragma omp parallel for schedule(static)
  for (size_t s = 0; s < slices; ++s) {
    const size_t c0 = s * kSlice;
    const size_t width = C - c0 < kSlice ? C - c0 : kSlice;
    for (size_t bt = 0; bt < B * T; ++bt) {
      const float* dout_row = dout + bt * C + c0;  // (width)
      const size_t row = local_row(tokens[bt], vocab_start, vocab_count);
      if (row < vocab_count) {
        float* dwte_row = dwte_local + row * C + c0;  // (width)
#pragma omp simd
        for (size_t c = 0; c < width; ++c) dwte_row[c] += dout_row[c];
      }
      if (dwpe != nullptr) {
        float* dwpe_row = dwpe + (bt % T) * C + c0;  // (width)
#pragma omp simd
        for (size_t c = 0; c < width; ++c) dwpe_row[c] += dout_row[c];
      }
    }
  }
}

void vocab_xent_partials(float* partials,         // (N, 3)
                         const float* logits,     // (N, Vl)
                         const int32_t* targets,  // (N)
                         size_t N, size_t Vl, size_t vocab_start, size_t V) {
  check_xent_args("vocab_xent_partials", targets, N, V);
  const size_t real = real_columns(Vl, vocab_start, V);
#pragma omp parallel for schedule(static)
  for (size_t n = 0; n < N; ++n) {
    const float* x = logits + n * Vl;  // (Vl)
    const float m = row_max(x, real);  // -inf when real is 0
    const double sum = row_exp_sum(x, real, m);
    // Targets are < V, so a target in this rank's columns is a real one.
    const size_t column = static_cast<size_t>(targets[n]) - vocab_start;  // wraps when below
    float* p = partials + n * 3;                                          // (3)
    p[0] = m;
    p[1] = static_cast<float>(sum);
    p[2] = column < Vl ? x[column] : 0.0f;
  }
}

void vocab_xent_finish(float* dlogits,             // (N, Vl) nullable, may alias logits
                       float* losses,              // (N)
                       const float* logits,        // (N, Vl)
                       const float* all_partials,  // (ranks, N, 3)
                       size_t ranks, const int32_t* targets, float dloss, size_t N, size_t Vl,
                       size_t vocab_start, size_t V) {
  check_xent_args("vocab_xent_finish", targets, N, V);
  TZ_CHECK(ranks > 0, "vocab_xent_finish: no partials (ranks is 0)",
           "pass every rank's partials, all-gathered in rank order");
  const size_t real = real_columns(Vl, vocab_start, V);
#pragma omp parallel for schedule(static)
  for (size_t n = 0; n < N; ++n) {
    float M = -std::numeric_limits<float>::infinity();
    for (size_t r = 0; r < ranks; ++r) {
      const float m = all_partials[(r * N + n) * 3];
      M = m > M ? m : M;
    }
    // In double: a handful of terms per row. A rank without real columns has m = -inf and s = 0
    // and adds 0 (its exp(m - M) is 0, not a NaN, since M is finite).
    double S = 0.0;
    double X = 0.0;  // exactly one rank holds the target, the others add 0
    for (size_t r = 0; r < ranks; ++r) {
      const float* p = all_partials + (r * N + n) * 3;  // (3)
      if (p[1] > 0.0f) {
        S += static_cast<double>(p[1]) *
             std::exp(static_cast<double>(p[0]) - static_cast<double>(M));
      }
      X += static_cast<double>(p[2]);
    }
    losses[n] = static_cast<float>(std::log(S) - (X - static_cast<double>(M)));
    if (dlogits == nullptr) continue;

    const float* x = logits + n * Vl;  // (Vl)
    float* dx = dlogits + n * Vl;      // (Vl), possibly the same memory as x
    const float scale = static_cast<float>(static_cast<double>(dloss) / S);
    // Same-index read-then-write, so in-place operation is safe in vector form too.
#pragma omp simd
    for (size_t i = 0; i < real; ++i) dx[i] = exp_approx(x[i] - M) * scale;
    const size_t column = static_cast<size_t>(targets[n]) - vocab_start;  // wraps when below
    if (column < real) dx[column] -= dloss;
    for (size_t i = real; i < Vl; ++i) dx[i] = 0.0f;
  }
}

}  // namespace tierzero::kernels::cpu
