// LossScaler: DeepSpeed's dynamic loss scaling rules (see loss_scaler.hpp).
#include "tierzero/train/loss_scaler.hpp"

#include <algorithm>
#include <cmath>

namespace tierzero::train {

LossScaler::LossScaler(const LossScaleConfig& config, bool enabled) : config_(config) {
  if (!enabled) return;
  dynamic_ = config.loss_scale <= 0.0;
  scale_ =
      dynamic_ ? std::ldexp(1.0, static_cast<int>(config.initial_scale_power)) : config.loss_scale;
  hysteresis_left_ = config.hysteresis;
}

void LossScaler::update(bool overflow) {
  if (overflow) ++skipped_;
  if (!dynamic_) return;
  if (overflow) {
    good_steps_ = 0;
    // Tolerate hysteresis - 1 overflows before lowering the scale, as DeepSpeed does.
    if (--hysteresis_left_ > 0) return;
    scale_ = std::max(scale_ / 2.0, config_.min_loss_scale);
    hysteresis_left_ = config_.hysteresis;
    return;
  }
  if (config_.consecutive_hysteresis) hysteresis_left_ = config_.hysteresis;
  if (++good_steps_ % config_.loss_scale_window == 0) {
    scale_ *= 2.0;
    hysteresis_left_ = config_.hysteresis;
  }
}

}  // namespace tierzero::train
