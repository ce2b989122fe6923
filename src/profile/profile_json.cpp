// Profile <-> JSON. Bulky per-step tables are arrays indexed by the top-level "tiers",
// "categories" and "tracks" lists (so a 1,000-step profile stays a few MB); everything a person
// reads by eye (run info, placements, phase names) stays named.
#include "tierzero/profile/profile_json.hpp"

#include <cmath>
#include <fstream>
#include <limits>
#include <sstream>

#include "tierzero/core/error.hpp"
#include "tierzero/core/output_files.hpp"

namespace tierzero::profile {

using nlohmann::json;

namespace {

json bytes_to_json(const TierCategoryBytes& b) {
  json j = json::array();
  for (const auto& row : b) j.push_back(row);
  return j;
}

TierCategoryBytes bytes_from_json(const json& j) {
  TierCategoryBytes b{};
  if (!j.is_array() || j.size() != kNumTiers)
    throw std::invalid_argument("expected " + std::to_string(kNumTiers) + " tiers of " +
                                std::to_string(kNumCategories) + " category byte counts");
  for (size_t t = 0; t < kNumTiers; ++t) {
    if (!j[t].is_array() || j[t].size() != kNumCategories)
      throw std::invalid_argument("expected " + std::to_string(kNumCategories) +
                                  " category byte counts per tier");
    for (size_t c = 0; c < kNumCategories; ++c) b[t][c] = j[t][c].get<size_t>();
  }
  return b;
}

json peak_to_json(const PeakAt& p) {
  return {{"bytes", p.bytes}, {"t", p.time_s}, {"phase", phase_name(p.phase)}, {"unit", p.unit}};
}

PeakAt peak_from_json(const json& j) {
  return {j.at("bytes").get<size_t>(), j.at("t").get<double>(),
          phase_from_name(j.at("phase").get<std::string>()), j.at("unit").get<int64_t>()};
}

// JSON has no NaN or infinity; a non-finite loss is written as null and read back as NaN.
json number_or_null(double v) {
  return std::isfinite(v) ? json(v) : json(nullptr);
}
double number_from(const json& j) {
  return j.is_null() ? std::numeric_limits<double>::quiet_NaN() : j.get<double>();
}

json step_to_json(const StepProfile& s) {
  json j;
  j["step"] = s.step;
  j["start_s"] = s.start_s;
  j["end_s"] = s.end_s;
  j["counters"] = {{"prefetch_hits", s.counters.prefetch_hits},
                   {"on_demand_fetches", s.counters.on_demand_fetches},
                   {"stall_s", s.counters.stall_s},
                   {"step_s", s.counters.step_s},
                   {"loss", number_or_null(s.counters.loss)},
                   {"tokens", s.counters.tokens},
                   {"reductions", s.counters.reductions},
                   {"reduction_s", s.counters.reduction_s},
                   {"reduction_exposed_s", s.counters.reduction_exposed_s}};
  j["at_start"] = bytes_to_json(s.at_start);
  j["at_end"] = bytes_to_json(s.at_end);
  json peaks = json::array();
  for (const auto& row : s.peak) {
    json r = json::array();
    for (const auto& p : row) r.push_back(peak_to_json(p));
    peaks.push_back(r);
  }
  j["peak"] = peaks;
  json tier_peaks = json::array();
  for (const auto& p : s.tier_peak) tier_peaks.push_back(peak_to_json(p));
  j["tier_peak"] = tier_peaks;
  json tracks = json::array();
  for (const auto& t : s.tracks) tracks.push_back({t.seconds, t.bytes, t.count, t.busy_s});
  j["tracks"] = tracks;
  json phases = json::array();
  for (const auto& ph : s.phases)
    phases.push_back({{"phase", phase_name(ph.phase)},
                      {"start_s", ph.start_s},
                      {"end_s", ph.end_s},
                      {"peak", bytes_to_json(ph.peak)},
                      {"at_end", bytes_to_json(ph.at_end)}});
  j["phases"] = phases;
  json units = json::array();
  for (const auto& u : s.units) units.push_back({u.unit, u.seconds, u.peak});
  j["units"] = units;
  j["process_rss"] = s.process_rss;
  j["host_available"] = s.host_available;
  j["driver_device_used"] = s.driver_device_used;
  return j;
}

StepProfile step_from_json(const json& j) {
  StepProfile s;
  s.step = j.at("step").get<int64_t>();
  s.start_s = j.at("start_s").get<double>();
  s.end_s = j.at("end_s").get<double>();
  const json& c = j.at("counters");
  s.counters.prefetch_hits = c.at("prefetch_hits").get<size_t>();
  s.counters.on_demand_fetches = c.at("on_demand_fetches").get<size_t>();
  s.counters.stall_s = c.at("stall_s").get<double>();
  s.counters.step_s = c.at("step_s").get<double>();
  s.counters.loss = number_from(c.at("loss"));
  s.counters.tokens = c.at("tokens").get<size_t>();
  // Absent in profiles written before the reductions were timed.
  s.counters.reductions = c.value("reductions", size_t{0});
  s.counters.reduction_s = c.value("reduction_s", 0.0);
  s.counters.reduction_exposed_s = c.value("reduction_exposed_s", 0.0);
  s.at_start = bytes_from_json(j.at("at_start"));
  s.at_end = bytes_from_json(j.at("at_end"));
  const json& peaks = j.at("peak");
  if (!peaks.is_array() || peaks.size() != kNumTiers)
    throw std::invalid_argument("'peak' must hold one row per tier");
  for (size_t t = 0; t < kNumTiers; ++t) {
    if (!peaks[t].is_array() || peaks[t].size() != kNumCategories)
      throw std::invalid_argument("'peak' rows must hold one entry per category");
    for (size_t k = 0; k < kNumCategories; ++k) s.peak[t][k] = peak_from_json(peaks[t][k]);
  }
  const json& tier_peaks = j.at("tier_peak");
  if (!tier_peaks.is_array() || tier_peaks.size() != kNumTiers)
    throw std::invalid_argument("'tier_peak' must hold one entry per tier");
  for (size_t t = 0; t < kNumTiers; ++t) s.tier_peak[t] = peak_from_json(tier_peaks[t]);
  const json& tracks = j.at("tracks");
  if (!tracks.is_array() || tracks.size() != kNumTracks)
    throw std::invalid_argument("'tracks' must hold one entry per track");
  for (size_t t = 0; t < kNumTracks; ++t) {
    // [seconds, bytes, count, busy_s]; profiles written before busy_s have 3 entries and read
    // their summed seconds as busy (bounded by the step when the report shows it).
    const double seconds = tracks[t].at(0).get<double>();
    s.tracks[t] = {seconds, tracks[t].at(1).get<size_t>(), tracks[t].at(2).get<size_t>(),
                   tracks[t].size() > 3 ? tracks[t].at(3).get<double>() : seconds};
  }
  for (const json& ph : j.at("phases"))
    s.phases.push_back({phase_from_name(ph.at("phase").get<std::string>()),
                        ph.at("start_s").get<double>(), ph.at("end_s").get<double>(),
                        bytes_from_json(ph.at("peak")), bytes_from_json(ph.at("at_end"))});
  for (const json& u : j.at("units"))
    s.units.push_back({u.at(0).get<int64_t>(), u.at(1).get<double>(),
                       u.at(2).get<std::array<size_t, kNumTiers>>()});
  s.process_rss = j.at("process_rss").get<size_t>();
  s.host_available = j.at("host_available").get<size_t>();
  s.driver_device_used = j.at("driver_device_used").get<int64_t>();
  return s;
}

template <typename Enum>
Enum enum_at(const json& j, size_t count, const char* what) {
  const auto i = j.get<size_t>();
  if (i >= count) throw std::invalid_argument(std::string("bad ") + what + " index");
  return static_cast<Enum>(i);
}

json timeline_to_json(const Timeline& t) {
  json j;
  j["initial"] = bytes_to_json(t.initial);
  json events = json::array();
  for (const auto& e : t.events)
    events.push_back({e.time_s, static_cast<size_t>(e.tier), static_cast<size_t>(e.category),
                      e.delta, e.current, e.label});
  j["events"] = std::move(events);
  json acts = json::array();
  for (const auto& a : t.activities)
    acts.push_back({a.start_s, a.end_s, static_cast<size_t>(a.track), a.name, a.unit, a.bytes});
  j["activities"] = std::move(acts);
  json pos = json::array();
  for (const auto& p : t.positions) pos.push_back({p.time_s, phase_name(p.phase), p.unit});
  j["positions"] = std::move(pos);
  j["events_dropped"] = t.events_dropped;
  j["activities_dropped"] = t.activities_dropped;
  return j;
}

Timeline timeline_from_json(const json& j) {
  Timeline t;
  t.initial = bytes_from_json(j.at("initial"));
  for (const json& e : j.at("events"))
    t.events.push_back({e.at(0).get<double>(), enum_at<Tier>(e.at(1), kNumTiers, "tier"),
                        enum_at<Category>(e.at(2), kNumCategories, "category"),
                        e.at(3).get<int64_t>(), e.at(4).get<size_t>(), e.at(5).get<std::string>()});
  for (const json& a : j.at("activities"))
    t.activities.push_back(
        {a.at(0).get<double>(), a.at(1).get<double>(), enum_at<Track>(a.at(2), kNumTracks, "track"),
         a.at(3).get<std::string>(), a.at(4).get<int64_t>(), a.at(5).get<size_t>()});
  for (const json& p : j.at("positions"))
    t.positions.push_back({p.at(0).get<double>(), phase_from_name(p.at(1).get<std::string>()),
                           p.at(2).get<int64_t>()});
  t.events_dropped = j.at("events_dropped").get<size_t>();
  t.activities_dropped = j.at("activities_dropped").get<size_t>();
  return t;
}

}  // namespace

json profile_to_json(const Profile& p) {
  json j;
  j["format"] = kProfileFormat;
  j["version"] = kProfileVersion;
  json tiers = json::array(), cats = json::array(), tracks = json::array();
  for (size_t t = 0; t < kNumTiers; ++t) tiers.push_back(tier_name(static_cast<Tier>(t)));
  for (size_t c = 0; c < kNumCategories; ++c)
    cats.push_back(category_name(static_cast<Category>(c)));
  for (size_t t = 0; t < kNumTracks; ++t) tracks.push_back(track_name(static_cast<Track>(t)));
  j["tiers"] = tiers;
  j["categories"] = cats;
  j["tracks"] = tracks;
  j["run"] = {{"model", p.run.model},
              {"parameters", p.run.parameters},
              {"ranks", p.run.ranks},
              {"rank", p.run.rank},
              {"run_id", p.run.run_id},
              {"host", p.run.host},
              {"stage", p.run.stage},
              {"device", p.run.device},
              {"device_budget", p.run.device_budget},
              {"host_total", p.run.host_total},
              {"host_available", p.run.host_available},
              {"extra", p.run.extra}};
  json rows = json::array();
  for (const auto& r : p.placements)
    rows.push_back({{"unit", r.unit},
                    {"numel", r.numel},
                    {"param", r.param_tier},
                    {"grad", r.grad_tier},
                    {"optimizer", r.optimizer_tier}});
  j["placements"] = rows;
  j["predicted"] = p.has_predicted ? bytes_to_json(p.predicted) : json(nullptr);
  json steps = json::array();
  for (const auto& s : p.steps) steps.push_back(step_to_json(s));
  j["steps"] = std::move(steps);
  if (p.has_timeline) j["timeline"] = timeline_to_json(p.timeline);
  return j;
}

Profile profile_from_json(const json& j, const std::string& source) {
  const std::string where = "profile '" + source + "'";
  TZ_CHECK(j.is_object() && j.contains("format"),
           where + " is not a TierZero profile (no \"format\" field)",
           "pass the profile JSON a tierzero training run wrote");
  TZ_CHECK(j["format"] == kProfileFormat,
           where + " has format " + j["format"].dump() + ", not \"" + kProfileFormat + "\"",
           "pass the profile JSON a tierzero training run wrote");
  TZ_CHECK(j.contains("version") && j["version"] == kProfileVersion,
           where + " has version " + (j.contains("version") ? j["version"].dump() : "none") +
               "; this build reads version " + std::to_string(kProfileVersion),
           "write the profile again with this build of tierzero");
  Profile p;
  std::string field = "run";
  try {
    const json& r = j.at("run");
    p.run.model = r.at("model").get<std::string>();
    p.run.parameters = r.at("parameters").get<int64_t>();
    p.run.ranks = r.at("ranks").get<int>();
    p.run.rank = r.at("rank").get<int>();
    // Optional: profiles written before a run carried its id have neither.
    p.run.run_id = r.value("run_id", std::string());
    p.run.host = r.value("host", std::string());
    p.run.stage = r.at("stage").get<int>();
    p.run.device = r.at("device").get<std::string>();
    p.run.device_budget = r.at("device_budget").get<size_t>();
    p.run.host_total = r.at("host_total").get<size_t>();
    p.run.host_available = r.at("host_available").get<size_t>();
    p.run.extra = r.at("extra").get<std::map<std::string, std::string>>();
    field = "placements";
    for (const json& row : j.at("placements"))
      p.placements.push_back({row.at("unit").get<std::string>(), row.at("numel").get<size_t>(),
                              row.at("param").get<std::string>(), row.at("grad").get<std::string>(),
                              row.at("optimizer").get<std::string>()});
    field = "predicted";
    if (!j.at("predicted").is_null()) {
      p.has_predicted = true;
      p.predicted = bytes_from_json(j["predicted"]);
    }
    field = "steps";
    const json& steps = j.at("steps");
    if (!steps.is_array()) throw std::invalid_argument("'steps' must be an array");
    p.steps.reserve(steps.size());
    for (size_t i = 0; i < steps.size(); ++i) {
      field = "steps[" + std::to_string(i) + "]";
      p.steps.push_back(step_from_json(steps[i]));
    }
    if (j.contains("timeline")) {
      field = "timeline";
      p.has_timeline = true;
      p.timeline = timeline_from_json(j["timeline"]);
    }
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    TZ_THROW(where + ": bad field '" + field + "': " + e.what(),
             "the file is damaged or was not written by tierzero; write it again");
  }
  return p;
}

void write_profile(const Profile& p, const std::string& path) {
  write_file_atomic(path, profile_to_json(p).dump() + "\n");
}

Profile read_profile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  TZ_CHECK(in.good(), "cannot read profile '" + path + "': " + errno_string(),
           "check the path; a tierzero training run with profiling on writes one");
  std::stringstream ss;
  ss << in.rdbuf();
  json j;
  try {
    j = json::parse(ss.str());
  } catch (const json::parse_error& e) {
    TZ_THROW("profile '" + path + "' is not valid JSON: " + e.what(),
             "the file is damaged or truncated (did the run finish?); write it again");
  }
  return profile_from_json(j, path);
}

}  // namespace tierzero::profile
