// ActivityLog: per-track time and byte totals, and a bounded list of activities while recording.
#include "tierzero/core/activity_log.hpp"

#include <algorithm>
#include <iterator>

#include "tierzero/core/timer.hpp"

namespace tierzero {

const char* track_name(Track t) {
  switch (t) {
    case Track::compute:
      return "compute";
    case Track::collective:
      return "collective";
    case Track::host_to_device:
      return "host_to_device";
    case Track::device_to_host:
      return "device_to_host";
    case Track::nvme_read:
      return "nvme_read";
    case Track::nvme_write:
      return "nvme_write";
    case Track::optimizer:
      return "optimizer";
    case Track::stall:
      return "stall";
  }
  return "?";
}

namespace {

// Adds [start, end) to `merged` (disjoint intervals, start -> end) and returns the part of it no
// interval there covered: what it adds to the union, whatever order the intervals come in.
double add_to_union(std::map<double, double>& merged, double start, double end) {
  if (!(end > start)) return 0.0;
  auto it = merged.upper_bound(start);
  if (it != merged.begin() && std::prev(it)->second >= start) --it;  // one reaching into it
  double added = end - start, lo = start, hi = end;
  while (it != merged.end() && it->first <= end) {  // every interval touching [start, end)
    added -= std::min(it->second, end) - std::max(it->first, start);
    lo = std::min(lo, it->first);
    hi = std::max(hi, it->second);
    it = merged.erase(it);
  }
  merged.emplace(lo, hi);
  return added > 0.0 ? added : 0.0;
}

// Forgets the intervals that ended long before the latest, and the oldest past the cap.
void forget_old(std::map<double, double>& merged, double latest_end) {
  while (!merged.empty() && (merged.size() > ActivityLog::kMaxBusyIntervals ||
                             merged.begin()->second < latest_end - ActivityLog::kBusyHorizonS))
    merged.erase(merged.begin());
}

}  // namespace

ActivityLog& ActivityLog::global() {
  static ActivityLog log;
  return log;
}

void ActivityLog::record(Track track, const char* name, double start_s, double end_s, size_t bytes,
                         int64_t unit) {
  std::lock_guard<std::mutex> lock(mutex_);
  TrackTotals& t = totals_[static_cast<size_t>(track)];
  t.seconds += end_s > start_s ? end_s - start_s : 0.0;
  const auto i = static_cast<size_t>(track);
  t.busy_s += add_to_union(busy_[i], start_s, end_s);
  latest_end_[i] = std::max(latest_end_[i], end_s);
  forget_old(busy_[i], latest_end_[i]);
  t.bytes += bytes;
  ++t.count;
  if (!recording_) return;
  if (capacity_ != 0 && kept_.size() >= capacity_) {
    // Drop the oldest half at once: amortised O(1) per record, and the newest stay.
    const size_t drop = kept_.size() / 2 + 1;
    kept_.erase(kept_.begin(), kept_.begin() + static_cast<std::ptrdiff_t>(drop));
    dropped_ += drop;
  }
  kept_.push_back(Activity{start_s, end_s, track, name, unit, bytes});
}

void ActivityLog::set_recording(bool on) {
  std::lock_guard<std::mutex> lock(mutex_);
  recording_ = on;
}

bool ActivityLog::recording() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return recording_;
}

void ActivityLog::set_capacity(size_t activities) {
  std::lock_guard<std::mutex> lock(mutex_);
  capacity_ = activities;
}

std::array<TrackTotals, kNumTracks> ActivityLog::totals() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return totals_;
}

std::vector<Activity> ActivityLog::activities() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return kept_;
}

std::vector<Activity> ActivityLog::take_activities() {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<Activity> out;
  out.swap(kept_);
  return out;
}

size_t ActivityLog::dropped() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return dropped_;
}

void ActivityLog::reset() {
  std::lock_guard<std::mutex> lock(mutex_);
  totals_ = {};
  busy_ = {};
  latest_end_ = {};
  kept_.clear();
  dropped_ = 0;
}

ActivityScope::ActivityScope(Track track, const char* name, size_t bytes, int64_t unit,
                             ActivityLog& log)
    : log_(log),
      track_(track),
      name_(name),
      bytes_(bytes),
      unit_(unit),
      start_s_(monotonic_seconds()) {}

void ActivityScope::finish() {
  if (done_) return;
  done_ = true;
  log_.record(track_, name_, start_s_, monotonic_seconds(), bytes_, unit_);
}

}  // namespace tierzero
