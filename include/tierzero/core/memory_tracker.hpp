// MemoryTracker: current and peak bytes per (tier, category), plus an event timeline.
// Every allocator reports here, so a run can explain each byte it held; the profile and report
// tools read the timeline. Thread-safe: I/O and copy workers allocate too. The timeline is
// bounded: the profile recorder drains it every step (take_timeline), and a capacity drops the
// oldest events when nobody drains it, so a long run without profiling cannot grow without limit.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace tierzero {

enum class Tier : uint8_t { device = 0, host = 1, nvme = 2 };
// activation_checkpoint: the blocks' saved inputs under activation checkpointing when they are
// placed on a tier of their own (device slots, pinned host copies, NVMe extents).
enum class Category : uint8_t {
  param = 0,
  grad,
  optimizer,
  activation,
  comm,
  io,
  workspace,
  activation_checkpoint
};
constexpr size_t kNumTiers = 3;
constexpr size_t kNumCategories = 8;

const char* tier_name(Tier t);
const char* category_name(Category c);

struct MemoryEvent {
  double time_s;  // monotonic_seconds() at the event
  Tier tier;
  Category category;
  int64_t delta;      // bytes; positive for allocation, negative for release
  size_t current;     // bytes held in (tier, category) after the event
  const char* label;  // static string naming who allocated (may be null)
};

class MemoryTracker {
 public:
  // The process-wide tracker that allocators use unless given another.
  static MemoryTracker& global();

  void on_alloc(Tier t, Category c, size_t bytes, const char* label = nullptr);
  void on_free(Tier t, Category c, size_t bytes, const char* label = nullptr);

  size_t current(Tier t, Category c) const;
  size_t peak(Tier t, Category c) const;
  size_t current(Tier t) const;  // summed over categories
  size_t peak(Tier t) const;     // peak of the per-tier sum, not the sum of peaks

  void set_timeline_enabled(bool on);
  std::vector<MemoryEvent> timeline() const;  // a copy of the events kept so far
  std::vector<MemoryEvent> take_timeline();   // the events kept so far, and forget them
  // Bounds the kept events (the oldest half is dropped when full); 0 means unbounded.
  // Default 1,000,000 (about 40 MB).
  void set_timeline_capacity(size_t events);
  size_t timeline_dropped() const;  // events dropped because of the capacity
  void reset_peaks();
  void reset();  // forget everything (tests)

 private:
  mutable std::mutex mutex_;
  std::array<std::array<size_t, kNumCategories>, kNumTiers> current_{};
  std::array<std::array<size_t, kNumCategories>, kNumTiers> peak_{};
  std::array<size_t, kNumTiers> tier_current_{};
  std::array<size_t, kNumTiers> tier_peak_{};
  bool timeline_enabled_ = true;
  std::vector<MemoryEvent> timeline_;
  size_t timeline_capacity_ = 1000000;
  size_t timeline_dropped_ = 0;

  void keep_event(const MemoryEvent& e);  // with mutex_ held
};

std::string format_bytes(size_t bytes);  // "12.3 MiB"

}  // namespace tierzero
