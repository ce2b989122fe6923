// `tierzero plan --longest-seq` (plan_longest_seq.hpp). Memory grows with T at every placement
// (activations, attention's T x T), so "fits at T" is monotone and a binary search finds the edge.
#include "plan_longest_seq.hpp"

#include <cstdio>
#include <string>

#include "tierzero/core/memory_tracker.hpp"

namespace tierzero::cli {

size_t longest_seq(profile::PlanRequest& req, size_t& seq, size_t max_seq, size_t quantum,
                   profile::Candidate* chosen) {
  const size_t q = quantum > 0 ? quantum : 1;
  auto fits = [&](size_t steps) {
    seq = steps * q;
    req.seq_len = seq;
    const profile::PlanResult r = profile::plan(req, 0);
    if (r.found && chosen) *chosen = r.best;
    return r.found;
  };
  size_t lo = 0, hi = max_seq / q;  // lo fits (0: none yet), hi + 1 does not
  profile::Candidate best;
  while (lo < hi) {
    const size_t mid = lo + (hi - lo + 1) / 2;
    if (fits(mid)) {
      lo = mid;
      if (chosen) best = *chosen;
    } else {
      hi = mid - 1;
    }
  }
  if (chosen) *chosen = best;
  return lo * q;
}

int print_longest_seq(profile::PlanRequest& req, size_t& seq, size_t max_seq, size_t quantum) {
  std::printf(
      "longest sequence that fits (device %s, host %s, nvme %s; estimator, binary search "
      "over T up to the context %zu):\n",
      format_bytes(req.budget[0]).c_str(), format_bytes(req.budget[1]).c_str(),
      format_bytes(req.budget[2]).c_str(), max_seq);
  // Each row holds the search to one recompute mode (and, for full recompute, one tier for the
  // checkpoints); the first searches every mode and tier.
  using profile::RecomputeMode;
  struct Row {
    const char* name;
    size_t only_recompute;
    size_t only_tier;
  };
  constexpr size_t any_mode = profile::kNumRecomputeModes;
  constexpr auto full = static_cast<size_t>(RecomputeMode::full);
  size_t overall = 0;
  for (const Row& row :
       {Row{"any placement", any_mode, kNumTiers},
        Row{"no recompute", static_cast<size_t>(RecomputeMode::none), kNumTiers},
        Row{"selective recompute", static_cast<size_t>(RecomputeMode::selective), kNumTiers},
        Row{"checkpoints on device", full, 0}, Row{"checkpoints on host", full, 1},
        Row{"checkpoints on nvme", full, 2}}) {
    if (row.only_tier < kNumTiers && row.only_tier > 0 && req.budget[row.only_tier] == 0) {
      std::printf("  %-22s n/a (no %s budget)\n", row.name, row.only_tier == 1 ? "host" : "--nvme");
      continue;
    }
    req.only_recompute = row.only_recompute;
    req.only_checkpoint_tier = row.only_tier;
    profile::Candidate c;
    const size_t T = longest_seq(req, seq, max_seq, quantum, &c);
    if (row.only_recompute == any_mode) overall = T;
    if (T == 0) {
      std::printf("  %-22s none fits\n", row.name);
      continue;
    }
    std::printf("  %-22s T = %zu: %s; device %s, host %s, nvme %s\n", row.name, T,
                c.describe().c_str(), format_bytes(c.estimate.tier_total(Tier::device)).c_str(),
                format_bytes(c.estimate.tier_total(Tier::host)).c_str(),
                format_bytes(c.estimate.tier_total(Tier::nvme)).c_str());
    std::printf(
        "{\"longest_seq\": %zu, \"search\": \"%s\", \"recompute\": \"%s\", \"checkpoints\": "
        "\"%s\", \"device_bytes\": %zu}\n",
        T, row.only_recompute == any_mode ? "any" : profile::recompute_mode_name(c.recompute),
        profile::recompute_mode_name(c.recompute),
        c.checkpointing() ? tier_name(c.checkpoint_tier) : "none",
        c.estimate.tier_total(Tier::device));
  }
  req.only_recompute = any_mode;
  req.only_checkpoint_tier = kNumTiers;
  return overall > 0 ? 0 : 1;
}

}  // namespace tierzero::cli
