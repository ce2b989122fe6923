// LossScaler: fp16's loss scaling with DeepSpeed's rules. The loss (and so every gradient) is
// multiplied by scale() before backward, so small fp16 gradients do not flush to zero; the
// optimizer divides it out. Dynamic scaling starts at 2^initial_scale_power, halves the scale
// after `hysteresis` overflowing steps (those steps update nothing) and doubles it after
// loss_scale_window steps without an overflow, never going below min_loss_scale (with
// consecutive_hysteresis, a step without one refills the hysteresis). A fixed
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
  // Everything update() changes (a checkpoint saves it; resuming restores it).
  struct State {
    double scale = 1.0;
    int64_t good_steps = 0;
    int64_t hysteresis_left = 0;
    int64_t skipped = 0;
  };
  State state() const { return {scale_, good_steps_, hysteresis_left_, skipped_}; }
  void restore(const State& s) {
    scale_ = s.scale;
    good_steps_ = s.good_steps;
    hysteresis_left_ = s.hysteresis_left;
    skipped_ = s.skipped;
  }

 private:
  LossScaleConfig config_;
  bool dynamic_ = false;
  double scale_ = 1.0;
  int64_t good_steps_ = 0;
  int64_t hysteresis_left_ = 0;
  int64_t skipped_ = 0;
};

}  // namespace tierzero::train
