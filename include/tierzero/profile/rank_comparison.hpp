// The ranks of one run side by side: each rank's peaks per tier and category and its step times,
// and the imbalance between them (max / mean of each peak and of the step time, and which rank
// is slowest). The report shows it as a table above the slowest rank's own report, and
// `report --ranks-json` writes rank_comparison_json for scripts.
#pragma once

#include <array>
#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tierzero/profile/rank_profiles.hpp"

namespace tierzero::profile {

struct RankFigures {
  int rank = 0;
  std::string source;
  size_t steps = 0;
  double mean_step_s = 0.0;  // over the steady steps (ProfileSummary's)
  double max_step_s = 0.0;   // over all steps
  double mean_stall_s = 0.0;
  std::array<size_t, kNumTiers> tier_peak{};  // highest tier total over all steps
  TierCategoryBytes peak{};                   // highest per (tier, category) over all steps
};

struct RankComparison {
  int ranks = 1;  // the run's world size
  std::vector<int> missing;
  std::vector<RankFigures> figures;  // by ascending rank
  // max over ranks / mean over ranks; 1 when every rank has the same, 0 when all are 0.
  std::array<double, kNumTiers> tier_peak_imbalance{};
  std::array<std::array<double, kNumCategories>, kNumTiers> peak_imbalance{};
  double step_imbalance = 0.0;  // of mean_step_s
  size_t slowest = 0;           // index into figures of the highest mean_step_s
  std::array<size_t, kNumTiers> largest_tier_peak{};  // index into figures, per tier
};

RankComparison compare_ranks(const RankProfiles& rp);
nlohmann::ordered_json rank_comparison_json(const RankComparison& c);

}  // namespace tierzero::profile
