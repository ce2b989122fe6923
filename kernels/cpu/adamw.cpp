// AdamW on the CPU, PyTorch semantics (torch.optim.AdamW): decoupled weight decay first, then the
// bias-corrected Adam step. One vectorised, OpenMP-parallel pass over the five streams; the CPU
// optimizer offload path calls it on host shards, where it is bound by memory bandwidth.
#include <cmath>
#include <string>

#include "tierzero/core/error.hpp"
#include "tierzero/kernels/cpu_ops.hpp"

namespace tierzero::kernels::cpu {

void adamw_update(float* param,       // (n)
                  float* m,           // (n)
                  float* v,           // (n)
                  const float* grad,  // (n)
                  size_t n, const AdamWParams& p) {
  TZ_CHECK(p.step >= 1, "adamw: step is " + std::to_string(p.step) + ", must be >= 1",
           "the step count is 1-based (it drives the bias correction)");
  // Scalars in double, as PyTorch computes them from Python floats, then rounded once.
  const double lr = static_cast<double>(p.lr);
  const double t = static_cast<double>(p.step);
  const double bias_correction1 = 1.0 - std::pow(static_cast<double>(p.beta1), t);
  const double bias_correction2 = 1.0 - std::pow(static_cast<double>(p.beta2), t);
  const float decay = static_cast<float>(1.0 - lr * static_cast<double>(p.weight_decay));
  const float step_size = static_cast<float>(lr / bias_correction1);
  const float inv_sqrt_bc2 = static_cast<float>(1.0 / std::sqrt(bias_correction2));
  const float b1 = p.beta1;
  const float b2 = p.beta2;
  const float one_minus_b1 = static_cast<float>(1.0 - static_cast<double>(p.beta1));
  const float one_minus_b2 = static_cast<float>(1.0 - static_cast<double>(p.beta2));
  const float eps = p.eps;
  const float grad_scale = p.grad_scale;
#pragma omp parallel for simd schedule(static)
  for (size_t i = 0; i < n; ++i) {
    const float g = grad[i] * grad_scale;
    const float mi = b1 * m[i] + one_minus_b1 * g;
    const float vi = b2 * v[i] + one_minus_b2 * g * g;
    const float denom = std::sqrt(vi) * inv_sqrt_bc2 + eps;  // sqrt(v_hat) + eps
    param[i] = param[i] * decay - step_size * mi / denom;    // step_size * m / ... = lr * m_hat
    m[i] = mi;
    v[i] = vi;
  }
}

}  // namespace tierzero::kernels::cpu
