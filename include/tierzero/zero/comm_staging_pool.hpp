// CommStagingPool: while it lives, the comm layer's host staging (MPI's copies of device buffers,
// fp32 widening of 16-bit reductions) comes from a pinned host pool, so it counts against the
// run's host budget like every other large host buffer, and a message too large for the budget
// is an Error naming the staging buffer instead of memory taken outside the budget.
#pragma once

#include <mutex>
#include <unordered_map>

#include "tierzero/comm/host_staging.hpp"
#include "tierzero/offload/host_pool.hpp"

namespace tierzero::zero {

class CommStagingPool final : public comm::HostStagingAllocator {
 public:
  // Sets itself as the process's staging source; `pool` must outlive it. No communication may be
  // in flight while it is made or destroyed (set_host_staging_allocator's rule).
  explicit CommStagingPool(offload::HostPool& pool);
  ~CommStagingPool() override;  // back to the heap (if still the source); blocks returned
  CommStagingPool(const CommStagingPool&) = delete;
  CommStagingPool& operator=(const CommStagingPool&) = delete;

  void* allocate(size_t bytes, const char* label) override;
  void release(void* ptr) override;

 private:
  offload::HostPool& pool_;
  std::mutex mutex_;  // engine threads of several communicators allocate
  std::unordered_map<void*, offload::PinnedBuffer> held_;
};

}  // namespace tierzero::zero
