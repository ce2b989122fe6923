// Copies and collectives timed where they run while profiling: on their stream, by the device
// timeline's events (device_timeline.hpp), not by the host's clock around their issue and the
// wait for them, which on a GPU measures neither. Without a timeline, outside a step, or for a
// collective on the host (MPI's engine thread) the callers keep their host records. Internal to
// the zero layer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>

#include "tierzero/comm/communicator.hpp"
#include "tierzero/device/device_timeline.hpp"

namespace tierzero::zero {

// A span of work on one stream, open from construction until close(); a no-op span when there is
// no timeline or no step is open (timed() false: the caller records on the host instead).
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

struct IssuedCollective {
  comm::CommRequest request;
  bool timed = false;  // on the device timeline: the caller records nothing for it
};

// Issues a collective (`issue`, which passes `ready` on) so that, while profiling with a group
// on a device stream (NCCL), its span there starts once `ready` has completed (the span would
// otherwise include the wait for the producer) and ends where the collective does.
IssuedCollective issue_collective(DeviceTimeline* timeline, comm::Communicator& group, Event* ready,
                                  const char* name, int64_t unit, size_t bytes,
                                  const std::function<comm::CommRequest()>& issue);

}  // namespace tierzero::zero
