// DeviceSpan (device_span.hpp).
#include "tierzero/device/device_span.hpp"

#include "tierzero/core/timer.hpp"

namespace tierzero {

DeviceSpan::DeviceSpan(DeviceTimeline* timeline, Stream& stream)
    : timeline_(timeline), stream_(stream) {
  if (timeline_ != nullptr) span_ = timeline_->open(stream_);
}

void DeviceSpan::close(Track track, const char* name, int64_t unit, size_t bytes) {
  if (!timed() || closed_) return;
  timeline_->close(span_, stream_, track, name, unit, bytes);
  closed_ = true;
}

void DeviceSpan::close_copy(Device& device, Track track, const char* name, int64_t unit,
                            size_t bytes, double issued_s) {
  if (timed()) {
    close(track, name, unit, bytes);
    return;
  }
  device.host_task(stream_, [=] {
    ActivityLog::global().record(track, name, issued_s, monotonic_seconds(), bytes, unit);
  });
}

}  // namespace tierzero
