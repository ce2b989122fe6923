// The synthetic profile: a replay-free construction of what ProfileRecorder would produce.
#include "synthetic_profile.hpp"

#include <algorithm>

namespace tierzero::profile::synthetic {

namespace {

constexpr size_t MiB = size_t{1} << 20;
size_t idx(Tier t) {
  return static_cast<size_t>(t);
}
size_t idx(Category c) {
  return static_cast<size_t>(c);
}

}  // namespace

Profile synthetic_profile(size_t steps, size_t units, bool timeline) {
  Profile p;
  p.run.model = "synthetic <gpt2-ish>";
  p.run.parameters = static_cast<int64_t>(units) * 7000000;
  p.run.ranks = 2;
  p.run.rank = 1;
  p.run.stage = 3;
  p.run.device = "cuda:0";
  p.run.device_budget = 4096 * MiB;
  p.run.host_total = 64 * 1024 * MiB;
  p.run.host_available = 48 * 1024 * MiB;
  p.run.extra["micro_batch"] = "8";
  for (size_t u = 0; u < units; ++u)
    p.placements.push_back({"block " + std::to_string(u), 7000000, u % 2 ? "host" : "device",
                            "host", u % 3 ? "nvme" : "host"});
  p.has_predicted = true;
  p.predicted[idx(Tier::device)][idx(Category::param)] = 700 * MiB;
  p.predicted[idx(Tier::device)][idx(Category::activation)] = 900 * MiB;
  p.predicted[idx(Tier::host)][idx(Category::optimizer)] = 2000 * MiB;
  p.has_timeline = timeline;

  TierCategoryBytes state{};
  state[idx(Tier::device)][idx(Category::param)] = 700 * MiB;
  state[idx(Tier::device)][idx(Category::comm)] = 64 * MiB;
  state[idx(Tier::host)][idx(Category::optimizer)] = 2000 * MiB;
  state[idx(Tier::host)][idx(Category::io)] = 128 * MiB;
  state[idx(Tier::nvme)][idx(Category::optimizer)] = 3000 * MiB;
  p.timeline.initial = state;

  double now = 10.0;
  const double unit_s = 0.004;
  for (size_t s = 0; s < steps; ++s) {
    StepProfile st;
    st.step = static_cast<int64_t>(s);
    st.start_s = now;
    st.at_start = state;
    for (size_t t = 0; t < kNumTiers; ++t) {
      for (size_t c = 0; c < kNumCategories; ++c)
        st.peak[t][c] = {state[t][c], 0.0, Phase::other, -1};
      st.tier_peak[t] = {tier_total(state, static_cast<Tier>(t)), 0.0, Phase::other, -1};
    }
    double t = now;
    auto change = [&](Tier tier, Category cat, int64_t delta, Phase ph, int64_t unit) {
      size_t& cur = state[idx(tier)][idx(cat)];
      cur = static_cast<size_t>(static_cast<int64_t>(cur) + delta);
      const double rel = t - st.start_s;
      PeakAt& pk = st.peak[idx(tier)][idx(cat)];
      if (cur > pk.bytes) pk = {cur, rel, ph, unit};
      const size_t sum = tier_total(state, tier);
      if (sum > st.tier_peak[idx(tier)].bytes) st.tier_peak[idx(tier)] = {sum, rel, ph, unit};
      PhaseSegment& seg = st.phases.back();
      seg.peak[idx(tier)][idx(cat)] = std::max(seg.peak[idx(tier)][idx(cat)], cur);
      if (timeline) p.timeline.events.push_back({t, tier, cat, delta, cur, "synthetic"});
    };
    auto begin_phase = [&](Phase ph) {
      if (!st.phases.empty()) {
        st.phases.back().end_s = t - st.start_s;
        st.phases.back().at_end = state;
      }
      st.phases.push_back({ph, t - st.start_s, t - st.start_s, state, state});
    };
    auto activity = [&](Track track, const char* name, double dur, size_t bytes, int64_t unit) {
      TrackStep& ts = st.tracks[static_cast<size_t>(track)];
      ts.seconds += dur;
      ts.busy_s += dur;  // one activity of a kind at a time here
      ts.bytes += bytes;
      ++ts.count;
      if (timeline) p.timeline.activities.push_back({t, t + dur, track, name, unit, bytes});
    };
    begin_phase(Phase::forward);
    for (size_t u = 0; u < units; ++u) {
      const auto unit = static_cast<int64_t>(u);
      if (timeline) p.timeline.positions.push_back({t, Phase::forward, unit});
      activity(Track::nvme_read, "read params", unit_s * 0.5, 14 * MiB, unit);
      activity(Track::host_to_device, "h2d params", unit_s * 0.3, 14 * MiB, unit);
      activity(Track::collective, "all_gather", unit_s * 0.4, 28 * MiB, unit);
      change(Tier::device, Category::param, 28 * MiB, Phase::forward, unit);
      activity(Track::compute, "forward", unit_s, 0, unit);
      change(Tier::device, Category::activation, 60 * MiB, Phase::forward, unit);
      t += unit_s;
      change(Tier::device, Category::param, -28 * static_cast<int64_t>(MiB), Phase::forward, unit);
      st.units.push_back({unit, unit_s, {tier_total(state, Tier::device) + 28 * MiB, 0, 0}});
    }
    begin_phase(Phase::backward);
    for (size_t k = units; k-- > 0;) {
      const auto unit = static_cast<int64_t>(k);
      if (timeline) p.timeline.positions.push_back({t, Phase::backward, unit});
      activity(Track::stall, "wait for params", unit_s * 0.2, 0, unit);
      change(Tier::device, Category::grad, 28 * MiB, Phase::backward, unit);
      activity(Track::compute, "backward", 2 * unit_s, 0, unit);
      t += 2 * unit_s;
      change(Tier::device, Category::activation, -60 * static_cast<int64_t>(MiB), Phase::backward,
             unit);
      activity(Track::collective, "reduce_scatter", unit_s * 0.4, 28 * MiB, unit);
      activity(Track::device_to_host, "d2h grads", unit_s * 0.3, 14 * MiB, unit);
      change(Tier::device, Category::grad, -28 * static_cast<int64_t>(MiB), Phase::backward, unit);
      st.units[k].seconds += 2 * unit_s;
    }
    begin_phase(Phase::optimizer);
    if (timeline) p.timeline.positions.push_back({t, Phase::optimizer, -1});
    change(Tier::host, Category::workspace, 256 * MiB, Phase::optimizer, -1);
    activity(Track::nvme_read, "read m, v", 0.02, 500 * MiB, -1);
    activity(Track::optimizer, "adam", 0.03, 0, -1);
    activity(Track::nvme_write, "write m, v", 0.02, 500 * MiB, -1);
    t += 0.05;
    change(Tier::host, Category::workspace, -256 * static_cast<int64_t>(MiB), Phase::optimizer, -1);
    st.phases.back().end_s = t - st.start_s;
    st.phases.back().at_end = state;
    st.end_s = t;
    st.at_end = state;
    st.counters.prefetch_hits = s == 0 ? 0 : units - 1;
    st.counters.on_demand_fetches = s == 0 ? units : 1;
    st.counters.stall_s = st.tracks[static_cast<size_t>(Track::stall)].seconds;
    st.counters.step_s = t - st.start_s;
    st.counters.loss = 4.0 - 0.001 * static_cast<double>(s);
    st.counters.tokens = 8192;
    st.process_rss = 3000 * MiB;
    st.host_available = 40 * 1024 * MiB;
    st.driver_device_used = static_cast<int64_t>(tier_total(state, Tier::device) + 300 * MiB);
    p.steps.push_back(std::move(st));
    now = t + 0.001;
  }
  return p;
}

}  // namespace tierzero::profile::synthetic
