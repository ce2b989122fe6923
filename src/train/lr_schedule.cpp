// DeepSpeed-compatible learning-rate schedules.
#include "tierzero/train/lr_schedule.hpp"

#include <algorithm>
#include <cmath>

namespace tierzero::train {

LrSchedule::LrSchedule(const SchedulerConfig& config, double base_lr, int64_t total_steps)
    : c_(config),
      base_lr_(base_lr),
      total_(config.total_num_steps > 0 ? config.total_num_steps : total_steps) {
  if (c_.warmup_max_lr < 0) c_.warmup_max_lr = base_lr;
}

double LrSchedule::warmup_fraction(int64_t step) const {
  if (c_.warmup_num_steps <= 0 || step >= c_.warmup_num_steps) return 1.0;
  const auto w = static_cast<double>(c_.warmup_num_steps);
  if (c_.warmup_type == "log") return std::log(static_cast<double>(step) + 1.0) / std::log(w);
  return (static_cast<double>(step) + 1.0) / w;
}

double LrSchedule::lr(int64_t step) const {
  const double f = warmup_fraction(step);
  if (c_.type == "none") return base_lr_;
  if (c_.type == "WarmupLR") return c_.warmup_min_lr + (c_.warmup_max_lr - c_.warmup_min_lr) * f;
  if (c_.type == "WarmupDecayLR") {
    if (step < c_.warmup_num_steps)
      return c_.warmup_min_lr + (c_.warmup_max_lr - c_.warmup_min_lr) * f;
    const double left = static_cast<double>(std::max<int64_t>(total_ - step, 0));
    const double span = static_cast<double>(std::max<int64_t>(total_ - c_.warmup_num_steps, 1));
    return c_.warmup_max_lr * left / span;
  }
  // WarmupCosineLR: ratios of the optimizer's lr.
  if (step < c_.warmup_num_steps)
    return base_lr_ * (c_.warmup_min_ratio + (1.0 - c_.warmup_min_ratio) * f);
  const double span = static_cast<double>(std::max<int64_t>(total_ - c_.warmup_num_steps, 1));
  const double progress =
      std::clamp(static_cast<double>(step - c_.warmup_num_steps) / span, 0.0, 1.0);
  const double cosine = 0.5 * (1.0 + std::cos(3.14159265358979323846 * progress));
  return base_lr_ * (c_.cos_min_ratio + (1.0 - c_.cos_min_ratio) * cosine);
}

}  // namespace tierzero::train
