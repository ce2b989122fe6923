// Recommendations: a short list of changes the numbers in a profile argue for, each computed in
// C++ from the summary (so it is testable) and emitted only when the numbers say so — e.g.
// "optimizer states on NVMe cost 1.8 s of stalls per step; 14.0 GiB of free host memory would
// hold them (6.2 GiB): set offload_optimizer.device = cpu".
#pragma once

#include <string>
#include <vector>

#include "tierzero/profile/profile.hpp"

namespace tierzero::profile {

struct Recommendation {
  std::string id;    // stable name for tests and tools: "optimizer_nvme_to_host", ...
  std::string text;  // one sentence for the user: the evidence, then what to change
};

// Ids: optimizer_nvme_to_host, params_nvme_to_host, prefetch_never_hit, prefetch_low_hit_rate,
// stalls_dominate, unaccounted_device, unaccounted_host, device_underused, device_near_budget,
// prediction_off.
std::vector<Recommendation> recommend(const Profile& p);

}  // namespace tierzero::profile
