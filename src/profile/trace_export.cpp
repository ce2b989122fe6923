// Chrome trace event format: timestamps in microseconds from the earliest thing recorded, so the
// viewer opens at the run's start rather than at the process's. Each event is built as a small
// nlohmann::json object and serialized on its own, appended to the text: a fine-grained timeline
// of a long run holds millions of events, and one document holding them all took seconds and
// gigabytes. Ranks on one host share its monotonic clock, so their tracks line up as recorded;
// ranks on different hosts are each shifted to start at 0 (their clocks are unrelated).
#include "tierzero/profile/trace_export.hpp"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <map>

#include "tierzero/core/error.hpp"
#include "tierzero/core/output_files.hpp"

namespace tierzero::profile {

namespace {

using nlohmann::json;

// Thread ids: the activity tracks first (in Track order), then the step and phase tracks.
constexpr int kStepTid = static_cast<int>(kNumTracks) + 1;
constexpr int kPhaseTid = static_cast<int>(kNumTracks) + 2;
int track_tid(Track t) {
  return static_cast<int>(t) + 1;
}

// Microseconds to 3 decimals (nanoseconds): shorter text than the double's 17 digits.
double us_rounded(double us) {
  return std::isfinite(us) ? std::round(us * 1e3) / 1e3 : 0.0;
}

class TraceWriter {
 public:
  TraceWriter() { out_ = "{\"traceEvents\":["; }

  void thread_meta(int pid, int tid, const std::string& name, int sort_index) {
    add({{"ph", "M"},
         {"name", "thread_name"},
         {"pid", pid},
         {"tid", tid},
         {"args", {{"name", name}}}});
    add({{"ph", "M"},
         {"name", "thread_sort_index"},
         {"pid", pid},
         {"tid", tid},
         {"args", {{"sort_index", sort_index}}}});
  }

  void process_meta(int pid, const std::string& name) {
    add({{"ph", "M"},
         {"name", "process_name"},
         {"pid", pid},
         {"tid", 0},
         {"args", {{"name", name}}}});
    add({{"ph", "M"},
         {"name", "process_sort_index"},
         {"pid", pid},
         {"tid", 0},
         {"args", {{"sort_index", pid}}}});
  }

  // A complete event. The bulk events (slices and counters) refill one kept object each
  // instead of building a new one: its keys stay allocated, which makes the trace of a
  // fine-grained profile about twice as fast to write.
  void slice(int pid, int tid, const std::string& name, const char* cat, double ts_us,
             double dur_us, json args) {
    if (slice_.is_null())
      slice_ = {{"ph", "X"}, {"name", ""}, {"cat", ""},  {"pid", 0},
                {"tid", 0},  {"ts", 0.0},  {"dur", 0.0}, {"args", json::object()}};
    slice_["name"] = name;
    slice_["cat"] = cat;
    slice_["pid"] = pid;
    slice_["tid"] = tid;
    slice_["ts"] = us_rounded(ts_us);
    slice_["dur"] = us_rounded(std::max(0.0, dur_us));
    slice_["args"] = args.is_null() ? json::object() : std::move(args);
    add(slice_);
  }

  void counter(int pid, const char* tier, double ts_us,
               const std::array<size_t, kNumCategories>& v) {
    if (counter_.is_null()) {
      json args = json::object();
      for (size_t c = 0; c < kNumCategories; ++c)
        args[category_name(static_cast<Category>(c))] = size_t{0};
      counter_ = {{"ph", "C"}, {"name", ""}, {"pid", 0},
                  {"tid", 0},  {"ts", 0.0},  {"args", std::move(args)}};
    }
    counter_["name"] = std::string("memory ") + tier;
    counter_["pid"] = pid;
    counter_["ts"] = us_rounded(ts_us);
    json& args = counter_["args"];
    for (size_t c = 0; c < kNumCategories; ++c)
      args[category_name(static_cast<Category>(c))] = v[c];
    add(counter_);
  }

  std::string finish(const json& other) {
    out_ += "],\"displayTimeUnit\":\"ms\",\"otherData\":" + other.dump() + "}\n";
    return std::move(out_);
  }

 private:
  // NaN and infinity serialize as null (nlohmann's dump), so the text stays valid JSON.
  void add(const json& event) {
    if (!first_) out_ += ",\n";
    first_ = false;
    out_ += event.dump();
  }

