// `tierzero plan --check`: the chosen configuration trained here for a few steps, so the plan can
// print its predicted step time next to a measured one and the user sees the model's error on
// this machine before sizing a long run on it.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>

namespace tierzero::cli {

struct PlanCheck {
  int64_t warmup = 1;   // steps run first and not counted (the first step allocates and warms up)
  int64_t steps = 0;    // steps measured
  int threads = 1;      // CPU kernel threads the run used
  double wall_s = 0.0;  // median step wall time
  double cpu_s = 0.0;   // median step CPU time per thread (the process's CPU time / threads)
  // Median of each step's lower of wall and CPU-per-thread time: the step on an otherwise idle
  // machine, which is what the planner predicts (its rates are measured the same way).
  double idle_s = 0.0;
};

// Trains `config` (a plan's config JSON) for warmup + steps steps in this process, silently; one
// rank only. Throws Error when the run fails.
PlanCheck run_plan_check(const nlohmann::json& config, int64_t warmup, int64_t steps);

}  // namespace tierzero::cli
