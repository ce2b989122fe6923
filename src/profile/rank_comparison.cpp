// Per-rank figures come from summarize() so they are the numbers each rank's own report shows.
#include "tierzero/profile/rank_comparison.hpp"

#include <algorithm>

#include "tierzero/profile/profile_summary.hpp"

namespace tierzero::profile {

namespace {

double max_over_mean(const std::vector<double>& v) {
  double sum = 0.0, top = 0.0;
  for (double x : v) {
    sum += x;
    top = std::max(top, x);
  }
  return sum > 0.0 ? top / (sum / static_cast<double>(v.size())) : 0.0;
}

}  // namespace

RankComparison compare_ranks(const RankProfiles& rp) {
  RankComparison c;
  c.ranks = rp.ranks;
  c.missing = rp.missing;
  for (size_t i = 0; i < rp.profiles.size(); ++i) {
    const Profile& p = rp.profiles[i];
    const ProfileSummary s = summarize(p);
    RankFigures f;
    f.rank = p.run.rank;
    f.source = rp.sources[i];
    f.steps = p.steps.size();
    f.mean_step_s = s.mean_step_s;
    f.mean_stall_s = s.mean_stall_s;
    for (const StepProfile& st : p.steps) f.max_step_s = std::max(f.max_step_s, st.counters.step_s);
    for (size_t t = 0; t < kNumTiers; ++t) {
      f.tier_peak[t] = s.tier_peak[t].at.bytes;
      for (size_t k = 0; k < kNumCategories; ++k) f.peak[t][k] = s.peak[t][k].at.bytes;
    }
    c.figures.push_back(f);
  }
  const size_t n = c.figures.size();
  std::vector<double> v(n);
  for (size_t t = 0; t < kNumTiers; ++t) {
    for (size_t i = 0; i < n; ++i) v[i] = static_cast<double>(c.figures[i].tier_peak[t]);
    c.tier_peak_imbalance[t] = max_over_mean(v);
    c.largest_tier_peak[t] = static_cast<size_t>(std::max_element(v.begin(), v.end()) - v.begin());
    for (size_t k = 0; k < kNumCategories; ++k) {
      for (size_t i = 0; i < n; ++i) v[i] = static_cast<double>(c.figures[i].peak[t][k]);
      c.peak_imbalance[t][k] = max_over_mean(v);
    }
  }
  for (size_t i = 0; i < n; ++i) v[i] = c.figures[i].mean_step_s;
  c.step_imbalance = max_over_mean(v);
  c.slowest = static_cast<size_t>(std::max_element(v.begin(), v.end()) - v.begin());
  return c;
}

nlohmann::ordered_json rank_comparison_json(const RankComparison& c) {
  using nlohmann::ordered_json;
  ordered_json j;
  j["ranks"] = c.ranks;
  j["missing"] = c.missing;
  ordered_json rows = ordered_json::array();
  for (const RankFigures& f : c.figures) {
    ordered_json r;
    r["rank"] = f.rank;
    r["source"] = f.source;
    r["steps"] = f.steps;
    r["mean_step_s"] = f.mean_step_s;
    r["max_step_s"] = f.max_step_s;
    r["mean_stall_s"] = f.mean_stall_s;
    ordered_json tiers = ordered_json::object();
    for (size_t t = 0; t < kNumTiers; ++t) {
      ordered_json tier;
      tier["peak"] = f.tier_peak[t];
      for (size_t k = 0; k < kNumCategories; ++k)
        tier[category_name(static_cast<Category>(k))] = f.peak[t][k];
      tiers[tier_name(static_cast<Tier>(t))] = tier;
    }
    r["peaks"] = tiers;
    rows.push_back(r);
  }
  j["per_rank"] = rows;
  ordered_json imb;
  imb["step_time"] = c.step_imbalance;
  imb["slowest_rank"] = c.figures.empty() ? -1 : c.figures[c.slowest].rank;
  ordered_json tiers = ordered_json::object();
  for (size_t t = 0; t < kNumTiers; ++t) {
    ordered_json tier;
    tier["peak"] = c.tier_peak_imbalance[t];
    tier["largest_rank"] = c.figures.empty() ? -1 : c.figures[c.largest_tier_peak[t]].rank;
    for (size_t k = 0; k < kNumCategories; ++k)
      tier[category_name(static_cast<Category>(k))] = c.peak_imbalance[t][k];
    tiers[tier_name(static_cast<Tier>(t))] = tier;
  }
  imb["peaks"] = tiers;
  j["imbalance"] = imb;
  return j;
}

}  // namespace tierzero::profile
