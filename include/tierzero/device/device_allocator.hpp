// DeviceAllocator: a caching allocator with a hard byte budget for one Device.
// Blocks are rounded to size classes and reused; reuse is stream-ordered: a freed block goes
// back to its stream's pool at once (later work on that stream runs after the old work), and is
// handed to another stream only after an event shows the old work finished. Every byte handed
// out is reported to the MemoryTracker as tier `device` with the caller's category.
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

  // Throws Error with the request, the budget and the peak when the budget cannot hold it.
  // `stream` is where the block will be used (the device's default stream if null).
  DeviceBuffer allocate(size_t bytes, Category category, const char* label = nullptr,
                        Stream* stream = nullptr);

  void release_cached();  // returns every cached free block to the device
  AllocatorStats stats() const;
  MemoryTracker& tracker() const { return tracker_; }  // where this allocator reports
  Device& device() { return device_; }

  static size_t round_size(size_t bytes);  // the size class a request is served from

 private:
  friend class DeviceBuffer;
  struct FreeBlock {
    void* ptr;
    size_t bytes;
    Stream* stream;                // stream whose work last used the block
    std::unique_ptr<Event> ready;  // recorded at free time; null on the CPU backend
  };
  void free_block(void* ptr, size_t bytes, Category c, Stream* stream);
  void release_cached_locked();

  Device& device_;
  MemoryTracker& tracker_;
  mutable std::mutex mutex_;
  std::multimap<size_t, FreeBlock> free_;  // by rounded size
  AllocatorStats stats_;
};

}  // namespace tierzero
