// DeviceTimeline (device_timeline.hpp): events around device work, turned into activity records.
#include "tierzero/device/device_timeline.hpp"

#include "tierzero/core/error.hpp"
#include "tierzero/core/timer.hpp"

namespace tierzero {

Event& DeviceTimeline::next_event() {
  if (used_ == events_.size()) events_.push_back(device_.create_event());
  return *events_[used_++];
}

void DeviceTimeline::begin_step(Stream& stream) {
  used_ = 0;
  spans_.clear();
  anchor_ = &next_event();
  anchor_->record(stream);
  // The stream is idle, so the device reaches the anchor at once: its host time is now.
  anchor_host_s_ = monotonic_seconds();
}

size_t DeviceTimeline::open(Stream& stream) {
  if (anchor_ == nullptr) return kUntimed;  // outside a step (an evaluation between steps)
  Event& start = next_event();
  start.record(stream);
  spans_.push_back(Span{&start});
  return spans_.size() - 1;
}

void DeviceTimeline::close(size_t span, Stream& stream, Track track, const char* name, int64_t unit,
                           size_t bytes) {
  if (span == kUntimed) return;
  TZ_CHECK(span < spans_.size() && spans_[span].end == nullptr,
           "DeviceTimeline::close of a span that is not open",
           "internal error: close each span opened this step once");
  Event& end = next_event();
  end.record(stream);
  Span& s = spans_[span];
  s.end = &end;
  s.track = track;
  s.name = name;
  s.unit = unit;
  s.bytes = bytes;
}

size_t DeviceTimeline::flush() {
  size_t n = 0;
  for (const Span& s : spans_) {
    if (s.end == nullptr) continue;
    // A copy or a collective issued late in the step may still run on its own stream.
    if (!s.end->query()) s.end->synchronize();
    const double start = anchor_host_s_ + s.start->elapsed_ms_since(*anchor_) * 1e-3;
    const double end = anchor_host_s_ + s.end->elapsed_ms_since(*anchor_) * 1e-3;
    ActivityLog::global().record(s.track, s.name, start, end, s.bytes, s.unit);
    ++n;
  }
  spans_.clear();
  anchor_ = nullptr;
  used_ = 0;
  return n;
}

}  // namespace tierzero
