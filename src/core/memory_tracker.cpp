// Memory tracker bookkeeping. A release of more bytes than are held is a bug in an allocator,
// reported as an Error rather than wrapped silently into a huge number.
#include "tierzero/core/memory_tracker.hpp"

#include <algorithm>
#include <cstdio>

#include "tierzero/core/error.hpp"
#include "tierzero/core/timer.hpp"

namespace tierzero {

const char* tier_name(Tier t) {
  static const char* names[] = {"device", "host", "nvme"};
  return names[static_cast<size_t>(t)];
}

const char* category_name(Category c) {
  static const char* names[] = {"param", "grad", "optimizer", "activation",
                                "comm",  "io",   "workspace", "activation_checkpoint"};
  return names[static_cast<size_t>(c)];
}

MemoryTracker& MemoryTracker::global() {
  static MemoryTracker tracker;
  return tracker;
}

void MemoryTracker::on_alloc(Tier t, Category c, size_t bytes, const char* label) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto ti = static_cast<size_t>(t);
  auto ci = static_cast<size_t>(c);
  size_t& cur = current_[ti][ci];
  cur += bytes;
  peak_[ti][ci] = std::max(peak_[ti][ci], cur);
  tier_current_[ti] += bytes;
  tier_peak_[ti] = std::max(tier_peak_[ti], tier_current_[ti]);
  if (timeline_enabled_)
    keep_event({monotonic_seconds(), t, c, static_cast<int64_t>(bytes), cur, label});
}

void MemoryTracker::on_free(Tier t, Category c, size_t bytes, const char* label) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto ti = static_cast<size_t>(t);
  auto ci = static_cast<size_t>(c);
  size_t& cur = current_[ti][ci];
  if (bytes > cur)
    TZ_THROW("memory tracker: release of " + std::to_string(bytes) + " bytes of " +
                 category_name(c) + " on tier " + tier_name(t) + " but only " +
                 std::to_string(cur) + " are held",
             "an allocator released a block twice or with the wrong tag");
  cur -= bytes;
  tier_current_[ti] -= bytes;
  if (timeline_enabled_)
    keep_event({monotonic_seconds(), t, c, -static_cast<int64_t>(bytes), cur, label});
}

size_t MemoryTracker::current(Tier t, Category c) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return current_[static_cast<size_t>(t)][static_cast<size_t>(c)];
}

size_t MemoryTracker::peak(Tier t, Category c) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return peak_[static_cast<size_t>(t)][static_cast<size_t>(c)];
}

size_t MemoryTracker::current(Tier t) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return tier_current_[static_cast<size_t>(t)];
}

size_t MemoryTracker::peak(Tier t) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return tier_peak_[static_cast<size_t>(t)];
}

void MemoryTracker::set_timeline_enabled(bool on) {
  std::lock_guard<std::mutex> lock(mutex_);
  timeline_enabled_ = on;
}

std::vector<MemoryEvent> MemoryTracker::timeline() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return timeline_;
}

std::vector<MemoryEvent> MemoryTracker::take_timeline() {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<MemoryEvent> out;
  out.swap(timeline_);
  return out;
}

void MemoryTracker::set_timeline_capacity(size_t events) {
  std::lock_guard<std::mutex> lock(mutex_);
  timeline_capacity_ = events;
}

size_t MemoryTracker::timeline_dropped() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return timeline_dropped_;
}

void MemoryTracker::keep_event(const MemoryEvent& e) {
  if (timeline_capacity_ != 0 && timeline_.size() >= timeline_capacity_) {
    // Drop the oldest half at once: amortised O(1) per event, and the newest stay. Each event
    // carries its category's current bytes, so a reader that lost some still sees true levels.
    const size_t drop = timeline_.size() / 2 + 1;
    timeline_.erase(timeline_.begin(), timeline_.begin() + static_cast<std::ptrdiff_t>(drop));
    timeline_dropped_ += drop;
  }
  timeline_.push_back(e);
}

void MemoryTracker::reset_peaks() {
  std::lock_guard<std::mutex> lock(mutex_);
  peak_ = current_;
  tier_peak_ = tier_current_;
}

void MemoryTracker::reset() {
  std::lock_guard<std::mutex> lock(mutex_);
  current_ = {};
  peak_ = {};
  tier_current_ = {};
  tier_peak_ = {};
  timeline_.clear();
  timeline_dropped_ = 0;
}

std::string format_bytes(size_t bytes) {
  static const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  size_t u = 0;
  while (v >= 1024.0 && u < 4) {
    v /= 1024.0;
    ++u;
  }
  char buf[32];
  if (u == 0)
    std::snprintf(buf, sizeof buf, "%zu B", bytes);
  else
    std::snprintf(buf, sizeof buf, "%.1f %s", v, units[u]);
  return buf;
}

}  // namespace tierzero
