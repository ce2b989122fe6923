// The recommendation rules. Thresholds are deliberately coarse: a recommendation should point at
// something worth changing, not at noise, so each needs a clear margin in the numbers.
#include "tierzero/profile/recommendations.hpp"

#include <algorithm>
#include <cmath>

#include "format_text.hpp"
#include "tierzero/profile/profile_summary.hpp"

namespace tierzero::profile {

namespace {

// Stalls below this share of a step are overlap doing its job, not a problem.
constexpr double kStallShare = 0.05;
// Stalls above this share of a step dominate it whatever their cause.
constexpr double kStallDominates = 0.25;
// Moving states to host memory must leave this share of the free memory unused (page cache,
// other ranks' buffers, the OS).
constexpr double kHostHeadroom = 0.8;
// Unaccounted bytes below this are allocator slack and runtime libraries.
constexpr int64_t kUnaccountedDevice = int64_t{256} << 20;
constexpr int64_t kUnaccountedHost = int64_t{512} << 20;
constexpr double kUnaccountedShare = 0.2;  // of what the driver or OS reports
constexpr double kDeviceUnderused = 0.5;   // of the device budget
constexpr double kDeviceNearBudget = 0.95;
// Predictions within this share (or this many bytes) count as right.
constexpr double kPredictionShare = 0.10;
constexpr size_t kPredictionBytes = size_t{1} << 20;
constexpr double kLowHitRate = 0.5;

bool any_row_on(const Profile& p, std::string PlacementRow::*field, const char* tier) {
  for (const auto& r : p.placements)
    if (r.*field == tier) return true;
  return false;
}

// A suggestion to move one state class from NVMe to host when stalls are large and host has room.
void nvme_to_host(const Profile& p, const ProfileSummary& s, std::string PlacementRow::*field,
                  Category category, const char* what, const char* knob, const char* id,
                  std::vector<Recommendation>& out) {
  if (!any_row_on(p, field, "nvme")) return;
  if (s.mean_step_s <= 0.0 || s.mean_stall_s < kStallShare * s.mean_step_s) return;
  const size_t need =
      s.peak[static_cast<size_t>(Tier::nvme)][static_cast<size_t>(category)].at.bytes;
  const auto room = static_cast<size_t>(static_cast<double>(s.host_available) * kHostHeadroom);
  if (need == 0 || s.host_available == 0 || need > room) return;
  out.push_back(
      {id, format_text("%s on NVMe cost %.2f s of stalls per step (%.0f%% of the "
                       "step); %s of free host memory would hold them (%s): set %s",
                       what, s.mean_stall_s, 100.0 * s.mean_stall_s / s.mean_step_s,
                       format_bytes(s.host_available).c_str(), format_bytes(need).c_str(), knob)});
}

}  // namespace

std::vector<Recommendation> recommend(const Profile& p) {
  std::vector<Recommendation> out;
  if (p.steps.empty()) return out;
  const ProfileSummary s = summarize(p);

  nvme_to_host(p, s, &PlacementRow::optimizer_tier, Category::optimizer, "optimizer states",
               "offload_optimizer.device = cpu", "optimizer_nvme_to_host", out);
  nvme_to_host(p, s, &PlacementRow::param_tier, Category::param, "parameters",
               "offload_param.device = cpu", "params_nvme_to_host", out);

  const size_t fetches = s.prefetch_hits + s.on_demand_fetches;
  if (s.on_demand_fetches > 0 && s.prefetch_hits == 0) {
    out.push_back({"prefetch_never_hit",
                   format_text("prefetch never hit (%zu on-demand fetches in %zu steps): raise "
                               "stage3_prefetch_bucket_size",
                               s.on_demand_fetches, s.steady_steps)});
  } else if (fetches > 0 &&
             static_cast<double>(s.prefetch_hits) < kLowHitRate * static_cast<double>(fetches)) {
    out.push_back(
        {"prefetch_low_hit_rate",
         format_text("prefetch hit only %.0f%% of %zu fetches: raise "
                     "stage3_prefetch_bucket_size",
                     100.0 * static_cast<double>(s.prefetch_hits) / static_cast<double>(fetches),
                     fetches)});
  }

  const bool moved_nvme =
      !out.empty() && (out[0].id == "optimizer_nvme_to_host" || out[0].id == "params_nvme_to_host");
  if (!moved_nvme && s.mean_step_s > 0.0 && s.mean_stall_s > kStallDominates * s.mean_step_s)
    out.push_back(
        {"stalls_dominate",
         format_text("stalls take %.0f%% of each step (%.2f s of %.2f s): raise "
                     "stage3_prefetch_bucket_size or keep more states on a faster tier",
                     100.0 * s.mean_stall_s / s.mean_step_s, s.mean_stall_s, s.mean_step_s)});

  if (s.unaccounted_device > kUnaccountedDevice &&
      static_cast<double>(s.unaccounted_device) >
          kUnaccountedShare * static_cast<double>(s.driver_device_used))
    out.push_back({"unaccounted_device",
                   format_text("%s of device memory are not accounted for (the driver reports "
                               "%s in use, the tracker %s): CUDA context, library workspaces "
                               "or another process; leave that much headroom in the budget",
                               format_bytes(static_cast<size_t>(s.unaccounted_device)).c_str(),
                               format_bytes(s.driver_device_used).c_str(),
                               format_bytes(s.tracked_device).c_str())});
  if (s.unaccounted_process > kUnaccountedHost &&
      static_cast<double>(s.unaccounted_process) >
          kUnaccountedShare * static_cast<double>(s.process_rss))
    out.push_back({"unaccounted_host",
                   format_text("%s of process memory are not accounted for (resident %s, "
                               "tracked %s): memory allocated outside TierZero's allocators",
                               format_bytes(static_cast<size_t>(s.unaccounted_process)).c_str(),
                               format_bytes(s.process_rss).c_str(),
                               format_bytes(s.tracked_process).c_str())});

  if (p.run.device_budget > 0) {
    const size_t peak = s.tier_peak[static_cast<size_t>(Tier::device)].at.bytes;
    const double share = static_cast<double>(peak) / static_cast<double>(p.run.device_budget);
    const bool offloaded = any_row_on(p, &PlacementRow::param_tier, "host") ||
                           any_row_on(p, &PlacementRow::param_tier, "nvme") ||
                           any_row_on(p, &PlacementRow::optimizer_tier, "host") ||
                           any_row_on(p, &PlacementRow::optimizer_tier, "nvme");
    if (share < kDeviceUnderused)
      out.push_back({"device_underused",
                     format_text("device peak is %.0f%% of the budget (%s of %s): a larger "
                                 "micro-batch would fit%s",
                                 100.0 * share, format_bytes(peak).c_str(),
                                 format_bytes(p.run.device_budget).c_str(),
                                 offloaded ? ", or keep more states on the device" : "")});
    else if (share > kDeviceNearBudget)
      out.push_back({"device_near_budget",
                     format_text("device peak is %.0f%% of the budget (%s of %s): little "
                                 "headroom; lower the micro-batch or offload more",
                                 100.0 * share, format_bytes(peak).c_str(),
                                 format_bytes(p.run.device_budget).c_str())});
  }

  if (p.has_predicted) {
    // The worst miss only: one sentence, not a table (the report has the table).
    double worst = 0.0;
    size_t wt = 0, wc = 0;
    for (size_t t = 0; t < kNumTiers; ++t)
      for (size_t c = 0; c < kNumCategories; ++c) {
        const double pred = static_cast<double>(p.predicted[t][c]);
        const double meas = static_cast<double>(s.peak[t][c].at.bytes);
        const double diff = std::fabs(meas - pred);
        if (diff <= static_cast<double>(kPredictionBytes)) continue;
        // The estimator bounds comm and io buffers from above (in-flight reductions, staging,
        // bounce buffers): only a measurement beyond the bound says something is off.
        const bool bound =
            c == static_cast<size_t>(Category::comm) || c == static_cast<size_t>(Category::io);
        if (bound && meas <= pred) continue;
        const double share = diff / std::max(pred, meas);
        if (share > kPredictionShare && share > worst) {
          worst = share;
          wt = t;
          wc = c;
        }
      }
    if (worst > 0.0) {
      const size_t pred = p.predicted[wt][wc], meas = s.peak[wt][wc].at.bytes;
      const char* tier = tier_name(static_cast<Tier>(wt));
      const char* category = category_name(static_cast<Category>(wc));
      const char* advice =
          "check the estimate's inputs (micro-batch, sequence length, checkpointing, placements)";
      if (pred == 0)
        out.push_back(
            {"prediction_off", format_text("measured %s %s peak (%s) was not predicted at all: %s",
                                           tier, category, format_bytes(meas).c_str(), advice)});
      else
        out.push_back(
            {"prediction_off",
             format_text("measured %s %s peak (%s) differs from the prediction (%s) by %s%.0f%%: "
                         "%s",
                         tier, category, format_bytes(meas).c_str(), format_bytes(pred).c_str(),
                         meas >= pred ? "+" : "-",
                         100.0 * std::fabs(static_cast<double>(meas) - static_cast<double>(pred)) /
                             static_cast<double>(pred),
                         advice)});
    }
  }
  return out;
}

}  // namespace tierzero::profile
