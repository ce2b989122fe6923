// Profile <-> JSON. Bulky per-step tables are arrays indexed by the top-level "tiers",
// "categories" and "tracks" lists (so a 1,000-step profile stays a few MB); everything a person
// reads by eye (run info, placements, phase names) stays named.
#include "tierzero/profile/profile_json.hpp"

#include <cmath>
#include <fstream>
#include <limits>
#include <type_traits>

#include "tierzero/core/error.hpp"
#include "tierzero/core/input_file.hpp"
#include "tierzero/core/json_text.hpp"
#include "tierzero/core/output_files.hpp"

namespace tierzero::profile {

using nlohmann::json;

namespace {

// Profiles say how many ranks ran; more than this is a damaged file, not a run (a report lists
// each rank, and looks for each one's file).
constexpr int64_t kMaxRanks = int64_t{1} << 20;

// A value as it appears in an error message (long ones cut).
std::string shown(const json& v) {
  const std::string d = v.dump();
  return d.size() <= 40 ? d : d.substr(0, 40) + "...";
}

template <typename Key>
std::string name_of(const Key& key) {
  if constexpr (std::is_integral_v<Key>)
    return "element " + std::to_string(key);
  else
    return std::string("'") + key + "'";
}

// Typed reads that refuse what nlohmann would silently convert (a negative count wrapping to
// 2^64, 1e300 cast to an int): each names the field and shows the value it got.
size_t as_size(const json& v, const std::string& name) {
  if (!v.is_number_unsigned())
    throw std::invalid_argument(name + " must be a non-negative integer, got " + shown(v));
  return v.get<size_t>();
}
int64_t as_int(const json& v, const std::string& name) {
  if (!v.is_number_integer() ||
      (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)))
    throw std::invalid_argument(name + " must be an integer, got " + shown(v));
  return v.get<int64_t>();
}
double as_real(const json& v, const std::string& name) {
  if (!v.is_number()) throw std::invalid_argument(name + " must be a number, got " + shown(v));
  return v.get<double>();
}
template <typename Key>
size_t size_at(const json& j, const Key& key) {
  return as_size(j.at(key), name_of(key));
}
template <typename Key>
int64_t int_at(const json& j, const Key& key) {
  return as_int(j.at(key), name_of(key));
}
template <typename Key>
double real_at(const json& j, const Key& key) {
  return as_real(j.at(key), name_of(key));
}
template <typename Key>
std::string string_at(const json& j, const Key& key) {
  const json& v = j.at(key);
  if (!v.is_string())
    throw std::invalid_argument(name_of(key) + " must be a string, got " + shown(v));
  return v.get<std::string>();
}
int64_t bounded_at(const json& j, const char* key, int64_t lo, int64_t hi) {
  const int64_t v = int_at(j, key);
  if (v < lo || v > hi)
    throw std::invalid_argument(name_of(key) + " = " + std::to_string(v) + " is out of range [" +
                                std::to_string(lo) + ", " + std::to_string(hi) + "]");
  return v;
}
std::array<size_t, kNumTiers> tier_bytes(const json& j) {
  if (!j.is_array() || j.size() != kNumTiers)
    throw std::invalid_argument("expected " + std::to_string(kNumTiers) + " per-tier byte counts");
  std::array<size_t, kNumTiers> out{};
  for (size_t t = 0; t < kNumTiers; ++t) out[t] = as_size(j[t], "byte count");
  return out;
}
// nlohmann's own messages without their "[json.exception.type_error.302] " prefix.
std::string plain(const std::string& m) {
  if (m.rfind("[json.exception.", 0) != 0) return m;
  const size_t close = m.find("] ");
  return close == std::string::npos ? m : m.substr(close + 2);
}

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
    // Profiles written before activation_checkpoint (the last category) hold one fewer.
    if (!j[t].is_array() || (j[t].size() != kNumCategories && j[t].size() != kNumCategories - 1))
      throw std::invalid_argument("expected " + std::to_string(kNumCategories) +
                                  " category byte counts per tier");
    for (size_t c = 0; c < j[t].size(); ++c) b[t][c] = as_size(j[t][c], "byte count");
  }
  return b;
}

