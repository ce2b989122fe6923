// AdamWOptimizer: the one-rank, resident optimizer (the reference path) over LocalParams.
// Decoupled weight decay on matrices only; global-norm gradient clipping (PyTorch's
// clip_grad_norm_ rule: scale by clip / (norm + 1e-6) when that is below 1).
#pragma once

#include <cstdint>

#include "tierzero/device/device_allocator.hpp"
#include "tierzero/nn/param_layout.hpp"
#include "tierzero/nn/param_provider.hpp"
#include "tierzero/train/train_config.hpp"

namespace tierzero::train {

struct StepStats {
  double grad_norm = 0.0;  // before clipping
  double clip_scale = 1.0;
};

class AdamWOptimizer {
 public:
  AdamWOptimizer(const OptimizerConfig& config, const nn::ParamLayout& layout,
                 DeviceAllocator& allocator);

  // One update of every parameter with learning rate `lr`; gradients are left as they are.
  StepStats step(nn::LocalParams& params, double lr, double gradient_clipping);
  int64_t steps_taken() const { return t_; }
  // Checkpointing: the moments (device, total_numel fp32 each) and the step count.
  float* m() { return m_.f32(); }
  float* v() { return v_.f32(); }
  void set_steps_taken(int64_t t) { t_ = t; }

 private:
  OptimizerConfig c_;
  const nn::ParamLayout& layout_;
  Device& device_;
  DeviceBuffer m_;         // (total_numel) fp32 first moment
  DeviceBuffer v_;         // (total_numel) fp32 second moment
  DeviceBuffer norm_sum_;  // (1) fp64: the gradient's sum of squares, read by the host
  int64_t t_ = 0;
};

}  // namespace tierzero::train
