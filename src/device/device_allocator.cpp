// Caching, budgeted, stream-ordered device allocator (see device_allocator.hpp for the rules, and
// docs/streams.md for how reuse follows the streams). Blocks are not split: requests are rounded
// to size classes and served from a cached block at most 25% larger, which keeps fragmentation
// bounded without the bookkeeping of splitting.
#include "tierzero/device/device_allocator.hpp"

#include <algorithm>

#include "tierzero/core/error.hpp"
#include "tierzero/core/out_of_memory.hpp"

namespace tierzero {

DeviceBuffer::DeviceBuffer(DeviceBuffer&& o) noexcept
    : alloc_(o.alloc_), ptr_(o.ptr_), bytes_(o.bytes_), category_(o.category_), stream_(o.stream_) {
  o.alloc_ = nullptr;
  o.ptr_ = nullptr;
  o.bytes_ = 0;
}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    reset();
    alloc_ = o.alloc_;
    ptr_ = o.ptr_;
    bytes_ = o.bytes_;
    category_ = o.category_;
    stream_ = o.stream_;
    o.alloc_ = nullptr;
    o.ptr_ = nullptr;
    o.bytes_ = 0;
  }
  return *this;
}

DeviceBuffer::~DeviceBuffer() {
  reset();
}

void DeviceBuffer::reset() {
  if (alloc_ && ptr_) alloc_->free_block(ptr_, bytes_, category_, stream_);
  alloc_ = nullptr;
  ptr_ = nullptr;
  bytes_ = 0;
}

namespace {

// A failed stream skips its later work, so a block freed on it is no longer in use: for reuse a
// failure counts as finished. The failure itself is the stream's to report (its synchronize()).
bool finished(Event& event) {
  try {
    return event.query();
  } catch (const Error&) {
    return true;
  }
}

void wait_finished(Event& event) {
  try {
    event.synchronize();
  } catch (const Error&) {
  }
}

}  // namespace

DeviceAllocator::DeviceAllocator(Device& device, size_t budget_bytes, MemoryTracker& tracker)
    : device_(device), tracker_(tracker) {
  stats_.budget = budget_bytes ? budget_bytes : device.total_memory();
}

DeviceAllocator::~DeviceAllocator() {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto& [size, block] : free_) {
    if (block.ready) wait_finished(*block.ready);
    device_.raw_free(block.ptr);
  }
  free_.clear();
}

size_t DeviceAllocator::round_size(size_t bytes) {
  constexpr size_t kSmall = 512;
  constexpr size_t kLarge = size_t{1} << 20;
  if (bytes == 0) return kSmall;
  if (bytes <= kLarge) return (bytes + kSmall - 1) / kSmall * kSmall;
  return (bytes + kLarge - 1) / kLarge * kLarge;
}

void DeviceAllocator::release_finished_locked(std::vector<std::shared_ptr<Event>>* pending) {
  for (auto it = free_.begin(); it != free_.end();) {
    FreeBlock& block = it->second;
    if (block.ready && !finished(*block.ready)) {
      if (pending != nullptr) pending->push_back(block.ready);
      ++it;
      continue;
    }
    device_.raw_free(block.ptr);
    stats_.reserved -= it->first;
    it = free_.erase(it);
  }
}

void DeviceAllocator::release_cached() {
  std::vector<std::shared_ptr<Event>> pending;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    release_finished_locked(&pending);
  }
  // Waited for without the lock: the work may itself free blocks into this allocator.
  for (auto& event : pending) wait_finished(*event);
  std::lock_guard<std::mutex> lock(mutex_);
  release_finished_locked(nullptr);
}

DeviceBuffer DeviceAllocator::allocate(size_t bytes, Category category, const char* label,
                                       Stream* stream) {
  if (!stream) stream = &device_.default_stream();
  const size_t want = round_size(bytes);
  std::unique_lock<std::mutex> lock(mutex_);
  ++stats_.alloc_count;

  size_t got = 0;
  void* p = nullptr;
  for (;;) {
    // A cached block may be up to 25% larger than asked; it is usable by this stream at once,
    // by another once the work that freed it has finished.
    const size_t max_bytes = want + want / 4;
    for (auto it = free_.lower_bound(want); it != free_.end() && it->first <= max_bytes; ++it) {
      FreeBlock& b = it->second;
      if (b.stream == stream || !b.ready || finished(*b.ready)) {
        p = b.ptr;
        got = it->first;
        free_.erase(it);
        ++stats_.cache_hits;
        break;
      }
    }
    if (p) break;
    if (stats_.reserved + want <= stats_.budget) break;
    std::vector<std::shared_ptr<Event>> pending;
    release_finished_locked(&pending);
    if (stats_.reserved + want <= stats_.budget) break;
    size_t cached = 0;
    for (const auto& entry : free_) cached += entry.first;
    if (pending.empty() || stats_.reserved - cached + want > stats_.budget) {
      TZ_THROW_OUT_OF_MEMORY(
          "device memory budget exceeded on " + device_.name() + ": request of " +
              format_bytes(bytes) + " for " + category_name(category) +
              (label ? std::string(" (") + label + ")" : std::string()) + " with " +
              format_bytes(stats_.in_use) + " in use; budget " + format_bytes(stats_.budget) +
              ", peak " + format_bytes(stats_.peak_reserved),
          "raise the device budget, lower the micro-batch size, or offload more state");
    }
    // Only blocks still in use by queued work stand in the way: wait for that work, without the
    // lock (the work may free blocks into this allocator), then look again.
    lock.unlock();
    for (auto& event : pending) wait_finished(*event);
    lock.lock();
  }
  if (!p) {
    p = device_.raw_alloc(want);
    got = want;
    stats_.reserved += got;
    stats_.peak_reserved = std::max(stats_.peak_reserved, stats_.reserved);
  }
  stats_.in_use += got;
  stats_.peak_in_use = std::max(stats_.peak_in_use, stats_.in_use);
  tracker_.on_alloc(Tier::device, category, got, label);
  return DeviceBuffer(this, p, got, category, stream);
}

void DeviceAllocator::free_block(void* ptr, size_t bytes, Category c, Stream* stream) {
  // On every backend: a CPU worker stream may still be running work that uses the block.
  std::shared_ptr<Event> ready = device_.create_event();
  ready->record(*stream);
  std::lock_guard<std::mutex> lock(mutex_);
  stats_.in_use -= bytes;
  tracker_.on_free(Tier::device, c, bytes);
  free_.emplace(bytes, FreeBlock{ptr, bytes, stream, std::move(ready)});
}

AllocatorStats DeviceAllocator::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

}  // namespace tierzero