json peak_to_json(const PeakAt& p) {
  return {{"bytes", p.bytes}, {"t", p.time_s}, {"phase", phase_name(p.phase)}, {"unit", p.unit}};
}

PeakAt peak_from_json(const json& j) {
  return {size_at(j, "bytes"), real_at(j, "t"), phase_from_name(string_at(j, "phase")),
          int_at(j, "unit")};
}

// JSON has no NaN or infinity; a non-finite loss is written as null and read back as NaN.
json number_or_null(double v) {
  return std::isfinite(v) ? json(v) : json(nullptr);
}
double number_from(const json& j) {
  return j.is_null() ? std::numeric_limits<double>::quiet_NaN() : as_real(j, "loss");
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
  s.step = int_at(j, "step");
  s.start_s = real_at(j, "start_s");
  s.end_s = real_at(j, "end_s");
  const json& c = j.at("counters");
  s.counters.prefetch_hits = size_at(c, "prefetch_hits");
  s.counters.on_demand_fetches = size_at(c, "on_demand_fetches");
  s.counters.stall_s = real_at(c, "stall_s");
  s.counters.step_s = real_at(c, "step_s");
  s.counters.loss = number_from(c.at("loss"));
  s.counters.tokens = size_at(c, "tokens");
  // Absent in profiles written before the reductions were timed.
  s.counters.reductions = c.contains("reductions") ? size_at(c, "reductions") : 0;
  s.counters.reduction_s = c.contains("reduction_s") ? real_at(c, "reduction_s") : 0.0;
  s.counters.reduction_exposed_s =
      c.contains("reduction_exposed_s") ? real_at(c, "reduction_exposed_s") : 0.0;
  s.at_start = bytes_from_json(j.at("at_start"));
  s.at_end = bytes_from_json(j.at("at_end"));
  const json& peaks = j.at("peak");
  if (!peaks.is_array() || peaks.size() != kNumTiers)
    throw std::invalid_argument("'peak' must hold one row per tier");
  for (size_t t = 0; t < kNumTiers; ++t) {
    if (!peaks[t].is_array() ||
        (peaks[t].size() != kNumCategories && peaks[t].size() != kNumCategories - 1))
      throw std::invalid_argument("'peak' rows must hold one entry per category");
    for (size_t k = 0; k < peaks[t].size(); ++k) s.peak[t][k] = peak_from_json(peaks[t][k]);
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
    const double seconds = real_at(tracks[t], 0);
    s.tracks[t] = {seconds, size_at(tracks[t], 1), size_at(tracks[t], 2),
                   tracks[t].size() > 3 ? real_at(tracks[t], 3) : seconds};
  }
  for (const json& ph : j.at("phases"))
    s.phases.push_back({phase_from_name(string_at(ph, "phase")), real_at(ph, "start_s"),
                        real_at(ph, "end_s"), bytes_from_json(ph.at("peak")),
                        bytes_from_json(ph.at("at_end"))});
  for (const json& u : j.at("units"))
    s.units.push_back({int_at(u, 0), real_at(u, 1), tier_bytes(u.at(2))});
  s.process_rss = size_at(j, "process_rss");
  s.host_available = size_at(j, "host_available");
  s.driver_device_used = int_at(j, "driver_device_used");
  return s;
}

