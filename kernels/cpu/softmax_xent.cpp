// Softmax cross-entropy over the vocabulary, on the CPU: the loss alone, and the loss fused with
// its gradient. The fused kernel may write the gradient over the logits (saving a (N, Vp)
// buffer), so each row reads its target logit first and then makes exactly three passes: max,
// exp (stored in place, so exp runs once per element) with the sum, and the final scaling. A row
// of 50k floats stays in L2 between passes. Sums of exponentials are fp32 within blocks of
// kSumBlock and double across blocks (softmax_rows.hpp): with a scalar exp this kernel ran five
// times slower.
#include <cmath>
#include <string>

#include "cpu/softmax_rows.hpp"
#include "cpu/vec_math.hpp"
#include "tierzero/core/error.hpp"
#include "tierzero/kernels/cpu_ops.hpp"

namespace tierzero::kernels::cpu {

namespace {

// Cheap argument checks, made before any thread starts (an exception cannot leave a parallel
// region).
void check_args(const int32_t* targets, size_t N, size_t V, size_t Vp) {
  TZ_CHECK(V > 0 && V <= Vp,
           "softmax_xent: V = " + std::to_string(V) + " must be in 1..Vp = " + std::to_string(Vp),
           "V is the real vocabulary size, Vp the padded row length");
  for (size_t n = 0; n < N; ++n) {
    TZ_CHECK(targets[n] >= 0 && static_cast<size_t>(targets[n]) < V,
             "softmax_xent: target " + std::to_string(targets[n]) + " at row " + std::to_string(n) +
                 " is outside 0.." + std::to_string(V - 1),
             "the token data does not match the model's vocabulary");
  }
}

}  // namespace

void softmax_xent_forward(float* losses,           // (N)
                          const float* logits,     // (N, Vp)
                          const int32_t* targets,  // (N)
                          size_t N, size_t V, size_t Vp) {
  check_args(targets, N, V, Vp);
#pragma omp parallel for schedule(static)
  for (size_t n = 0; n < N; ++n) {
    const float* x = logits + n * Vp;  // (Vp)
    const float m = row_max(x, V);
    const double sum = row_exp_sum(x, V, m);
    const float x_target = x[static_cast<size_t>(targets[n])];
    losses[n] = static_cast<float>(std::log(sum) - static_cast<double>(x_target - m));
  }
}

void softmax_xent_forward_backward(float* dlogits,          // (N, Vp), may alias logits
                                   float* losses,           // (N)
                                   const float* logits,     // (N, Vp)
                                   const int32_t* targets,  // (N)
                                   float dloss, size_t N, size_t V, size_t Vp) {
  check_args(targets, N, V, Vp);
#pragma omp parallel for schedule(static)
  for (size_t n = 0; n < N; ++n) {
    const float* x = logits + n * Vp;  // (Vp)
    float* dx = dlogits + n * Vp;      // (Vp), possibly the same memory as x
    const size_t target = static_cast<size_t>(targets[n]);
    const float x_target = x[target];  // read before dx may overwrite it
    const float m = row_max(x, V);
    double sum = 0.0;
    for (size_t begin = 0; begin < V; begin += kSumBlock) {
      const size_t end = V - begin < kSumBlock ? V : begin + kSumBlock;
      float block_sum = 0.0f;
      // Same-index read-then-write, so in-place operation is safe in vector form too.
#pragma omp simd reduction(+ : block_sum)
      for (size_t i = begin; i < end; ++i) {
        const float e = exp_approx(x[i] - m);
        dx[i] = e;
        block_sum += e;
      }
      sum += static_cast<double>(block_sum);
    }
    losses[n] = static_cast<float>(std::log(sum) - static_cast<double>(x_target - m));
    const float scale = static_cast<float>(static_cast<double>(dloss) / sum);
#pragma omp simd
    for (size_t i = 0; i < V; ++i) dx[i] *= scale;
    dx[target] -= dloss;
    for (size_t i = V; i < Vp; ++i) dx[i] = 0.0f;
  }
}

}  // namespace tierzero::kernels::cpu
