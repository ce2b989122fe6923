// Training a plan's configuration for a few steps and taking medians (see plan_check.hpp).
#include "plan_check.hpp"

#include <algorithm>
#include <vector>

#include "tierzero/core/error.hpp"
#include "tierzero/kernels/cpu_ops.hpp"
#include "tierzero/train/train_config.hpp"
#include "tierzero/train/trainer.hpp"

namespace tierzero::cli {

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace

PlanCheck run_plan_check(const nlohmann::json& config, int64_t warmup, int64_t steps) {
  TZ_CHECK(steps >= 1 && warmup >= 0, "plan --check: no steps to measure",
           "give --check-steps of at least 1");
  train::TrainConfig c = train::TrainConfig::parse(config.dump(), "the chosen configuration");
  c.steps = warmup + steps;
  c.val_batches = 0;  // the check times training steps only
  c.val_every = 0;
  c.log_level = "warn";
  PlanCheck out;
  out.warmup = warmup;
  out.steps = steps;
  train::Trainer trainer(c);
  const train::TrainResult r = trainer.run(nullptr);
  out.threads = std::max(kernels::cpu::threads(), 1);
  TZ_CHECK(r.steps.size() == static_cast<size_t>(c.steps),
           "plan --check: the run did " + std::to_string(r.steps.size()) + " of " +
               std::to_string(c.steps) + " steps",
           "run the written config with `tierzero train` to see why");
  std::vector<double> wall, cpu, idle;
  for (size_t i = static_cast<size_t>(warmup); i < r.steps.size(); ++i) {
    const train::StepRecord& s = r.steps[i];
    wall.push_back(s.seconds);
    cpu.push_back(s.cpu_seconds / out.threads);
    idle.push_back(std::min(s.seconds, s.cpu_seconds / out.threads));
  }
  out.wall_s = median(wall);
  out.cpu_s = median(cpu);
  out.idle_s = median(idle);
  return out;
}

}  // namespace tierzero::cli
