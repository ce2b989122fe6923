// HostScratch: the comm layer's grow-only staging memory, from the heap (accounted as tier host,
// category comm) or from the allocator set by set_host_staging_allocator (which accounts for it
// itself, against its budget).
#include <cstdlib>
#include <mutex>
#include <new>
#include <set>

#include "comm_internal.hpp"
#include "tierzero/comm/host_staging.hpp"
#include "tierzero/core/error.hpp"
#include "tierzero/core/memory_tracker.hpp"

namespace tierzero::comm {

namespace {

// The process's staging source and every live scratch buffer, so that changing the source can
// release what came from the old one.
struct StagingSource {
  std::mutex mutex;
  HostStagingAllocator* allocator = nullptr;
  std::set<comm_detail::HostScratch*> live;
};

StagingSource& source() {
  static StagingSource s;
  return s;
}

}  // namespace

void set_host_staging_allocator(HostStagingAllocator* allocator) {
  StagingSource& s = source();
  std::lock_guard<std::mutex> lock(s.mutex);
  for (comm_detail::HostScratch* scratch : s.live) scratch->release_locked();
  s.allocator = allocator;
}

HostStagingAllocator* host_staging_allocator() {
  StagingSource& s = source();
  std::lock_guard<std::mutex> lock(s.mutex);
  return s.allocator;
}

namespace comm_detail {

HostScratch::HostScratch(const char* label) : label_(label) {
  StagingSource& s = source();
  std::lock_guard<std::mutex> lock(s.mutex);
  s.live.insert(this);
}

HostScratch::~HostScratch() {
  StagingSource& s = source();
  std::lock_guard<std::mutex> lock(s.mutex);
  release_locked();
  s.live.erase(this);
}

void HostScratch::release_locked() {
  if (data_ == nullptr) return;
  if (from_allocator_) {
    source().allocator->release(data_);
  } else {
    MemoryTracker::global().on_free(Tier::host, Category::comm, bytes_, label_);
    std::free(data_);
  }
  data_ = nullptr;
  bytes_ = 0;
}

void* HostScratch::get(size_t bytes) {
  StagingSource& s = source();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (bytes <= bytes_) return data_;
  release_locked();
  const size_t rounded = (bytes + 63) / 64 * 64;
  if (s.allocator != nullptr) {
    data_ = s.allocator->allocate(rounded, label_);
    from_allocator_ = true;
    bytes_ = rounded;
    return data_;
  }
  data_ = std::aligned_alloc(64, rounded);
  TZ_CHECK(data_ != nullptr,
           std::string("cannot allocate ") + format_bytes(rounded) + " of comm staging memory (" +
               label_ + ")",
           "the host is out of memory; use smaller communication buckets");
  from_allocator_ = false;
  bytes_ = rounded;
  MemoryTracker::global().on_alloc(Tier::host, Category::comm, bytes_, label_);
  return data_;
}

}  // namespace comm_detail

}  // namespace tierzero::comm
