// HostPool: mmap-backed, budgeted, size-classed cache of pinned host blocks (see host_pool.hpp).
// Blocks are not split; a request is served from a cached block at most 25% larger than its
// size class, and cached blocks are unmapped when the budget needs their room.
#include "tierzero/offload/host_pool.hpp"

#include <sys/mman.h>

#include <algorithm>
#include <string>

#include "tierzero/core/error.hpp"
#include "tierzero/core/log.hpp"
#include "tierzero/device/device.hpp"

namespace tierzero::offload {

PinnedBuffer::PinnedBuffer(PinnedBuffer&& o) noexcept
    : pool_(o.pool_),
      ptr_(o.ptr_),
      requested_(o.requested_),
      bytes_(o.bytes_),
      category_(o.category_),
      label_(o.label_) {
  o.pool_ = nullptr;
  o.ptr_ = nullptr;
  o.requested_ = o.bytes_ = 0;
}

PinnedBuffer& PinnedBuffer::operator=(PinnedBuffer&& o) noexcept {
  if (this != &o) {
    reset();
    pool_ = o.pool_;
    ptr_ = o.ptr_;
    requested_ = o.requested_;
    bytes_ = o.bytes_;
    category_ = o.category_;
    label_ = o.label_;
    o.pool_ = nullptr;
    o.ptr_ = nullptr;
    o.requested_ = o.bytes_ = 0;
  }
  return *this;
}

PinnedBuffer::~PinnedBuffer() {
  reset();
}

void PinnedBuffer::reset() {
  if (pool_ && ptr_) pool_->free_block(ptr_, bytes_, category_, label_);
  pool_ = nullptr;
  ptr_ = nullptr;
  requested_ = bytes_ = 0;
}

HostPool::HostPool(size_t budget_bytes, Device* device, MemoryTracker& tracker)
    : device_(device), tracker_(tracker) {
  TZ_CHECK(budget_bytes > 0, "host pool budget must be positive",
           "set a pinned-memory budget in bytes");
  stats_.budget = budget_bytes;
}

HostPool::~HostPool() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (stats_.in_use != 0) {
    log::error("host pool destroyed with " + format_bytes(stats_.in_use) +
               " still handed out; that memory is leaked rather than unmapped under its user");
  }
  release_cached_locked();
}

size_t HostPool::round_size(size_t bytes) {
  constexpr size_t kPage = 4096;
  constexpr size_t kLarge = size_t{1} << 20;
  if (bytes == 0) return kPage;
  if (bytes <= kLarge) return (bytes + kPage - 1) / kPage * kPage;
  return (bytes + kLarge - 1) / kLarge * kLarge;
}

void HostPool::unmap_locked(void* ptr, size_t bytes) {
  if (device_) device_->unregister_host(ptr);
  if (munmap(ptr, bytes) != 0) {
    log::error("munmap of a " + format_bytes(bytes) + " host pool block failed: " + errno_string());
  }
  stats_.reserved -= bytes;
}

void HostPool::release_cached_locked() {
  for (auto& [bytes, ptr] : free_) unmap_locked(ptr, bytes);
  free_.clear();
}

void HostPool::release_cached() {
  std::lock_guard<std::mutex> lock(mutex_);
  release_cached_locked();
}

PinnedBuffer HostPool::allocate(size_t bytes, Category category, const char* label) {
  const size_t want = round_size(bytes);
  std::lock_guard<std::mutex> lock(mutex_);
  ++stats_.alloc_count;
  void* p = nullptr;
  size_t got = 0;
  auto it = free_.lower_bound(want);
  if (it != free_.end() && it->first <= want + want / 4) {
    got = it->first;
    p = it->second;
    free_.erase(it);
    ++stats_.cache_hits;
  } else {
    if (stats_.reserved + want > stats_.budget) release_cached_locked();
    if (stats_.reserved + want > stats_.budget) {
      TZ_THROW("pinned host memory budget exceeded: " + std::string(label ? label : "unnamed") +
                   " asked for " + format_bytes(bytes) + " (" + category_name(category) +
                   ") with " + format_bytes(stats_.in_use) + " in use; budget " +
                   format_bytes(stats_.budget) + ", peak " + format_bytes(stats_.peak_in_use),
               "raise the host pool budget, lower buffer_count / buffer_size, or place more "
               "state on NVMe");
    }
    // MAP_POPULATE: fault the pages in now, so running out of RAM shows up here, not later.
    p = mmap(nullptr, want, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1,
             0);
    if (p == MAP_FAILED) {
      TZ_THROW("mmap of " + format_bytes(want) + " pinned host memory for " +
                   std::string(label ? label : "unnamed") + " failed: " + errno_string(),
               "the machine is out of memory or the address-space limit (ulimit -v) is hit");
    }
    if (device_) {
      try {
        device_->register_host(p, want);
      } catch (...) {
        munmap(p, want);
        throw;
      }
    }
    got = want;
    stats_.reserved += got;
    stats_.peak_reserved = std::max(stats_.peak_reserved, stats_.reserved);
  }
  stats_.in_use += got;
  stats_.peak_in_use = std::max(stats_.peak_in_use, stats_.in_use);
  tracker_.on_alloc(Tier::host, category, got, label);
  return PinnedBuffer(this, p, bytes, got, category, label);
}

void HostPool::free_block(void* ptr, size_t bytes, Category c, const char* label) {
  std::lock_guard<std::mutex> lock(mutex_);
  stats_.in_use -= bytes;
  tracker_.on_free(Tier::host, c, bytes, label);
  free_.emplace(bytes, ptr);
}

HostPoolStats HostPool::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

}  // namespace tierzero::offload
