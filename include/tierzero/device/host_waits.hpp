// Host waits: how many times the calling thread has blocked on device work — a Stream's or an
// Event's synchronize(), on any backend. The step counts those of its training thread
// (StepRecord::host_waits), because on a GPU each one drains the queue of work the host had
// issued ahead, and an asynchronous step keeps them to the one read of what the host needs (the
// loss, the gradient norm, the overflow flag). Counted at the call, so the CPU's inline default
// stream (nothing to wait for) counts where a CUDA stream would block.
#pragma once

#include <cstddef>

namespace tierzero {

size_t host_waits_on_this_thread();
// Backends call this from every Stream::synchronize and Event::synchronize.
void count_host_wait();

}  // namespace tierzero
