// CommStagingPool: the comm layer's staging buffers as PinnedBuffers of the store's pool.
#include "tierzero/zero/comm_staging_pool.hpp"

#include "tierzero/core/error.hpp"

namespace tierzero::zero {

CommStagingPool::CommStagingPool(offload::HostPool& pool) : pool_(pool) {
  comm::set_host_staging_allocator(this);
}

CommStagingPool::~CommStagingPool() {
  comm::set_host_staging_allocator(nullptr);
}

void* CommStagingPool::allocate(size_t bytes, const char* label) {
  offload::PinnedBuffer block = pool_.allocate(bytes, Category::comm, label);
  void* ptr = block.data();
  std::lock_guard<std::mutex> lock(mutex_);
  held_.emplace(ptr, std::move(block));
  return ptr;
}

void CommStagingPool::release(void* ptr) {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto it = held_.find(ptr);
  TZ_CHECK(it != held_.end(), "comm staging released a block the pool did not give",
           "a TierZero bug: report it");
  held_.erase(it);
}

}  // namespace tierzero::zero
