// ProfileRecorder: turns the memory tracker's event timeline and the activity log's totals into
// a Profile, one step at a time. The trainer tells it where the training thread is (phase, unit)
// through cheap calls that only append a change point; at end_step the recorder drains the
// tracker's events, replays them against those change points, and keeps per-step aggregates
// (current and peak per tier and category with the phase and unit at each peak, per-phase and
// per-unit peaks, time and bytes per track). So the profile stays O(steps), and the tracker's
// timeline stays bounded, unless the fine-grained timeline is asked for.
// Not thread-safe: one training thread calls it (allocators on other threads report to the
// tracker, which is).
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "tierzero/core/activity_log.hpp"
#include "tierzero/core/memory_tracker.hpp"
#include "tierzero/profile/profile.hpp"

namespace tierzero::profile {

struct RecorderOptions {
  // Keep every memory event and activity (for the trace and an exact chart). Off: aggregates only.
  bool timeline = false;
  MemoryTracker* tracker = &MemoryTracker::global();
  ActivityLog* activities = &ActivityLog::global();
  // Device bytes in use as the driver reports them (on CUDA: total - free from cudaMemGetInfo),
  // or -1 when unknown. Called at each end_step when set. The profile layer has no CUDA code.
  std::function<int64_t()> driver_device_used;
};

class ProfileRecorder {
 public:
  explicit ProfileRecorder(RecorderOptions options = {});
  ~ProfileRecorder();  // stops the activity log's recording if this recorder started it
  ProfileRecorder(const ProfileRecorder&) = delete;
  ProfileRecorder& operator=(const ProfileRecorder&) = delete;

  // Host total/available memory are read here from /proc/meminfo when `run` leaves them 0.
  void set_run_info(RunInfo run);
  void set_placements(std::vector<PlacementRow> rows);
  void set_predicted(const TierCategoryBytes& bytes);

  void begin_step(int64_t step);  // resets the position to (other, no unit)
  void set_phase(Phase phase);
  void set_unit(int64_t unit);  // -1: no unit
  void end_step(const StepCounters& counters);

  const Profile& profile() const { return profile_; }
  void write_json(const std::string& path) const;

 private:
  void keep_timeline(const std::vector<MemoryEvent>& events);

  RecorderOptions options_;
  Profile profile_;
  TierCategoryBytes state_{};       // bytes per (tier, category) as the replay has reached
  bool started_recording_ = false;  // the activity log was not recording before us
  bool in_step_ = false;
  int64_t step_ = 0;
  double step_start_ = 0.0;
  std::array<TrackTotals, kNumTracks> tracks_at_start_{};
  std::vector<ChangePoint> positions_;  // this step's change points; [0] is the step start
  Phase phase_ = Phase::other;
  int64_t unit_ = -1;
  size_t dropped_at_start_ = 0;             // the tracker's drop count when recording began
  size_t activities_dropped_at_start_ = 0;  // the activity log's
};

}  // namespace tierzero::profile