  bool first_ = true;
  std::string out_;
  json slice_, counter_;  // the kept bulk events (null until first used)
};

// The earliest time a profile recorded (its steps, events, activities or positions).
double earliest(const Profile& p) {
  const Timeline& tl = p.timeline;
  double t0 = std::numeric_limits<double>::infinity();
  if (!p.steps.empty()) t0 = std::min(t0, p.steps.front().start_s);
  if (!tl.events.empty()) t0 = std::min(t0, tl.events.front().time_s);
  for (const auto& a : tl.activities) t0 = std::min(t0, a.start_s);
  if (!tl.positions.empty()) t0 = std::min(t0, tl.positions.front().time_s);
  return t0;
}

// One rank's tracks (process `pid` = its rank) with times counted from t0.
void write_rank(TraceWriter& w, const Profile& p, double t0) {
  const int pid = p.run.rank;
  const Timeline& tl = p.timeline;
  auto us = [t0](double s) { return (s - t0) * 1e6; };
  w.process_meta(pid, "rank " + std::to_string(pid));
  for (size_t t = 0; t < kNumTracks; ++t) {
    const auto track = static_cast<Track>(t);
    w.thread_meta(pid, track_tid(track), track_name(track), track_tid(track) + 2);
  }
  w.thread_meta(pid, kStepTid, "step", 0);
  w.thread_meta(pid, kPhaseTid, "phase / unit", 1);

  for (const auto& s : p.steps)
    w.slice(pid, kStepTid, "step " + std::to_string(s.step), "step", us(s.start_s),
            (s.end_s - s.start_s) * 1e6,
            {{"loss", s.counters.loss}, {"stall_s", s.counters.stall_s}});
  // Positions become slices from each change to the next one within the same step.
  for (size_t i = 0; i < tl.positions.size(); ++i) {
    const ChangePoint& cp = tl.positions[i];
    // Steps are in time order: the first one ending at or after the change holds it.
    const auto step = std::lower_bound(p.steps.begin(), p.steps.end(), cp.time_s,
                                       [](const StepProfile& s, double t) { return s.end_s < t; });
    const double step_end =
        step != p.steps.end() && step->start_s <= cp.time_s ? step->end_s : cp.time_s;
    const double end =
        i + 1 < tl.positions.size() ? std::min(tl.positions[i + 1].time_s, step_end) : step_end;
    if (end <= cp.time_s) continue;
    std::string name = phase_name(cp.phase);
    if (cp.unit >= 0) name += " unit " + std::to_string(cp.unit);
    w.slice(pid, kPhaseTid, name, "phase", us(cp.time_s), (end - cp.time_s) * 1e6, json());
  }
  for (const auto& a : tl.activities) {
    json args = {{"bytes", a.bytes}};
    if (a.unit >= 0) args["unit"] = a.unit;
    w.slice(pid, track_tid(a.track), a.name.empty() ? track_name(a.track) : a.name,
            track_name(a.track), us(a.start_s), (a.end_s - a.start_s) * 1e6, std::move(args));
  }
  // Memory counters: every tier at the start, then the event's tier at each event.
  TierCategoryBytes state = tl.initial;
  for (size_t t = 0; t < kNumTiers; ++t)
    w.counter(pid, tier_name(static_cast<Tier>(t)), 0.0, state[t]);
  for (const auto& e : tl.events) {
    const auto t = static_cast<size_t>(e.tier);
    state[t][static_cast<size_t>(e.category)] = e.current;
    w.counter(pid, tier_name(e.tier), us(e.time_s), state[t]);
  }
}

}  // namespace

std::string trace_text(const Profile& p, const std::string& source) {
  return trace_text(std::vector<Profile>{p}, std::vector<std::string>{source});
}

std::string trace_text(const std::vector<Profile>& ranks, const std::vector<std::string>& sources) {
  TZ_CHECK(!ranks.empty() && ranks.size() == sources.size(), "no profiles to trace",
           "pass the profile file(s) `train --profile --profile-timeline` wrote");
  for (size_t i = 0; i < ranks.size(); ++i)
    TZ_CHECK(ranks[i].has_timeline,
             sources[i] + " has no fine-grained timeline, which a trace needs",
             "run train again with the profile's fine-grained timeline option on "
             "(`--profile-timeline`), then export the trace from that profile");
  // One origin per host: the ranks sharing a clock keep their offsets.
  std::map<std::string, double> origin;
  bool one_host = true;
  for (const Profile& p : ranks) {
    const double t = earliest(p);
    auto [it, fresh] = origin.emplace(p.run.host, t);
    if (!fresh) it->second = std::min(it->second, t);
    one_host = one_host && p.run.host == ranks.front().run.host;
  }
  TraceWriter w;
  json rank_ids = json::array();
  size_t total_events = 0, total_activities = 0;
  for (const Profile& p : ranks) {
    double t0 = origin[p.run.host];
    if (!std::isfinite(t0)) t0 = 0.0;
    write_rank(w, p, t0);
    rank_ids.push_back(p.run.rank);
    total_events += p.timeline.events_dropped;
    total_activities += p.timeline.activities_dropped;
  }
  json other = {{"format", "tierzero-trace"},
                {"model", ranks.front().run.model},
                {"memory_events_dropped", total_events},
                {"activities_dropped", total_activities},
                {"clocks", one_host ? "one host: the ranks' times are comparable"
                                    : "several hosts: each host's ranks start at 0"}};
  if (ranks.size() == 1)
    other["rank"] = ranks.front().run.rank;
  else
    other["ranks"] = rank_ids;
  return w.finish(other);
}

nlohmann::json trace_json(const Profile& p, const std::string& source) {
  return nlohmann::json::parse(trace_text(p, source));
}

void write_trace_text(const std::string& text, const std::string& path) {
  write_file_atomic(path, text);
}

void write_trace(const Profile& p, const std::string& path, const std::string& source) {
  write_trace_text(trace_text(p, source), path);
}

}  // namespace tierzero::profile
