// Chrome trace event format: timestamps in microseconds from the earliest thing recorded, so the
// viewer opens at the run's start rather than at the process's.
#include "tierzero/profile/trace_export.hpp"

#include <algorithm>
#include <fstream>
#include <limits>

#include "tierzero/core/error.hpp"

namespace tierzero::profile {

using nlohmann::json;

namespace {

// Thread ids: the activity tracks first (in Track order), then the step and phase tracks.
constexpr int kStepTid = static_cast<int>(kNumTracks) + 1;
constexpr int kPhaseTid = static_cast<int>(kNumTracks) + 2;
int track_tid(Track t) {
  return static_cast<int>(t) + 1;
}

json thread_meta(int pid, int tid, const std::string& name) {
  return {
      {"ph", "M"}, {"name", "thread_name"}, {"pid", pid}, {"tid", tid}, {"args", {{"name", name}}}};
}

json sort_meta(int pid, int tid, int index) {
  return {{"ph", "M"},
          {"name", "thread_sort_index"},
          {"pid", pid},
          {"tid", tid},
          {"args", {{"sort_index", index}}}};
}

json counter(int pid, const char* tier, double ts, const std::array<size_t, kNumCategories>& v) {
  json args;
  for (size_t c = 0; c < kNumCategories; ++c) args[category_name(static_cast<Category>(c))] = v[c];
  return {{"ph", "C"},  {"name", std::string("memory ") + tier},
          {"pid", pid}, {"tid", 0},
          {"ts", ts},   {"args", std::move(args)}};
}

}  // namespace

json trace_json(const Profile& p, const std::string& source) {
  TZ_CHECK(p.has_timeline, source + " has no fine-grained timeline, which a trace needs",
           "run train again with the profile's fine-grained timeline option on "
           "(the recorder's `timeline`), then export the trace from that profile");
  const int pid = p.run.rank;
  const Timeline& tl = p.timeline;
  double t0 = std::numeric_limits<double>::infinity();
  if (!p.steps.empty()) t0 = std::min(t0, p.steps.front().start_s);
  if (!tl.events.empty()) t0 = std::min(t0, tl.events.front().time_s);
  for (const auto& a : tl.activities) t0 = std::min(t0, a.start_s);
  if (!tl.positions.empty()) t0 = std::min(t0, tl.positions.front().time_s);
  if (t0 == std::numeric_limits<double>::infinity()) t0 = 0.0;
  auto us = [t0](double s) { return (s - t0) * 1e6; };

  json ev = json::array();
  ev.push_back({{"ph", "M"},
                {"name", "process_name"},
                {"pid", pid},
                {"tid", 0},
                {"args", {{"name", "rank " + std::to_string(pid)}}}});
  for (size_t t = 0; t < kNumTracks; ++t) {
    const auto track = static_cast<Track>(t);
    ev.push_back(thread_meta(pid, track_tid(track), track_name(track)));
    ev.push_back(sort_meta(pid, track_tid(track), track_tid(track) + 2));
  }
  ev.push_back(thread_meta(pid, kStepTid, "step"));
  ev.push_back(sort_meta(pid, kStepTid, 0));
  ev.push_back(thread_meta(pid, kPhaseTid, "phase / unit"));
  ev.push_back(sort_meta(pid, kPhaseTid, 1));

  for (const auto& s : p.steps)
    ev.push_back({{"ph", "X"},
                  {"name", "step " + std::to_string(s.step)},
                  {"cat", "step"},
                  {"pid", pid},
                  {"tid", kStepTid},
                  {"ts", us(s.start_s)},
                  {"dur", (s.end_s - s.start_s) * 1e6},
                  {"args", {{"loss", s.counters.loss}, {"stall_s", s.counters.stall_s}}}});
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
    ev.push_back({{"ph", "X"},
                  {"name", name},
                  {"cat", "phase"},
                  {"pid", pid},
                  {"tid", kPhaseTid},
                  {"ts", us(cp.time_s)},
                  {"dur", (end - cp.time_s) * 1e6}});
  }
  for (const auto& a : tl.activities) {
    json args = {{"bytes", a.bytes}};
    if (a.unit >= 0) args["unit"] = a.unit;
    ev.push_back({{"ph", "X"},
                  {"name", a.name.empty() ? track_name(a.track) : a.name},
                  {"cat", track_name(a.track)},
                  {"pid", pid},
                  {"tid", track_tid(a.track)},
                  {"ts", us(a.start_s)},
                  {"dur", std::max(0.0, a.end_s - a.start_s) * 1e6},
                  {"args", std::move(args)}});
  }
  // Memory counters: every tier at the start, then the event's tier at each event.
  TierCategoryBytes state = tl.initial;
  for (size_t t = 0; t < kNumTiers; ++t)
    ev.push_back(counter(pid, tier_name(static_cast<Tier>(t)), 0.0, state[t]));
  for (const auto& e : tl.events) {
    const auto t = static_cast<size_t>(e.tier);
    state[t][static_cast<size_t>(e.category)] = e.current;
    ev.push_back(counter(pid, tier_name(e.tier), us(e.time_s), state[t]));
  }
  return {{"traceEvents", std::move(ev)},
          {"displayTimeUnit", "ms"},
          {"otherData",
           {{"format", "tierzero-trace"},
            {"model", p.run.model},
            {"rank", p.run.rank},
            {"memory_events_dropped", tl.events_dropped},
            {"activities_dropped", tl.activities_dropped}}}};
}

void write_trace(const Profile& p, const std::string& path, const std::string& source) {
  const json j = trace_json(p, source);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  TZ_CHECK(out.good(), "cannot write trace '" + path + "': " + errno_string(),
           "check that the directory exists and is writable");
  out << j.dump() << '\n';
  out.close();
  TZ_CHECK(out.good(), "writing trace '" + path + "' failed: " + errno_string(),
           "check free disk space");
}

}  // namespace tierzero::profile
