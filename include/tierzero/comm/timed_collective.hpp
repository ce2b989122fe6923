// Collectives recorded in the ActivityLog (the profile's network link) where they ran: while
// profiling with a group on a device stream (NCCL), by the device timeline's events around the
// operation on that stream (device_span.hpp), opened once the event it waits for has completed
// (the span would otherwise include the wait for its producer); else on the host's clock, from
// the issue until the host saw it done, which for MPI (its engine thread) is when it ran.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>

#include "tierzero/comm/communicator.hpp"
#include "tierzero/device/device_timeline.hpp"

namespace tierzero::comm {

struct IssuedCollective {
  CommRequest request;
  bool timed = false;  // on the device timeline: the caller records nothing for it
};

// Issues an asynchronous collective (`issue`, which passes `ready` on), timed on the device when
// it can be; when not (timed false), the caller records it once it has waited for it.
IssuedCollective issue_collective(DeviceTimeline* timeline, Communicator& group, Event* ready,
                                  const char* name, int64_t unit, size_t bytes,
                                  const std::function<CommRequest()>& issue);

// Runs a blocking collective (`run`, which passes `ready` on) and records it: on the device
// timeline when it can be, else on the host's clock around the call.
void run_collective(DeviceTimeline* timeline, Communicator& group, Event* ready, const char* name,
                    size_t bytes, const std::function<void()>& run);

}  // namespace tierzero::comm
