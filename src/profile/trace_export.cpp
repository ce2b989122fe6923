// Chrome trace event format: timestamps in microseconds from the earliest thing recorded, so the
// viewer opens at the run's start rather than at the process's. The text is written directly
// (not through a JSON document) because a fine-grained timeline of a long run holds millions of
// events: building a DOM for them took seconds and gigabytes.
#include "tierzero/profile/trace_export.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>

#include "tierzero/core/error.hpp"

namespace tierzero::profile {

namespace {

// Thread ids: the activity tracks first (in Track order), then the step and phase tracks.
constexpr int kStepTid = static_cast<int>(kNumTracks) + 1;
constexpr int kPhaseTid = static_cast<int>(kNumTracks) + 2;
int track_tid(Track t) {
  return static_cast<int>(t) + 1;
}

class TraceWriter {
 public:
  explicit TraceWriter(int pid) : pid_(pid) { out_ = "{\"traceEvents\":["; }

  void thread_meta(int tid, const std::string& name, int sort_index) {
    begin();
    out_ += "\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":" + std::to_string(pid_) +
            ",\"tid\":" + std::to_string(tid) + ",\"args\":{\"name\":" + quoted(name) + "}}";
    begin();
    out_ += "\"ph\":\"M\",\"name\":\"thread_sort_index\",\"pid\":" + std::to_string(pid_) +
            ",\"tid\":" + std::to_string(tid) +
            ",\"args\":{\"sort_index\":" + std::to_string(sort_index) + "}}";
  }

  void process_meta(const std::string& name) {
    begin();
    out_ += "\"ph\":\"M\",\"name\":\"process_name\",\"pid\":" + std::to_string(pid_) +
            ",\"tid\":0,\"args\":{\"name\":" + quoted(name) + "}}";
  }

  // A complete event; `args` is a JSON object's members without braces (may be empty).
  void slice(int tid, const std::string& name, const char* cat, double ts_us, double dur_us,
             const std::string& args) {
    begin();
    out_ += "\"ph\":\"X\",\"name\":" + quoted(name) + ",\"cat\":\"" + cat +
            "\",\"pid\":" + std::to_string(pid_) + ",\"tid\":" + std::to_string(tid);
    number(",\"ts\":", ts_us);
    number(",\"dur\":", std::max(0.0, dur_us));
    out_ += ",\"args\":{" + args + "}}";
  }

  void counter(const char* tier, double ts_us, const std::array<size_t, kNumCategories>& v) {
    begin();
    out_ += "\"ph\":\"C\",\"name\":\"memory ";
    out_ += tier;
    out_ += "\",\"pid\":" + std::to_string(pid_) + ",\"tid\":0";
    number(",\"ts\":", ts_us);
    out_ += ",\"args\":{";
    for (size_t c = 0; c < kNumCategories; ++c) {
      if (c) out_ += ',';
      out_ += '"';
      out_ += category_name(static_cast<Category>(c));
      out_ += "\":" + std::to_string(v[c]);
    }
    out_ += "}}";
  }

  std::string finish(const nlohmann::json& other) {
    out_ += "],\"displayTimeUnit\":\"ms\",\"otherData\":" + other.dump() + "}\n";
    return std::move(out_);
  }

  static std::string quoted(const std::string& s) { return nlohmann::json(s).dump(); }

 private:
  void begin() {
    if (!first_) out_ += ",\n";
    first_ = false;
    out_ += '{';
  }
  void number(const char* key, double v) {
    char buf[48];
    std::snprintf(buf, sizeof buf, "%.3f", std::isfinite(v) ? v : 0.0);
    out_ += key;
    out_ += buf;
  }

  int pid_;
  bool first_ = true;
  std::string out_;
};

std::string finite_or_null(double v) {
  if (!std::isfinite(v)) return "null";
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

}  // namespace

std::string trace_text(const Profile& p, const std::string& source) {
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

  TraceWriter w(pid);
  w.process_meta("rank " + std::to_string(pid));
  for (size_t t = 0; t < kNumTracks; ++t) {
    const auto track = static_cast<Track>(t);
    w.thread_meta(track_tid(track), track_name(track), track_tid(track) + 2);
  }
  w.thread_meta(kStepTid, "step", 0);
  w.thread_meta(kPhaseTid, "phase / unit", 1);

  for (const auto& s : p.steps)
    w.slice(kStepTid, "step " + std::to_string(s.step), "step", us(s.start_s),
            (s.end_s - s.start_s) * 1e6,
            "\"loss\":" + finite_or_null(s.counters.loss) +
                ",\"stall_s\":" + finite_or_null(s.counters.stall_s));
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
    w.slice(kPhaseTid, name, "phase", us(cp.time_s), (end - cp.time_s) * 1e6, "");
  }
  for (const auto& a : tl.activities) {
    std::string args = "\"bytes\":" + std::to_string(a.bytes);
    if (a.unit >= 0) args += ",\"unit\":" + std::to_string(a.unit);
    w.slice(track_tid(a.track), a.name.empty() ? track_name(a.track) : a.name, track_name(a.track),
            us(a.start_s), (a.end_s - a.start_s) * 1e6, args);
  }
  // Memory counters: every tier at the start, then the event's tier at each event.
  TierCategoryBytes state = tl.initial;
  for (size_t t = 0; t < kNumTiers; ++t) w.counter(tier_name(static_cast<Tier>(t)), 0.0, state[t]);
  for (const auto& e : tl.events) {
    const auto t = static_cast<size_t>(e.tier);
    state[t][static_cast<size_t>(e.category)] = e.current;
    w.counter(tier_name(e.tier), us(e.time_s), state[t]);
  }
  return w.finish({{"format", "tierzero-trace"},
                   {"model", p.run.model},
                   {"rank", p.run.rank},
                   {"memory_events_dropped", tl.events_dropped},
                   {"activities_dropped", tl.activities_dropped}});
}

nlohmann::json trace_json(const Profile& p, const std::string& source) {
  return nlohmann::json::parse(trace_text(p, source));
}

void write_trace(const Profile& p, const std::string& path, const std::string& source) {
  const std::string text = trace_text(p, source);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  TZ_CHECK(out.good(), "cannot write trace '" + path + "': " + errno_string(),
           "check that the directory exists and is writable");
  out << text;
  out.close();
  TZ_CHECK(out.good(), "writing trace '" + path + "' failed: " + errno_string(),
           "check free disk space");
}

}  // namespace tierzero::profile
