// DeviceAllocator: a caching allocator with a hard byte budget for one Device.
// Blocks are rounded to size classes and reused; reuse is stream-ordered, on every backend: a
// block freed while work on its stream may still use it goes back to the cache with an event
// recorded at free time. The same stream may take it again at once (its later work runs after
// the old work); another stream only once that event has completed. Cached blocks are returned
// to the device only after their event has completed, too. Every byte handed out is reported to
// the MemoryTracker as tier `device` with the caller's category.
#pragma once

#include <cstddef>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "tierzero/core/memory_tracker.hpp"
#include "tierzero/device/device.hpp"

namespace tierzero {

class DeviceAllocator;

// RAII handle to a block; frees (stream-ordered) on destruction.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(DeviceBuffer&& o) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer();

  void* data() const { return ptr_; }
  float* f32() const { return static_cast<float*>(ptr_); }
  size_t bytes() const { return bytes_; }
  explicit operator bool() const { return ptr_ != nullptr; }
  void reset();  // frees now (stream-ordered)

 private:
  friend class DeviceAllocator;
  DeviceBuffer(DeviceAllocator* a, void* p, size_t bytes, Category c, Stream* s)
      : alloc_(a), ptr_(p), bytes_(bytes), category_(c), stream_(s) {}
  DeviceAllocator* alloc_ = nullptr;
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
  Category category_ = Category::workspace;
  Stream* stream_ = nullptr;
};

struct AllocatorStats {
  size_t budget = 0;    // bytes the allocator may reserve from the device
  size_t reserved = 0;  // bytes currently reserved from the device (in use + cached)
  size_t in_use = 0;    // bytes handed out (rounded sizes)
  size_t peak_reserved = 0;
  size_t peak_in_use = 0;
  size_t alloc_count = 0;  // allocate() calls
  size_t cache_hits = 0;   // of those, served from the cache
};

class DeviceAllocator {
 public:
  // budget 0 means "the device's total memory".
  DeviceAllocator(Device& device, size_t budget_bytes,
                  MemoryTracker& tracker = MemoryTracker::global());
  ~DeviceAllocator();
  DeviceAllocator(const DeviceAllocator&) = delete;
  DeviceAllocator& operator=(const DeviceAllocator&) = delete;

  // `stream` is where the block will be used (the device's default stream if null), and where
  // the block is freed (stream-ordered) when its DeviceBuffer goes.
  // When the budget is exhausted, cached blocks whose last work has finished are released to
  // make room; if that is not enough and cached blocks are still in use by work on their
  // streams, this waits (blocking the caller) for that work rather than failing. Throws Error
  // with the request, the budget and the peak when the budget cannot hold the request even with
  // every cached block released.
  DeviceBuffer allocate(size_t bytes, Category category, const char* label = nullptr,
                        Stream* stream = nullptr);

  // Returns every cached free block to the device, waiting for the work still using them.
  void release_cached();
  AllocatorStats stats() const;
  MemoryTracker& tracker() const { return tracker_; }  // where this allocator reports
  Device& device() { return device_; }

  static size_t round_size(size_t bytes);  // the size class a request is served from

 private:
  friend class DeviceBuffer;
  struct FreeBlock {
    void* ptr;
    size_t bytes;
    Stream* stream;  // stream whose work last used the block
    // Recorded on `stream` at free time. Shared, so that a thread can wait for it with the lock
    // released while another thread takes or releases the block.
    std::shared_ptr<Event> ready;
  };
  void free_block(void* ptr, size_t bytes, Category c, Stream* stream);
  // Returns to the device the cached blocks whose event has completed; the events of the others
  // (still in use) are added to `pending` when given.
  void release_finished_locked(std::vector<std::shared_ptr<Event>>* pending);

  Device& device_;
  MemoryTracker& tracker_;
  mutable std::mutex mutex_;
  std::multimap<size_t, FreeBlock> free_;  // by rounded size
  AllocatorStats stats_;
};

}  // namespace tierzero
