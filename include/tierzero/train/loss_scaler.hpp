// LossScaler: fp16's loss scaling with DeepSpeed's rules. The loss (and so every gradient) is
// multiplied by scale() before backward, so small fp16 gradients do not flush to zero; the
// optimizer divides it out. Dynamic scaling starts at 2^initial_scale_power, halves the scale
// after `hysteresis` overflowing steps (those steps update nothing) and doubles it after
// loss_scale_window steps without an overflow, never going below min_loss_scale. A fixed
// loss_scale > 0, or no fp16 at all, keeps the scale constant.
#pragma once

#include <cstdint>

#include "tierzero/train/train_config.hpp"

namespace tierzero::train {

class LossScaler {
 public:
  // `enabled` false: scale 1, never changes.
  LossScaler(const LossScaleConfig& config, bool enabled);
  double scale() const { return scale_; }
  // After each optimizer step: whether the gradient overflowed (the step was skipped).
  void update(bool overflow);
  int64_t skipped_steps() const { return skipped_; }
  bool dynamic() const { return dynamic_; }

 private:
  LossScaleConfig config_;
  bool dynamic_ = false;
  double scale_ = 1.0;
  int64_t good_steps_ = 0;
  int64_t hysteresis_left_ = 0;
  int64_t skipped_ = 0;
};

}  // namespace tierzero::train
