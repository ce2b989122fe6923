// Learning-rate schedules with DeepSpeed's names and parameters: WarmupLR, WarmupDecayLR,
// WarmupCosineLR (linear or log warmup), or none (constant).
#pragma once

#include <cstdint>

#include "tierzero/train/train_config.hpp"

namespace tierzero::train {

class LrSchedule {
 public:
  // base_lr is optimizer.params.lr; total_steps is used when the scheduler gives none.
  LrSchedule(const SchedulerConfig& config, double base_lr, int64_t total_steps);
  double lr(int64_t step) const;  // step counts from 0
  int64_t total_steps() const { return total_; }

 private:
  double warmup_fraction(int64_t step) const;
  SchedulerConfig c_;
  double base_lr_;
  int64_t total_;
};

}  // namespace tierzero::train
