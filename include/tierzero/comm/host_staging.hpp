// Where the MPI backend's host staging memory comes from. MPI moves host memory, so a device
// buffer is copied through a host buffer, and 16-bit reductions are widened to fp32 in one; these
// grow with the largest message (a gathered unit, a gradient bucket). By default they come from
// the heap; a run with a host memory budget sets an allocator that takes them from that budget,
// so they count against it and a message too large for it is an Error naming the buffer.
// comm knows nothing of tiers or pools: the allocator is the caller's.
#pragma once

#include <cstddef>

namespace tierzero::comm {

class HostStagingAllocator {
 public:
  virtual ~HostStagingAllocator() = default;
  // At least `bytes`, 64-byte aligned; throws Error when it cannot. `label` is a static string
  // naming the buffer ("comm send staging").
  virtual void* allocate(size_t bytes, const char* label) = 0;
  virtual void release(void* ptr) = 0;  // a pointer allocate returned
};

// Every staging buffer of this process (of every communicator) comes from `allocator` from now on
// (null: the heap again). Buffers held from the previous source are released first, so the
// previous allocator may go once this returns. Call it while no communication is in flight.
void set_host_staging_allocator(HostStagingAllocator* allocator);
// The allocator set now (null: the heap).
HostStagingAllocator* host_staging_allocator();

}  // namespace tierzero::comm
