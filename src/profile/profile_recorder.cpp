// ProfileRecorder: the per-step replay of memory events against the training thread's position.
// Each tracker event carries its (tier, category)'s bytes after the event, so the replay sets
// levels rather than adding deltas: an event missed or reordered across a drain cannot leave the
// recorder's levels wrong for the rest of the run.
#include "tierzero/profile/profile_recorder.hpp"

#include <algorithm>
#include <map>

#include "tierzero/core/error.hpp"
#include "tierzero/core/timer.hpp"
#include "tierzero/profile/profile_json.hpp"
#include "tierzero/profile/system_memory.hpp"

namespace tierzero::profile {

ProfileRecorder::ProfileRecorder(RecorderOptions options) : options_(std::move(options)) {
  TZ_CHECK(options_.tracker != nullptr && options_.activities != nullptr,
           "profile recorder: no memory tracker or activity log given",
           "leave RecorderOptions' tracker and activities at their defaults (the global ones)");
  MemoryTracker& tracker = *options_.tracker;
  tracker.set_timeline_enabled(true);
  tracker.take_timeline();  // events from before the recorder: their levels are read below
  for (size_t t = 0; t < kNumTiers; ++t)
    for (size_t c = 0; c < kNumCategories; ++c)
      state_[t][c] = tracker.current(static_cast<Tier>(t), static_cast<Category>(c));
  if (options_.timeline) {
    profile_.has_timeline = true;
    profile_.timeline.initial = state_;
    options_.activities->take_activities();
    started_recording_ = !options_.activities->recording();
    options_.activities->set_recording(true);
  }
  dropped_at_start_ = tracker.timeline_dropped();
  activities_dropped_at_start_ = options_.activities->dropped();
  const HostMemory host = read_host_memory();
  profile_.run.host_total = host.total;
  profile_.run.host_available = host.available;
}

ProfileRecorder::~ProfileRecorder() {
  if (started_recording_) options_.activities->set_recording(false);
}

void ProfileRecorder::set_run_info(RunInfo run) {
  if (run.host_total == 0 && run.host_available == 0) {
    run.host_total = profile_.run.host_total;
    run.host_available = profile_.run.host_available;
  }
  profile_.run = std::move(run);
}

void ProfileRecorder::set_placements(std::vector<PlacementRow> rows) {
  profile_.placements = std::move(rows);
}

void ProfileRecorder::set_predicted(const TierCategoryBytes& bytes) {
  profile_.has_predicted = true;
  profile_.predicted = bytes;
}

void ProfileRecorder::begin_step(int64_t step) {
  TZ_CHECK(!in_step_,
           "profile recorder: begin_step(" + std::to_string(step) + ") while step " +
               std::to_string(step_) + " is still open",
           "call end_step before the next begin_step");
  // Events since the last step (evaluation, checkpointing) move levels but belong to no step.
  std::vector<MemoryEvent> between = options_.tracker->take_timeline();
  for (const MemoryEvent& e : between)
    state_[static_cast<size_t>(e.tier)][static_cast<size_t>(e.category)] = e.current;
  if (options_.timeline) keep_timeline(between);
  in_step_ = true;
  step_ = step;
  step_start_ = monotonic_seconds();
  tracks_at_start_ = options_.activities->totals();
  phase_ = Phase::other;
  unit_ = -1;
  positions_.clear();
  positions_.push_back({step_start_, phase_, unit_});
}

void ProfileRecorder::set_phase(Phase phase) {
  if (phase == phase_) return;
  phase_ = phase;
  if (in_step_) positions_.push_back({monotonic_seconds(), phase_, unit_});
}

void ProfileRecorder::set_unit(int64_t unit) {
  if (unit == unit_) return;
  unit_ = unit;
  if (in_step_) positions_.push_back({monotonic_seconds(), phase_, unit_});
}

void ProfileRecorder::keep_timeline(const std::vector<MemoryEvent>& events) {
  auto& out = profile_.timeline.events;
  out.reserve(out.size() + events.size());
  for (const MemoryEvent& e : events)
    out.push_back({e.time_s, e.tier, e.category, e.delta, e.current, e.label ? e.label : ""});
}

void ProfileRecorder::end_step(const StepCounters& counters) {
  TZ_CHECK(in_step_, "profile recorder: end_step without begin_step",
           "call begin_step(step) at the start of each step");
  const double end = monotonic_seconds();
  std::vector<MemoryEvent> events = options_.tracker->take_timeline();
  // Events are appended under the tracker's lock with their time taken there, so they are in
  // order already; a stable sort keeps that true even if a future tracker batches them.
  std::stable_sort(events.begin(), events.end(),
                   [](const MemoryEvent& a, const MemoryEvent& b) { return a.time_s < b.time_s; });

  StepProfile s;
  s.step = step_;
  s.start_s = step_start_;
  s.end_s = end;
  s.counters = counters;
  if (s.counters.step_s <= 0.0) s.counters.step_s = end - step_start_;
  s.at_start = state_;

  std::array<size_t, kNumTiers> tier_sum{};
  for (size_t t = 0; t < kNumTiers; ++t) tier_sum[t] = tier_total(state_, static_cast<Tier>(t));
  const ChangePoint& first = positions_.front();
  for (size_t t = 0; t < kNumTiers; ++t) {
    for (size_t c = 0; c < kNumCategories; ++c)
      s.peak[t][c] = {state_[t][c], 0.0, first.phase, first.unit};
    s.tier_peak[t] = {tier_sum[t], 0.0, first.phase, first.unit};
  }
  std::map<int64_t, UnitStat> units;

  // Makes positions_[i] the current position: closes the previous one's time and opens a phase
  // segment when the phase changed; the levels at that moment count toward the new holder.
  auto enter = [&](size_t i) {
    const ChangePoint& cp = positions_[i];
    const double rel = cp.time_s - step_start_;
    if (i > 0 && positions_[i - 1].unit >= 0)
      units[positions_[i - 1].unit].seconds += cp.time_s - positions_[i - 1].time_s;
    if (s.phases.empty() || s.phases.back().phase != cp.phase) {
      if (!s.phases.empty()) {
        s.phases.back().end_s = rel;
        s.phases.back().at_end = state_;
      }
      s.phases.push_back({cp.phase, rel, rel, state_, state_});
    }
    if (cp.unit >= 0) {
      UnitStat& u = units[cp.unit];
      u.unit = cp.unit;
      for (size_t t = 0; t < kNumTiers; ++t) u.peak[t] = std::max(u.peak[t], tier_sum[t]);
    }
  };

  size_t cur = 0;
  enter(0);
  for (const MemoryEvent& e : events) {
    while (cur + 1 < positions_.size() && positions_[cur + 1].time_s <= e.time_s) enter(++cur);
    const auto ti = static_cast<size_t>(e.tier);
    const auto ci = static_cast<size_t>(e.category);
    tier_sum[ti] = tier_sum[ti] - state_[ti][ci] + e.current;
    state_[ti][ci] = e.current;
    const ChangePoint& cp = positions_[cur];
    const double rel = e.time_s - step_start_;
    if (e.current > s.peak[ti][ci].bytes) s.peak[ti][ci] = {e.current, rel, cp.phase, cp.unit};
    if (tier_sum[ti] > s.tier_peak[ti].bytes)
      s.tier_peak[ti] = {tier_sum[ti], rel, cp.phase, cp.unit};
    size_t& seg_peak = s.phases.back().peak[ti][ci];
    seg_peak = std::max(seg_peak, e.current);
    if (cp.unit >= 0) {
      size_t& unit_peak = units[cp.unit].peak[ti];
      unit_peak = std::max(unit_peak, tier_sum[ti]);
    }
  }
  while (cur + 1 < positions_.size()) enter(++cur);
  if (positions_[cur].unit >= 0)
    units[positions_[cur].unit].seconds += end - positions_[cur].time_s;
  s.phases.back().end_s = end - step_start_;
  s.phases.back().at_end = state_;
  s.at_end = state_;
  for (auto& [id, u] : units) s.units.push_back(u);

  const auto totals = options_.activities->totals();
  // Busy time of an activity begun before the step (a prefetch) counts in the step that records
  // it; bounded by the step's wall so a share of the step never exceeds it.
  for (size_t t = 0; t < kNumTracks; ++t)
    s.tracks[t] = {totals[t].seconds - tracks_at_start_[t].seconds,
                   totals[t].bytes - tracks_at_start_[t].bytes,
                   totals[t].count - tracks_at_start_[t].count,
                   std::min(totals[t].busy_s - tracks_at_start_[t].busy_s, end - step_start_)};
  s.process_rss = process_rss_bytes();
  s.host_available = read_host_memory().available;
  if (options_.driver_device_used) s.driver_device_used = options_.driver_device_used();

  if (options_.timeline) {
    keep_timeline(events);
    Timeline& tl = profile_.timeline;
    tl.positions.insert(tl.positions.end(), positions_.begin(), positions_.end());
    for (const Activity& a : options_.activities->take_activities())
      tl.activities.push_back({a.start_s, a.end_s, a.track, a.name ? a.name : "", a.unit, a.bytes});
    tl.events_dropped = options_.tracker->timeline_dropped() - dropped_at_start_;
    tl.activities_dropped = options_.activities->dropped() - activities_dropped_at_start_;
  }
  profile_.steps.push_back(std::move(s));
  in_step_ = false;
}

void ProfileRecorder::write_json(const std::string& path) const {
  write_profile(profile_, path);
}

}  // namespace tierzero::profile
