// Builds the report page: tables as HTML written here (so they show even without script), the
// charts' data as JSON for the inline script. The page's size is bounded whatever the profile:
// at most kChartSteps steps carry chart curves, each of at most kChartPoints points.
#include "tierzero/profile/html_report.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "format_text.hpp"
#include "report_script.hpp"
#include "tierzero/core/error.hpp"
#include "tierzero/core/output_files.hpp"
#include "tierzero/profile/profile_summary.hpp"
#include "tierzero/profile/rank_comparison.hpp"
#include "tierzero/profile/recommendations.hpp"

namespace tierzero::profile {

namespace {

using nlohmann::json;

constexpr size_t kChartStepsAggregated = 24;  // steps a reader can pick in the chart
constexpr size_t kChartStepsExact = 8;        // fewer when each carries every event
constexpr size_t kChartPoints = 1000;         // per step, after thinning the fine timeline

std::string escape(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (char ch : s) {
    switch (ch) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += ch;
    }
  }
  return out;
}

std::string unit_label(const Profile& p, int64_t unit) {
  if (unit < 0) return "&mdash;";
  std::string s = std::to_string(unit);
  if (static_cast<size_t>(unit) < p.placements.size())
    s += " (" + escape(p.placements[static_cast<size_t>(unit)].unit) + ")";
  return s;
}

std::string signed_bytes(int64_t v) {
  return (v < 0 ? "&minus;" : "+") + format_bytes(static_cast<size_t>(v < 0 ? -v : v));
}

json flat(const TierCategoryBytes& b) {
  json a = json::array();
  for (const auto& row : b)
    for (size_t v : row) a.push_back(v);
  return a;
}

// The steps the chart offers: the one with the highest device peak, the first, the last, and
// evenly spaced ones between.
std::vector<size_t> chart_step_indices(const Profile& p, size_t limit, size_t& default_index) {
  std::vector<size_t> idx;
  const size_t n = p.steps.size();
  size_t peak_step = 0;
  for (size_t i = 0; i < n; ++i)
    if (p.steps[i].tier_peak[0].bytes > p.steps[peak_step].tier_peak[0].bytes) peak_step = i;
  if (n == 0) return idx;
  idx.push_back(peak_step);
  const size_t m = std::min(n, limit - 1);  // evenly spaced, the first and the last included
  for (size_t k = 0; k < m; ++k) idx.push_back(m == 1 ? 0 : k * (n - 1) / (m - 1));
  std::sort(idx.begin(), idx.end());
  idx.erase(std::unique(idx.begin(), idx.end()), idx.end());
  default_index = static_cast<size_t>(std::find(idx.begin(), idx.end(), peak_step) - idx.begin());
  return idx;
}

json chart_step(const Profile& p, const StepProfile& s) {
  json cs;
  cs["step"] = s.step;
  cs["dur"] = s.end_s - s.start_s;
  json phases = json::array();
  for (const auto& ph : s.phases) phases.push_back({phase_name(ph.phase), ph.start_s, ph.end_s});
  cs["phases"] = phases;
  json t = json::array(), v = json::array();
  if (p.has_timeline) {
    const auto& ev = p.timeline.events;
    auto lo = std::lower_bound(ev.begin(), ev.end(), s.start_s,
                               [](const TimelineEvent& e, double x) { return e.time_s < x; });
    auto hi = std::upper_bound(lo, ev.end(), s.end_s,
                               [](double x, const TimelineEvent& e) { return x < e.time_s; });
    const auto count = static_cast<size_t>(hi - lo);
    // Thinning keeps, per bucket of events, the point with the most bytes and the bucket's last
    // point, so peaks survive and levels stay right.
    const size_t bucket = std::max<size_t>(1, (count + kChartPoints / 2 - 1) / (kChartPoints / 2));
    TierCategoryBytes state = s.at_start;
    t.push_back(0.0);
    v.push_back(flat(state));
    size_t in_bucket = 0, best_total = 0;
    TierCategoryBytes best{};
    double best_t = 0.0;
    for (auto it = lo; it != hi; ++it) {
      state[static_cast<size_t>(it->tier)][static_cast<size_t>(it->category)] = it->current;
      if (bucket == 1) {
        t.push_back(it->time_s - s.start_s);
        v.push_back(flat(state));
        continue;
      }
      size_t total = 0;
      for (const auto& row : state)
        for (size_t b : row) total += b;
      if (in_bucket == 0 || total > best_total) {
        best_total = total;
        best = state;
        best_t = it->time_s - s.start_s;
      }
      if (++in_bucket == bucket || it + 1 == hi) {
        t.push_back(best_t);
        v.push_back(flat(best));
        t.push_back(it->time_s - s.start_s);
        v.push_back(flat(state));
        in_bucket = 0;
      }
    }
    cs["exact"] = true;
  } else {
    TierCategoryBytes before = s.at_start;
    for (const auto& ph : s.phases) {
      t.push_back(ph.start_s);
      v.push_back(flat(before));
      t.push_back(0.5 * (ph.start_s + ph.end_s));
      v.push_back(flat(ph.peak));
      before = ph.at_end;
    }
    t.push_back(s.end_s - s.start_s);
    v.push_back(flat(s.at_end));
    cs["exact"] = false;
  }
  cs["t"] = std::move(t);
  cs["v"] = std::move(v);
  return cs;
}

json chart_data(const Profile& p) {
  json d;
  json tiers = json::array(), cats = json::array();
  for (size_t t = 0; t < kNumTiers; ++t) tiers.push_back(tier_name(static_cast<Tier>(t)));
  for (size_t c = 0; c < kNumCategories; ++c)
    cats.push_back(category_name(static_cast<Category>(c)));
  d["tiers"] = tiers;
  d["categories"] = cats;
  size_t default_index = 0;
  const auto idx = chart_step_indices(p, p.has_timeline ? kChartStepsExact : kChartStepsAggregated,
                                      default_index);
  json steps = json::array();
  for (size_t i : idx) steps.push_back(chart_step(p, p.steps[i]));
  d["chart_steps"] = std::move(steps);
  d["default_step"] = default_index;
  json step = json::array(), step_s = json::array(), stall = json::array();
  json dev = json::array(), host = json::array(), nvme = json::array();
  for (const auto& s : p.steps) {
    step.push_back(s.step);
    step_s.push_back(s.counters.step_s);
    stall.push_back(s.counters.stall_s);
    dev.push_back(s.tier_peak[0].bytes);
    host.push_back(s.tier_peak[1].bytes);
    nvme.push_back(s.tier_peak[2].bytes);
  }
  d["per_step"] = {{"step", step},       {"step_s", step_s},  {"stall_s", stall},
                   {"device_peak", dev}, {"host_peak", host}, {"nvme_peak", nvme}};
  return d;
}

void run_section(std::string& h, const Profile& p) {
  const RunInfo& r = p.run;
  h += "<table><tbody>";
  auto row = [&](const std::string& k, const std::string& v) {
    h += "<tr><th class=l>" + k + "</th><td class=l>" + v + "</td></tr>";
  };
  row("model", escape(r.model));
  row("parameters", std::to_string(r.parameters));
  row("ranks", std::to_string(r.ranks) + " (this is rank " + std::to_string(r.rank) + ")");
  row("ZeRO stage", std::to_string(r.stage));
  row("device", escape(r.device));
  row("device budget", r.device_budget ? format_bytes(r.device_budget) : "unlimited");
  row("host memory", format_bytes(r.host_available) + " available of " +
                         format_bytes(r.host_total) + " when the run began");
  for (const auto& [k, v] : r.extra) row(escape(k), escape(v));
  h += "</tbody></table>";
}

void peak_section(std::string& h, const Profile& p, const ProfileSummary& s) {
  h += "<table><thead><tr><th class=l>tier</th><th class=l>category</th><th>peak</th>"
       "<th>step</th><th class=l>phase</th><th class=l>unit</th><th>at (s into step)</th>"
       "</tr></thead><tbody>";
  for (size_t t = 0; t < kNumTiers; ++t) {
    const PeakInStep& tp = s.tier_peak[t];
    if (tp.at.bytes == 0) continue;
    auto row = [&](const char* cat, const PeakInStep& pk, bool bold) {
      const char* b0 = bold ? "<b>" : "";
      const char* b1 = bold ? "</b>" : "";
      h += std::string("<tr><td class=l>") + b0 + tier_name(static_cast<Tier>(t)) + b1 +
           "</td><td class=l>" + b0 + cat + b1 + "</td><td>" + b0 + format_bytes(pk.at.bytes) + b1 +
           "</td><td>" + std::to_string(pk.step) + "</td><td class=l>" + phase_name(pk.at.phase) +
           "</td><td class=l>" + unit_label(p, pk.at.unit) + "</td><td>" +
           format_text("%.4f", pk.at.time_s) + "</td></tr>";
    };
    row("all (tier peak)", tp, true);
    for (size_t c = 0; c < kNumCategories; ++c)
      if (s.peak[t][c].at.bytes > 0)
        row(category_name(static_cast<Category>(c)), s.peak[t][c], false);
  }
  h += "</tbody></table>";
}

void placement_section(std::string& h, const Profile& p) {
  if (p.placements.empty()) {
    h += "<p class=note>the run gave no placement table</p>";
    return;
  }
  // Per-unit figures from the steps: the highest device bytes while the unit was current and
  // its mean time current per step.
  std::vector<size_t> unit_peak(p.placements.size(), 0);
  std::vector<double> unit_seconds(p.placements.size(), 0.0);
  for (const auto& st : p.steps)
    for (const auto& u : st.units)
      if (u.unit >= 0 && static_cast<size_t>(u.unit) < p.placements.size()) {
        const auto i = static_cast<size_t>(u.unit);
        unit_peak[i] = std::max(unit_peak[i], u.peak[0]);
        unit_seconds[i] += u.seconds;
      }
  const double n = p.steps.empty() ? 1.0 : static_cast<double>(p.steps.size());
  h += "<div class=scroll><table><thead><tr><th>unit</th><th class=l>name</th><th>parameters</th>"
       "<th class=l>params</th><th class=l>grads</th><th class=l>optimizer</th>"
       "<th>device peak while current</th><th>s current per step</th></tr></thead><tbody>";
  for (size_t i = 0; i < p.placements.size(); ++i) {
    const PlacementRow& r = p.placements[i];
    h += "<tr><td>" + std::to_string(i) + "</td><td class=l>" + escape(r.unit) + "</td><td>" +
         std::to_string(r.numel) + "</td><td class=l>" + escape(r.param_tier) +
         "</td><td class=l>" + escape(r.grad_tier) + "</td><td class=l>" +
         escape(r.optimizer_tier) + "</td><td>" +
         (unit_peak[i] ? format_bytes(unit_peak[i]) : "&mdash;") + "</td><td>" +
         format_text("%.4f", unit_seconds[i] / n) + "</td></tr>";
  }
  h += "</tbody></table></div>";
}

void counters_section(std::string& h, const Profile& p, const ProfileSummary& s) {
  const size_t fetches = s.prefetch_hits + s.on_demand_fetches;
  h += "<p>over the " + std::to_string(s.steady_steps) + " steady steps: prefetch hits " +
       std::to_string(s.prefetch_hits) + ", on-demand fetches " +
       std::to_string(s.on_demand_fetches) +
       (fetches ? " (hit rate " +
                      format_text("%.0f%%", 100.0 * static_cast<double>(s.prefetch_hits) /
                                                static_cast<double>(fetches)) +
                      ")"
                : std::string()) +
       ", stall " + format_text("%.3f s", s.mean_stall_s) + " per step of " +
       format_text("%.3f s", s.mean_step_s) + "</p>";
  if (s.reductions > 0.0)
    h += "<p>gradient reductions per step: " + format_text("%.1f", s.reductions) +
         " buckets, in flight " + format_text("%.4f s", s.reduction_s) + ", hidden under the " +
         "backward " + format_text("%.4f s", s.reduction_s - s.reduction_exposed_s) +
         ", exposed (waited for) " + format_text("%.4f s", s.reduction_exposed_s) +
         (s.reduction_s > 0.0 ? format_text(" (%.0f%% hidden)",
                                            100.0 * (1.0 - s.reduction_exposed_s / s.reduction_s))
                              : std::string()) +
         "</p>";
  h += "<div class=scroll><table><thead><tr><th>step</th><th>time (s)</th><th>stall (s)</th>"
       "<th>prefetch hits</th><th>on-demand</th><th>loss</th><th>device peak</th>"
       "<th>host peak</th><th>nvme peak</th><th>process RSS</th><th>driver device use</th>"
       "</tr></thead><tbody>";
  for (const auto& st : p.steps) {
    const auto& c = st.counters;
    h += "<tr><td>" + std::to_string(st.step) + "</td><td>" + format_text("%.4f", c.step_s) +
         "</td><td>" + format_text("%.4f", c.stall_s) + "</td><td>" +
         std::to_string(c.prefetch_hits) + "</td><td>" + std::to_string(c.on_demand_fetches) +
         "</td><td>" +
         (std::isfinite(c.loss) ? format_text("%.4f", c.loss) : std::string("&mdash;")) +
         "</td><td>" + format_bytes(st.tier_peak[0].bytes) + "</td><td>" +
         format_bytes(st.tier_peak[1].bytes) + "</td><td>" + format_bytes(st.tier_peak[2].bytes) +
         "</td><td>" + (st.process_rss ? format_bytes(st.process_rss) : "&mdash;") + "</td><td>" +
         (st.driver_device_used >= 0 ? format_bytes(static_cast<size_t>(st.driver_device_used))
                                     : "&mdash;") +
         "</td></tr>";
  }
  h += "</tbody></table></div>";
}

void predicted_section(std::string& h, const Profile& p, const ProfileSummary& s) {
  if (!p.has_predicted) {
    h += "<p class=note>the run gave no prediction (the estimator's figures are shown here when "
         "the trainer passes them)</p>";
    return;
  }
  h += "<table><thead><tr><th class=l>tier</th><th class=l>category</th><th>predicted</th>"
       "<th>measured peak</th><th>difference</th><th>%</th></tr></thead><tbody>";
  for (size_t t = 0; t < kNumTiers; ++t)
    for (size_t c = 0; c < kNumCategories; ++c) {
      const size_t pred = p.predicted[t][c], meas = s.peak[t][c].at.bytes;
      if (pred == 0 && meas == 0) continue;
      const int64_t diff = static_cast<int64_t>(meas) - static_cast<int64_t>(pred);
      const std::string pct = pred ? format_text("%+.1f%%", 100.0 * static_cast<double>(diff) /
                                                                static_cast<double>(pred))
                                   : (meas ? "new" : "");
      h += std::string("<tr><td class=l>") + tier_name(static_cast<Tier>(t)) + "</td><td class=l>" +
           category_name(static_cast<Category>(c)) + "</td><td>" + format_bytes(pred) +
           "</td><td>" + format_bytes(meas) + "</td><td class=" + (diff > 0 ? "pos" : "neg") + ">" +
           (diff ? signed_bytes(diff) : "0") + "</td><td>" + pct + "</td></tr>";
    }
  h += "</tbody></table><p class=note>measured: the highest peak over all steps; tiers and "
       "categories where both are 0 are left out</p>";
}

// The engines of the step by busy time, the busiest named as the bottleneck when it was busy for
// most of the step; otherwise the step is bound by the waits between engines.
void engines_table(std::string& h, const Profile& p, const ProfileSummary& s) {
  const std::vector<EngineBusy> engines = engine_busy(p, s);
  if (engines.empty() || !(s.mean_step_s > 0.0)) return;
  h += "<h3 style='font-size:14px'>engines</h3><table><thead><tr><th class=l>engine</th>"
       "<th>busy s per step</th><th>share of step</th></tr></thead><tbody>";
  for (const EngineBusy& e : engines)
    h += "<tr><td class=l>" + e.name + "</td><td>" + format_text("%.4f", e.busy_s) + "</td><td>" +
         format_text("%.1f%%", 100.0 * std::min(e.busy_s, s.mean_step_s) / s.mean_step_s) +
         "</td></tr>";
  const double share = engines[0].busy_s / s.mean_step_s;
  h += "</tbody></table><p class=note>";
  if (share >= 0.8)
    h += "bottleneck: <b>" + engines[0].name + "</b>, busy " + format_text("%.0f%%", 100 * share) +
         " of the step; the others wait on it";
  else
    h += "no engine was busy for most of the step (the busiest, " + engines[0].name + ", " +
         format_text("%.0f%%", 100 * share) +
         "): the step is bound by the waits between them, not by one engine";
  h += "</p>";
}

// Each activity's busy time (the union of its intervals: transfers on several threads or streams
// at once count once) as a share of the step, so no share exceeds 100%; the summed time of all
// its activities beside it. On one rank the collectives are local copies: no network traffic.
void activity_section(std::string& h, const Profile& p, const ProfileSummary& s) {
  const bool one_rank = p.run.ranks <= 1;
  const auto share = [&](double busy) {
    return s.mean_step_s > 0
               ? format_text("%.1f%%", 100.0 * std::min(busy, s.mean_step_s) / s.mean_step_s)
               : std::string();
  };
  h += "<table><thead><tr><th class=l>activity</th><th>busy s per step</th><th>share of step</th>"
       "<th>summed s per step</th><th>count per step</th><th>bytes per step</th><th>rate while "
       "busy</th></tr></thead><tbody>";
  for (size_t t = 0; t < kNumTracks; ++t) {
    const auto track = static_cast<Track>(t);
    const TrackStep& ts = s.track_per_step[t];
    const bool derived = track == Track::compute && s.compute_from_phases;
    const double busy = track == Track::compute ? s.compute_s : ts.busy_s;
    const std::string rate =
        ts.bytes && busy > 0.0
            ? format_text("%.2f GB/s", static_cast<double>(ts.bytes) / busy / 1e9)
            : std::string("&mdash;");
    std::string name = track_name(track);
    if (derived) name += " (forward + backward less waits)";
    if (track == Track::collective && one_rank) name += " (one rank: local copies)";
    h += "<tr><td class=l>" + name + "</td><td>" + format_text("%.4f", busy) + "</td><td>" +
         share(busy) + "</td><td>" + (derived ? "&mdash;" : format_text("%.4f", ts.seconds)) +
         "</td><td>" + std::to_string(ts.count) + "</td><td>" +
         (ts.bytes ? format_bytes(ts.bytes) : "&mdash;") + "</td><td>" + rate + "</td></tr>";
  }
  h += "</tbody></table><p class=note>busy: the time at least one activity of the kind was under "
       "way (overlapping ones count once), as a share of the mean steady step; summed: their "
       "durations added up (several threads or streams at once exceed the step)";
  if (s.compute_from_phases)
    h += "; no compute activities were recorded, so compute is the forward and backward phases' "
         "time less the training thread's waits";
  h += "</p>";
  struct Link {
    const char* name;
    Track track;
  };
  const Link links[] = {{"host &rarr; device", Track::host_to_device},
                        {"device &rarr; host", Track::device_to_host},
                        {"nvme &rarr; host", Track::nvme_read},
                        {"host &rarr; nvme", Track::nvme_write},
                        {"network (collectives)", Track::collective}};
  h += "<h3 style='font-size:14px'>bytes per link</h3><table><thead><tr><th class=l>link</th>"
       "<th>bytes per step</th><th>busy s per step</th><th>rate while busy</th></tr></thead>"
       "<tbody>";
  for (const Link& l : links) {
    const TrackStep& ts = s.track_per_step[static_cast<size_t>(l.track)];
    if (l.track == Track::collective && one_rank) {
      h += std::string("<tr><td class=l>") + l.name +
           "</td><td colspan=3 class=l>none: one rank (its collectives copy within the process)"
           "</td></tr>";
      continue;
    }
    h +=
        std::string("<tr><td class=l>") + l.name + "</td><td>" + format_bytes(ts.bytes) +
        "</td><td>" + format_text("%.4f", ts.busy_s) + "</td><td>" +
        (ts.busy_s > 0.0 ? format_text("%.2f GB/s", static_cast<double>(ts.bytes) / ts.busy_s / 1e9)
                         : std::string("&mdash;")) +
        "</td></tr>";
  }
  h += "</tbody></table>";
  engines_table(h, p, s);
}

void unaccounted_section(std::string& h, const Profile& p, const ProfileSummary& s) {
  h += "<table><tbody>";
  if (s.unaccounted_device >= 0 || s.driver_device_used > 0)
    h += "<tr><th class=l>device: driver reports in use</th><td>" +
         format_bytes(s.driver_device_used) + "</td></tr><tr><th class=l>device: tracked</th><td>" +
         format_bytes(s.tracked_device) +
         "</td></tr><tr><th class=l>device: not accounted for"
         "</th><td>" +
         signed_bytes(s.unaccounted_device) + "</td></tr>";
  else
    h += "<tr><th class=l>device</th><td class=l>the driver's usage was not reported</td></tr>";
  if (s.process_rss > 0)
    h += "<tr><th class=l>process resident (RSS)</th><td>" + format_bytes(s.process_rss) +
         "</td></tr><tr><th class=l>tracked host" +
         std::string(device_is_host_memory(p.run) ? " + device (CPU backend)" : "") + "</th><td>" +
         format_bytes(s.tracked_process) +
         "</td></tr><tr><th class=l>process: not accounted for</th><td>" +
         signed_bytes(s.unaccounted_process) + "</td></tr>";
  h += "</tbody></table><p class=note>at the step end with the largest gap; RSS also holds code, "
       "libraries and allocator slack, and pinned host memory not yet touched is not resident"
       "</p>";
}

// "</" inside JSON would end the script element early.
std::string script_safe(const std::string& data) {
  std::string safe;
  safe.reserve(data.size());
  for (size_t i = 0; i < data.size(); ++i) {
    if (data[i] == '<' && i + 1 < data.size() && data[i + 1] == '/') {
      safe += "<\\/";
      ++i;
    } else {
      safe += data[i];
    }
  }
  return safe;
}

std::string ratio_cell(double r) {
  return r > 0.0 ? format_text("%.3f", r) : std::string("&mdash;");
}

// The ranks side by side: step times and tier peaks per rank with the imbalance row, then the
// peaks of every (tier, category) some rank used.
void ranks_section(std::string& h, const RankComparison& c) {
  const RankFigures& slow = c.figures[c.slowest];
  h += "<p>" + std::to_string(c.figures.size()) + " of " + std::to_string(c.ranks) +
       " ranks; slowest: <b>rank " + std::to_string(slow.rank) + "</b> (" +
       format_text("%.4f s", slow.mean_step_s) + " per steady step, " +
       format_text("%.3f", c.step_imbalance) + " &times; the mean); the sections below are rank " +
       std::to_string(slow.rank) + "'s</p>";
  if (!c.missing.empty()) {
    std::string list;
    for (int r : c.missing) list += (list.empty() ? "" : ", ") + std::to_string(r);
    h += "<p class=note id=tz-missing-ranks>no profile for rank(s) " + list +
         ": the figures here leave them out</p>";
  }
  h += "<div class=scroll><table id=tz-ranks-table><thead><tr><th>rank</th><th>steps</th>"
       "<th>s per step (steady mean)</th><th>slowest step (s)</th><th>stall s per step</th>";
  for (size_t t = 0; t < kNumTiers; ++t)
    h += std::string("<th>") + tier_name(static_cast<Tier>(t)) + " peak</th>";
  h += "<th class=l>profile</th></tr></thead><tbody>";
  for (size_t i = 0; i < c.figures.size(); ++i) {
    const RankFigures& f = c.figures[i];
    const bool slowest = i == c.slowest;
    h += std::string("<tr") + (slowest ? " class=slowest" : "") + "><td>" + (slowest ? "<b>" : "") +
         std::to_string(f.rank) + (slowest ? "</b>" : "") + "</td><td>" + std::to_string(f.steps) +
         "</td><td>" + format_text("%.4f", f.mean_step_s) + "</td><td>" +
         format_text("%.4f", f.max_step_s) + "</td><td>" + format_text("%.4f", f.mean_stall_s) +
         "</td>";
    for (size_t t = 0; t < kNumTiers; ++t) h += "<td>" + format_bytes(f.tier_peak[t]) + "</td>";
    h += "<td class=l>" + escape(f.source) + "</td></tr>";
  }
  h += "<tr><th class=l>max / mean</th><td></td><td>" + ratio_cell(c.step_imbalance) +
       "</td><td></td><td></td>";
  for (size_t t = 0; t < kNumTiers; ++t)
    h += "<td>" + ratio_cell(c.tier_peak_imbalance[t]) + "</td>";
  h += "<td></td></tr></tbody></table></div>";

  h += "<h3 style='font-size:14px'>peaks per tier and category</h3><div class=scroll><table>"
       "<thead><tr><th class=l>tier</th><th class=l>category</th>";
  for (const RankFigures& f : c.figures) h += "<th>rank " + std::to_string(f.rank) + "</th>";
  h += "<th>max / mean</th></tr></thead><tbody>";
  for (size_t t = 0; t < kNumTiers; ++t)
    for (size_t k = 0; k < kNumCategories; ++k) {
      bool used = false;
      for (const RankFigures& f : c.figures) used = used || f.peak[t][k] > 0;
      if (!used) continue;
      h += std::string("<tr><td class=l>") + tier_name(static_cast<Tier>(t)) + "</td><td class=l>" +
           category_name(static_cast<Category>(k)) + "</td>";
      for (const RankFigures& f : c.figures) h += "<td>" + format_bytes(f.peak[t][k]) + "</td>";
      h += "<td>" + ratio_cell(c.peak_imbalance[t][k]) + "</td></tr>";
    }
  h += "</tbody></table></div><p class=note>peaks: the highest over all steps; max / mean: the "
       "largest rank's figure over the ranks' mean (1 is balanced)</p>";
}

// The page for `p`; with `ranks`, the run's ranks side by side first (p is then the slowest).
std::string render(const Profile& p, const std::string& source_name, const RankComparison* ranks) {
  const ProfileSummary s = summarize(p);
  std::string h;
  h.reserve(size_t{256} << 10);
  h += "<!DOCTYPE html>\n<html lang=en><head><meta charset=utf-8>"
       "<meta name=viewport content='width=device-width'><title>TierZero report";
  if (!p.run.model.empty()) h += " &mdash; " + escape(p.run.model);
  h += "</title><style>";
  h += kReportStyle;
  h += "</style><script>";
  h += kReportErrorHook;
  h += "</script></head><body>\n<h1>TierZero memory report</h1><div class=sub>";
  h += escape(p.run.model) + " &middot; stage " + std::to_string(p.run.stage) + " &middot; " +
       std::to_string(p.run.ranks) + " rank(s) &middot; " + std::to_string(p.steps.size()) +
       " steps" + (source_name.empty() ? "" : " &middot; " + escape(source_name)) + "</div>";
  h += "<div id=tz-error></div>\n";
  if (ranks) {
    h += "<h2>Ranks</h2>";
    ranks_section(h, *ranks);
  }

  h += "<h2>Recommendations</h2>";
  const auto recs = recommend(p);
  if (recs.empty()) {
    h += "<p class=note>nothing stands out in these numbers</p>";
  } else {
    h += "<ul class=rec>";
    for (const auto& r : recs)
      h += "<li data-id=\"" + escape(r.id) + "\">" + escape(r.text) + "</li>";
    h += "</ul>";
  }

  h += "<h2>Memory over a step</h2><label>step <select id=tz-step></select></label> "
       "<span class=note id=tz-chart-note></span><div id=tz-chart></div>\n";
  h += "<h2>Peaks</h2>";
  peak_section(h, p, s);
  h += "<h2>Predicted vs measured</h2>";
  predicted_section(h, p, s);
  h += "<h2>Where each unit's states live</h2>";
  placement_section(h, p);
  h += "<h2>Steps: prefetch, stalls, peaks</h2><div id=tz-steps-chart></div>";
  counters_section(h, p, s);
  h += "<h2>Time per activity</h2>";
  activity_section(h, p, s);
  h += "<h2>Bytes nobody accounted for</h2>";
  unaccounted_section(h, p, s);
  h += "<h2>Run</h2>";
  run_section(h, p);

  h += "\n<script type=\"application/json\" id=tz-data>" + script_safe(chart_data(p).dump()) +
       "</script>\n";
  // The ranks' figures for scripts and tests (the same numbers as the table).
  if (ranks)
    h += "<script type=\"application/json\" id=tz-ranks>" +
         script_safe(rank_comparison_json(*ranks).dump()) + "</script>\n";
  h += "<script>";
  h += kReportScript;
  h += "</script>\n</body></html>\n";
  return h;
}

std::string fs_name(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

}  // namespace

std::string render_html_report(const Profile& p, const std::string& source_name) {
  return render(p, source_name, nullptr);
}

std::string render_html_report(const RankProfiles& rp) {
  TZ_CHECK(!rp.profiles.empty(), "no profiles to report on",
           "pass the profile file(s) `train --profile` wrote");
  if (rp.profiles.size() == 1 && rp.missing.empty())
    return render(rp.profiles.front(), fs_name(rp.sources.front()), nullptr);
  const RankComparison c = compare_ranks(rp);
  return render(rp.profiles[c.slowest], fs_name(rp.sources[c.slowest]), &c);
}

namespace {

void write_text(const std::string& html, const std::string& path) {
  write_file_atomic(path, html);
}

}  // namespace

void write_html_report(const Profile& p, const std::string& path, const std::string& source_name) {
  write_text(render_html_report(p, source_name), path);
}

void write_html_report(const RankProfiles& rp, const std::string& path) {
  write_text(render_html_report(rp), path);
}

}  // namespace tierzero::profile
