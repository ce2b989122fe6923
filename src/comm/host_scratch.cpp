// HostScratch: the comm layer's grow-only staging memory, accounted as tier host, category comm.
#include <cstdlib>
#include <new>

#include "comm_internal.hpp"
#include "tierzero/core/error.hpp"
#include "tierzero/core/memory_tracker.hpp"

namespace tierzero::comm::comm_detail {

HostScratch::~HostScratch() {
  if (data_ != nullptr) {
    MemoryTracker::global().on_free(Tier::host, Category::comm, bytes_, label_);
    std::free(data_);
  }
}

void* HostScratch::get(size_t bytes) {
  if (bytes <= bytes_) return data_;
  if (data_ != nullptr) {
    MemoryTracker::global().on_free(Tier::host, Category::comm, bytes_, label_);
    std::free(data_);
    data_ = nullptr;
    bytes_ = 0;
  }
  const size_t rounded = (bytes + 63) / 64 * 64;
  data_ = std::aligned_alloc(64, rounded);
  TZ_CHECK(data_ != nullptr,
           std::string("cannot allocate ") + format_bytes(rounded) + " of comm staging memory (" +
               label_ + ")",
           "the host is out of memory; use smaller communication buckets");
  bytes_ = rounded;
  MemoryTracker::global().on_alloc(Tier::host, Category::comm, bytes_, label_);
  return data_;
}

}  // namespace tierzero::comm::comm_detail
