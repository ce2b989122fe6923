// DeviceSpan and issue_collective (device_spans.hpp).
#include "device_spans.hpp"

#include "tierzero/core/activity_log.hpp"
#include "tierzero/core/timer.hpp"

namespace tierzero::zero {

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

IssuedCollective issue_collective(DeviceTimeline* timeline, comm::Communicator& group, Event* ready,
                                  const char* name, int64_t unit, size_t bytes,
                                  const std::function<comm::CommRequest()>& issue) {
  Stream* stream = timeline != nullptr ? group.device_stream() : nullptr;
  if (stream == nullptr) return {issue(), false};
  // The collective waits for `ready` on its stream anyway (a second wait there is free): waiting
  // before the span opens keeps the producer's time out of it.
  if (ready != nullptr) ready->make_wait(*stream);
  DeviceSpan span(timeline, *stream);
  IssuedCollective out{issue(), span.timed()};
  span.close(Track::collective, name, unit, bytes);
  return out;
}

}  // namespace tierzero::zero
