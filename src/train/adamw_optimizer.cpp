// The resident AdamW step: the whole model in one call, each tensor a segment with its own weight
// decay (one launch per 64 tensors on CUDA rather than one per tensor).
#include "tierzero/train/adamw_optimizer.hpp"

#include <cmath>
#include <vector>

#include "tierzero/core/error.hpp"

namespace tierzero::train {

AdamWOptimizer::AdamWOptimizer(const OptimizerConfig& config, const nn::ParamLayout& layout,
                               DeviceAllocator& allocator)
    : c_(config), layout_(layout), device_(allocator.device()) {
  const size_t bytes = layout.total_numel() * sizeof(float);
  m_ = allocator.allocate(bytes, Category::optimizer, "adam m");
  v_ = allocator.allocate(bytes, Category::optimizer, "adam v");
  device_.fill_zero(m_.data(), bytes, device_.default_stream());
  device_.fill_zero(v_.data(), bytes, device_.default_stream());
  norm_sum_ = allocator.allocate(sizeof(double), Category::workspace, "adam grad-norm sum");
}

StepStats AdamWOptimizer::step(nn::LocalParams& params, double lr, double gradient_clipping) {
  kernels::Kernels& k = device_.kernels();
  StepStats s;
  // The step's one read of device results (counted, host_waits.hpp): Kernels::sum_squares would
  // wait inside the kernels layer, unseen by the count.
  auto* sum = static_cast<double*>(norm_sum_.data());
  k.sum_squares_to(sum, params.grads(), params.numel());
  double sum_squares = 0.0;
  Stream& st = device_.default_stream();
  device_.copy(&sum_squares, sum, sizeof(double), CopyKind::device_to_host, st);
  st.synchronize();
  s.grad_norm = std::sqrt(sum_squares);
  if (!std::isfinite(s.grad_norm))
    TZ_THROW("gradient norm is not finite at optimizer step " + std::to_string(t_ + 1),
             "lower the learning rate; the parameters were not updated");
  if (gradient_clipping > 0.0) {
    const double coef = gradient_clipping / (s.grad_norm + 1e-6);
    if (coef < 1.0) s.clip_scale = coef;
  }
  ++t_;
  const kernels::AdamWParams p{static_cast<float>(lr),
                               static_cast<float>(c_.beta1),
                               static_cast<float>(c_.beta2),
                               static_cast<float>(c_.eps),
                               static_cast<float>(c_.weight_decay),
                               static_cast<float>(s.clip_scale),
                               t_};
  std::vector<kernels::AdamWSegment> segments;  // (tensors)
  for (const nn::ParamTensor& t : layout_.tensors())
    segments.push_back({t.offset, t.numel, t.decay ? p.weight_decay : 0.0f});
  // A 16-bit working copy is rewritten in the update's pass (null and fp32 without one).
  k.adamw_update_segments(params.params(), m_.f32(), v_.f32(), params.grads(), params.working(),
                          params.params16_type(), segments.data(), segments.size(), p);
  return s;
}

}  // namespace tierzero::train
