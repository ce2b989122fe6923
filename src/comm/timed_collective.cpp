// issue_collective and run_collective (timed_collective.hpp).
#include "tierzero/comm/timed_collective.hpp"

#include <optional>

#include "tierzero/core/activity_log.hpp"
#include "tierzero/core/timer.hpp"
#include "tierzero/device/device_span.hpp"

namespace tierzero::comm {

namespace {

// The group's device stream while profiling, made to wait for `ready` first (the collective waits
// for it there anyway; a second wait is free); null: the host's clock times it.
Stream* timing_stream(DeviceTimeline* timeline, Communicator& group, Event* ready) {
  Stream* stream = timeline != nullptr ? group.device_stream() : nullptr;
  if (stream != nullptr && ready != nullptr) ready->make_wait(*stream);
  return stream;
}

}  // namespace

IssuedCollective issue_collective(DeviceTimeline* timeline, Communicator& group, Event* ready,
                                  const char* name, int64_t unit, size_t bytes,
                                  const std::function<CommRequest()>& issue) {
  Stream* stream = timing_stream(timeline, group, ready);
  if (stream == nullptr) return {issue(), false};
  DeviceSpan span(timeline, *stream);
  IssuedCollective out{issue(), span.timed()};
  span.close(Track::collective, name, unit, bytes);
  return out;
}

void run_collective(DeviceTimeline* timeline, Communicator& group, Event* ready, const char* name,
                    size_t bytes, const std::function<void()>& run) {
  Stream* stream = timing_stream(timeline, group, ready);
  std::optional<DeviceSpan> span;
  if (stream != nullptr) span.emplace(timeline, *stream);
  const double t0 = monotonic_seconds();
  run();
  if (span && span->timed())
    span->close(Track::collective, name, -1, bytes);
  else
    ActivityLog::global().record(Track::collective, name, t0, monotonic_seconds(), bytes);
}

}  // namespace tierzero::comm
