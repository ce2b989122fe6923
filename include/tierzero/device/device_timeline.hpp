// DeviceTimeline: when device work ran, from events recorded around it on its stream, so that a
// profile shows the device's compute as the device ran it. On a GPU the host only issues the
// kernels: the host's clock around a forward measures the issue, not the work. Each step the
// timeline records an anchor event on the stream while it is idle (after the previous step's
// synchronize), then a pair of events around each span of work; once the step has synchronized,
// flush() turns every span into an ActivityLog record on the host's clock (the anchor's host time
// plus the device time since the anchor, Event::elapsed_ms_since). On the CPU backend's inline
// default stream events complete as they are recorded, so the spans are the host's own intervals
// there; on its worker streams they are when the worker ran the work.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <vector>

#include "tierzero/core/activity_log.hpp"
#include "tierzero/device/device.hpp"

namespace tierzero {

class DeviceTimeline {
 public:
  explicit DeviceTimeline(Device& device) : device_(device) {}

  // Starts a step on `stream`, which has no work pending (a synchronize just returned).
  void begin_step(Stream& stream);
  // A span of work issued on `stream` between open() and close(). name: a static string.
  // Outside a step (before begin_step, after flush) open() returns kUntimed and close() of it
  // does nothing: work between steps (an evaluation) is not timed.
  static constexpr size_t kUntimed = SIZE_MAX;
  size_t open(Stream& stream);
  void close(size_t span, Stream& stream, Track track, const char* name, int64_t unit = -1,
             size_t bytes = 0);
  // After the step's stream has synchronized: records every closed span (in the order opened)
  // and forgets them; returns how many. Spans left open are dropped. A span on another stream
  // (a copy, a collective) still running is waited for first.
  size_t flush();

 private:
  struct Span {
    Event* start = nullptr;
    Event* end = nullptr;
    Track track = Track::compute;
    const char* name = nullptr;
    int64_t unit = -1;
    size_t bytes = 0;
  };
  Event& next_event();  // from the pool, which grows to a step's worth and is reused

  Device& device_;
  std::vector<std::unique_ptr<Event>> events_;
  size_t used_ = 0;  // events of the pool taken this step
  std::vector<Span> spans_;
  Event* anchor_ = nullptr;
  double anchor_host_s_ = 0.0;  // monotonic_seconds() when the anchor was recorded
};

}  // namespace tierzero
