// ActivityLog: what the run spent its time on, per track (compute, collectives, copies between
// host and device, NVMe reads and writes, the optimizer), with the bytes each activity moved.
// Every layer that does such work reports here (the partition store, the offload engine's users,
// the trainer), so the profile layer can total time and bytes per link for each step and, when
// asked, export every activity as a trace. Totals are always kept (a few atomic adds); single
// activities are kept only while recording is on, so a long run stays small unless a trace is
// wanted. Thread-safe.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <vector>

namespace tierzero {

enum class Track : uint8_t {
  compute = 0,     // forward / backward kernels
  collective,      // all-gather, reduce-scatter, all-reduce (the network link)
  host_to_device,  // copies host -> device (the PCIe link, down)
  device_to_host,  // copies device -> host (the PCIe link, up)
  nvme_read,       // NVMe -> host
  nvme_write,      // host -> NVMe
  optimizer,       // optimizer updates (device or CPU)
  stall,           // the training thread waiting for data it needs now
};
constexpr size_t kNumTracks = 8;
const char* track_name(Track t);

struct Activity {
  double start_s = 0.0;  // monotonic_seconds()
  double end_s = 0.0;
  Track track = Track::compute;
  const char* name = nullptr;  // static string: "all_gather", "forward", ...
  int64_t unit = -1;           // the store's unit, or -1
  size_t bytes = 0;            // bytes moved (0 for compute)
};

struct TrackTotals {
  double seconds = 0.0;  // summed over activities (several threads or streams add up)
  size_t bytes = 0;
  size_t count = 0;
  // Time the track was busy: the union of its intervals, overlaps counted once, whatever order
  // they are recorded in (a device timeline records a step's spans at its end, a pipeline its
  // sends when it sees them done), for records at most ActivityLog::kBusyHorizonS late.
  double busy_s = 0.0;
};

class ActivityLog {
 public:
  static ActivityLog& global();

  // Adds to the track's totals; keeps the activity itself while recording.
  void record(Track track, const char* name, double start_s, double end_s, size_t bytes = 0,
              int64_t unit = -1);

  void set_recording(bool on);  // default off
  bool recording() const;
  // Bounds the kept activities (oldest dropped first) so a forgotten recording cannot grow
  // without limit; 0 means unbounded. Default 1,000,000.
  void set_capacity(size_t activities);

  std::array<TrackTotals, kNumTracks> totals() const;
  std::vector<Activity> activities() const;  // kept ones, in record order
  std::vector<Activity> take_activities();   // and forget them
  size_t dropped() const;                    // kept ones dropped because of the capacity
  void reset();                              // totals and activities

  static constexpr double kBusyHorizonS = 600.0;
  static constexpr size_t kMaxBusyIntervals = 8192;

 private:
  mutable std::mutex mutex_;
  std::array<TrackTotals, kNumTracks> totals_{};
  // Per track, the union of its recent intervals: disjoint, by start (start -> end). Intervals
  // ending kBusyHorizonS before the track's latest end, or past the oldest kMaxBusyIntervals,
  // are forgotten: a record later than that may count twice where it overlaps them.
  std::array<std::map<double, double>, kNumTracks> busy_{};
  std::array<double, kNumTracks> latest_end_{};
  std::vector<Activity> kept_;
  bool recording_ = false;
  size_t capacity_ = 1000000;
  size_t dropped_ = 0;
};

// Records one activity from construction to destruction (or to finish()).
class ActivityScope {
 public:
  ActivityScope(Track track, const char* name, size_t bytes = 0, int64_t unit = -1,
                ActivityLog& log = ActivityLog::global());
  ~ActivityScope() { finish(); }
  ActivityScope(const ActivityScope&) = delete;
  ActivityScope& operator=(const ActivityScope&) = delete;
  void finish();

 private:
  ActivityLog& log_;
  Track track_;
  const char* name_;
  size_t bytes_;
  int64_t unit_;
  double start_s_;
  bool done_ = false;
};

}  // namespace tierzero