template <typename Enum>
Enum enum_at(const json& j, size_t count, const char* what) {
  const size_t i = as_size(j, what);
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

// `field` follows the parse down to the element read ("timeline.events[12]"), so an error names
// it; each row must be an array of its fields.
const json& rows_at(const json& j, const char* key) {
  const json& rows = j.at(key);
  if (!rows.is_array()) throw std::invalid_argument(std::string("'") + key + "' must be an array");
  return rows;
}
const json& row_of(const json& rows, size_t i, size_t fields) {
  const json& row = rows[i];
  if (!row.is_array() || row.size() != fields)
    throw std::invalid_argument("must be an array of " + std::to_string(fields) + " fields");
  return row;
}

Timeline timeline_from_json(const json& j, std::string& field) {
  if (!j.is_object()) throw std::invalid_argument("must be an object");
  Timeline t;
  field = "timeline.initial";
  t.initial = bytes_from_json(j.at("initial"));
  const json& events = rows_at(j, "events");
  for (size_t i = 0; i < events.size(); ++i) {
    field = "timeline.events[" + std::to_string(i) + "]";
    const json& e = row_of(events, i, 6);
    t.events.push_back({real_at(e, 0), enum_at<Tier>(e.at(1), kNumTiers, "tier"),
                        enum_at<Category>(e.at(2), kNumCategories, "category"), int_at(e, 3),
                        size_at(e, 4), string_at(e, 5)});
  }
  const json& activities = rows_at(j, "activities");
  for (size_t i = 0; i < activities.size(); ++i) {
    field = "timeline.activities[" + std::to_string(i) + "]";
    const json& a = row_of(activities, i, 6);
    t.activities.push_back({real_at(a, 0), real_at(a, 1),
                            enum_at<Track>(a.at(2), kNumTracks, "track"), string_at(a, 3),
                            int_at(a, 4), size_at(a, 5)});
  }
  const json& positions = rows_at(j, "positions");
  for (size_t i = 0; i < positions.size(); ++i) {
    field = "timeline.positions[" + std::to_string(i) + "]";
    const json& p = row_of(positions, i, 3);
    t.positions.push_back({real_at(p, 0), phase_from_name(string_at(p, 1)), int_at(p, 2)});
  }
  field = "timeline";
  t.events_dropped = size_at(j, "events_dropped");
  t.activities_dropped = size_at(j, "activities_dropped");
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
    p.run.model = string_at(r, "model");
    p.run.parameters = int_at(r, "parameters");
    p.run.ranks = static_cast<int>(bounded_at(r, "ranks", 1, kMaxRanks));
    p.run.rank = static_cast<int>(bounded_at(r, "rank", 0, p.run.ranks - 1));
    // Optional: profiles written before a run carried its id have neither.
    p.run.run_id = r.contains("run_id") ? string_at(r, "run_id") : std::string();
    p.run.host = r.contains("host") ? string_at(r, "host") : std::string();
    p.run.stage = static_cast<int>(bounded_at(r, "stage", 0, 3));
    p.run.device = string_at(r, "device");
    p.run.device_budget = size_at(r, "device_budget");
    p.run.host_total = size_at(r, "host_total");
    p.run.host_available = size_at(r, "host_available");
    p.run.extra = r.at("extra").get<std::map<std::string, std::string>>();
    field = "placements";
    for (const json& row : j.at("placements"))
      p.placements.push_back({string_at(row, "unit"), size_at(row, "numel"),
                              string_at(row, "param"), string_at(row, "grad"),
                              string_at(row, "optimizer")});
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
      p.timeline = timeline_from_json(j["timeline"], field);
    }
  } catch (const Error& e) {
    TZ_THROW(where + ": bad field '" + field + "': " + e.what_failed(), e.hint());
  } catch (const std::exception& e) {
    TZ_THROW(where + ": bad field '" + field + "': " + plain(e.what()),
             "the file is damaged or was not written by tierzero; write it again");
  }
  return p;
}

void write_profile(const Profile& p, const std::string& path) {
  write_file_atomic(path, profile_to_json(p).dump() + "\n");
}

Profile read_profile(const std::string& path) {
  // A profile is O(steps) and a few MB; with the fine-grained timeline it grows, but 16 GiB
  // is no profile any run writes.
  const std::string text = read_input_file(path, "profile",
                                           "check the path; a tierzero training run with profiling "
                                           "on writes one",
                                           size_t{16} << 30);
  const json j =
      parse_json_text(text, "profile '" + path + "'",
                      "the file is damaged or truncated (did the run finish?); write it again");
  return profile_from_json(j, path);
}

}  // namespace tierzero::profile
