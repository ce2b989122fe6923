// DeviceSpan: a span of device work timed where it runs while profiling, by the device timeline's
// events on its stream (device_timeline.hpp), not by the host's clock around its issue and the
// wait for it, which on a GPU measures neither. Without a timeline, or outside a step, it is a
// no-op and the caller keeps its host record (close_copy makes that record itself).
#pragma once

#include <cstddef>
#include <cstdint>

#include "tierzero/core/activity_log.hpp"
#include "tierzero/device/device.hpp"
#include "tierzero/device/device_timeline.hpp"

namespace tierzero {

// Open from construction until close(); timed() false: no timeline, or no step is open.
class DeviceSpan {
 public:
  DeviceSpan(DeviceTimeline* timeline, Stream& stream);
  bool timed() const { return span_ != DeviceTimeline::kUntimed; }
  // Once: the work issued on the stream since construction is the span's.
  void close(Track track, const char* name, int64_t unit, size_t bytes);
  // For a copy just issued on the stream, not waited for: close(), or untimed, its record on the
  // host's clock from its issue (`issued_s`) until the stream has run it (a host task behind it).
  void close_copy(Device& device, Track track, const char* name, int64_t unit, size_t bytes,
                  double issued_s);

 private:
  DeviceTimeline* timeline_;
  Stream& stream_;
  size_t span_ = DeviceTimeline::kUntimed;
  bool closed_ = false;
};

}  // namespace tierzero
