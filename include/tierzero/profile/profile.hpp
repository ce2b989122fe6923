// The run profile: what a run held on each tier and category, step by step, where its time went,
// and (optionally) every memory event and activity. ProfileRecorder fills it during a run;
// read_profile / write_profile move it to and from JSON; the report and the trace exporter read
// it. Its size is O(steps x (tiers x categories + phases + units)) unless the fine-grained
// timeline was asked for. Plain data only: the profile layer knows nothing of GPT.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "tierzero/core/activity_log.hpp"
#include "tierzero/core/memory_tracker.hpp"

namespace tierzero::profile {

enum class Phase : uint8_t { forward = 0, backward, optimizer, eval, other };
constexpr size_t kNumPhases = 5;
const char* phase_name(Phase p);
Phase phase_from_name(const std::string& name);  // throws Error on an unknown name

// Bytes per (tier, category), indexed [tier][category].
using TierCategoryBytes = std::array<std::array<size_t, kNumCategories>, kNumTiers>;
size_t tier_total(const TierCategoryBytes& b, Tier t);

// Who the run was: free-form enough for any trainer, typed where the report computes with it.
struct RunInfo {
  std::string model;       // "gpt2", "custom d4 h2 c64", ...
  int64_t parameters = 0;  // model parameters
  int ranks = 1;           // world size
  int rank = 0;            // the rank that wrote this profile
  // The same on every rank of one run and different between runs (the trainer draws it on rank 0
  // and broadcasts it), so a report over several profiles can tell a mixed set; "" when unknown
  // (profiles written before it existed).
  std::string run_id;
  std::string host;           // the machine the rank ran on (its clock is the one the times are on)
  int stage = 0;              // ZeRO stage
  std::string device;         // "cpu", "cuda:0"
  size_t device_budget = 0;   // bytes the device tier may use; 0 when unlimited/unknown
  size_t host_total = 0;      // /proc/meminfo MemTotal, read when the recorder started
  size_t host_available = 0;  // /proc/meminfo MemAvailable, read when the recorder started
  std::map<std::string, std::string> extra;  // anything else the trainer wants shown
  bool operator==(const RunInfo&) const = default;
};

// Where one unit's states live (one row of the placement table).
struct PlacementRow {
  std::string unit;  // "block 3", "embeddings"
  size_t numel = 0;  // parameters in the unit
  std::string param_tier;
  std::string grad_tier;
  std::string optimizer_tier;
  bool operator==(const PlacementRow&) const = default;
};

// The training thread's position: set by set_phase / set_unit, used to attribute peaks.
struct ChangePoint {
  double time_s = 0.0;  // monotonic_seconds()
  Phase phase = Phase::other;
  int64_t unit = -1;  // -1: no unit
  bool operator==(const ChangePoint&) const = default;
};

// A peak and where the training thread was when it was first reached.
struct PeakAt {
  size_t bytes = 0;
  double time_s = 0.0;  // seconds since the step began
  Phase phase = Phase::other;
  int64_t unit = -1;
  bool operator==(const PeakAt&) const = default;
};

// One stretch of a step in one phase (consecutive set_phase calls with the same phase merge).
struct PhaseSegment {
  Phase phase = Phase::other;
  double start_s = 0.0;  // seconds since the step began
  double end_s = 0.0;
  TierCategoryBytes peak{};    // highest bytes per (tier, category) within the segment
  TierCategoryBytes at_end{};  // bytes when the segment ended
  bool operator==(const PhaseSegment&) const = default;
};

// A unit while it was the current one (summed over the step).
struct UnitStat {
  int64_t unit = -1;
  double seconds = 0.0;                  // time it was current
  std::array<size_t, kNumTiers> peak{};  // highest per-tier bytes while it was current
  bool operator==(const UnitStat&) const = default;
};

// What the trainer counts itself and hands to end_step.
struct StepCounters {
  size_t prefetch_hits = 0;      // gathers that found their data already fetched
  size_t on_demand_fetches = 0;  // gathers that had to fetch while the step waited
  double stall_s = 0.0;          // seconds the training thread waited for data
  double step_s = 0.0;           // the step's wall time; 0: the recorder measures it
  double loss = 0.0;
  size_t tokens = 0;  // tokens processed in the step
  // Gradient reductions (buckets) finished in the step: seconds in flight, summed, and the part
  // the training thread waited for them (exposed); the rest was hidden under the backward.
  size_t reductions = 0;
  double reduction_s = 0.0;
  double reduction_exposed_s = 0.0;
  bool operator==(const StepCounters&) const = default;
};

struct TrackStep {
  double seconds = 0.0;  // summed over the activities (overlapping ones add up)
  size_t bytes = 0;
  size_t count = 0;
  double busy_s = 0.0;  // the union of the activities' intervals within the step (<= its wall)
  bool operator==(const TrackStep&) const = default;
};

struct StepProfile {
  int64_t step = 0;
  double start_s = 0.0;  // monotonic_seconds() at begin_step
  double end_s = 0.0;    // at end_step
  StepCounters counters;
  TierCategoryBytes at_start{};  // bytes held when the step began
  TierCategoryBytes at_end{};    // bytes held when it ended
  std::array<std::array<PeakAt, kNumCategories>, kNumTiers> peak{};  // per (tier, category)
  std::array<PeakAt, kNumTiers> tier_peak{};   // peak of the tier's sum over categories
  std::array<TrackStep, kNumTracks> tracks{};  // time and bytes per activity track in the step
  std::vector<PhaseSegment> phases;
  std::vector<UnitStat> units;      // by unit id
  size_t process_rss = 0;           // /proc/self/statm resident bytes at step end
  size_t host_available = 0;        // /proc/meminfo MemAvailable at step end (0: unknown)
  int64_t driver_device_used = -1;  // device bytes in use as the driver reports; -1 unknown
  bool operator==(const StepProfile&) const = default;
};

// Memory event and activity as stored (labels become strings).
struct TimelineEvent {
  double time_s = 0.0;
  Tier tier = Tier::device;
  Category category = Category::param;
  int64_t delta = 0;
  size_t current = 0;
  std::string label;
  bool operator==(const TimelineEvent&) const = default;
};

struct TimelineActivity {
  double start_s = 0.0;
  double end_s = 0.0;
  Track track = Track::compute;
  std::string name;
  int64_t unit = -1;
  size_t bytes = 0;
  bool operator==(const TimelineActivity&) const = default;
};

// Every event, kept only when the recorder's `timeline` option is on.
struct Timeline {
  TierCategoryBytes initial{};  // bytes held when recording began
  std::vector<TimelineEvent> events;
  std::vector<TimelineActivity> activities;
  std::vector<ChangePoint> positions;  // every phase / unit change
  size_t events_dropped = 0;           // lost to the tracker's capacity before a drain
  size_t activities_dropped = 0;       // lost to the activity log's capacity
  bool operator==(const Timeline&) const = default;
};

struct Profile {
  RunInfo run;
  std::vector<PlacementRow> placements;
  bool has_predicted = false;
  TierCategoryBytes predicted{};  // from the estimator, when given
  std::vector<StepProfile> steps;
  bool has_timeline = false;
  Timeline timeline;
  bool operator==(const Profile&) const = default;
};

}  // namespace tierzero::profile
