// HostPool: page-aligned, pinned host memory with a hard byte budget.
// Offloaded shards and I/O staging buffers live here. Memory comes from anonymous mmap (so it is
// page aligned for O_DIRECT and io_uring) and is page-locked through Device::register_host when a
// device is given (cudaHostRegister on CUDA), so host<->device copies are real DMA. Blocks are
// rounded to size classes and cached for reuse; the budget covers in-use and cached bytes, and
// a request the budget cannot hold is an Error naming who asked, how much, and the budget —
// never an OOM kill. Bytes handed out are reported to the MemoryTracker as tier `host`.
#pragma once

#include <cstddef>
#include <map>
#include <mutex>

#include "tierzero/core/memory_tracker.hpp"

namespace tierzero {
class Device;
}

namespace tierzero::offload {

class HostPool;

// RAII handle to a block of pinned host memory; returns it to the pool on destruction.
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  PinnedBuffer(PinnedBuffer&& o) noexcept;
  PinnedBuffer& operator=(PinnedBuffer&& o) noexcept;
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  ~PinnedBuffer();

  void* data() const { return ptr_; }
  std::byte* bytes_ptr() const { return static_cast<std::byte*>(ptr_); }
  size_t size() const { return requested_; }  // bytes asked for
  size_t capacity() const { return bytes_; }  // bytes held (the size class)
  explicit operator bool() const { return ptr_ != nullptr; }
  void reset();

 private:
  friend class HostPool;
  PinnedBuffer(HostPool* pool, void* p, size_t requested, size_t bytes, Category c,
               const char* label)
      : pool_(pool), ptr_(p), requested_(requested), bytes_(bytes), category_(c), label_(label) {}
  HostPool* pool_ = nullptr;
  void* ptr_ = nullptr;
  size_t requested_ = 0;
  size_t bytes_ = 0;
  Category category_ = Category::io;
  const char* label_ = nullptr;
};

struct HostPoolStats {
  size_t budget = 0;    // bytes the pool may hold (in use + cached)
  size_t reserved = 0;  // bytes currently mapped
  size_t in_use = 0;    // bytes handed out (size classes)
  size_t peak_reserved = 0;
  size_t peak_in_use = 0;
  size_t alloc_count = 0;
  size_t cache_hits = 0;
};

class HostPool {
 public:
  // `device` (may be null) pins each mapping with register_host; `budget_bytes` must be > 0.
  HostPool(size_t budget_bytes, Device* device = nullptr,
           MemoryTracker& tracker = MemoryTracker::global());
  ~HostPool();  // every PinnedBuffer must be gone by now
  HostPool(const HostPool&) = delete;
  HostPool& operator=(const HostPool&) = delete;

  // Page-aligned memory of at least `bytes`; throws Error when the budget cannot hold it.
  // `label` (a static string) names the requester in errors and in the tracker timeline.
  PinnedBuffer allocate(size_t bytes, Category category, const char* label);

  void release_cached();  // unmaps every cached block
  HostPoolStats stats() const;
  bool pinned() const { return device_ != nullptr; }

  static size_t round_size(size_t bytes);  // the size class a request is served from

 private:
  friend class PinnedBuffer;
  void free_block(void* ptr, size_t bytes, Category c, const char* label);
  void unmap_locked(void* ptr, size_t bytes);
  void release_cached_locked();

  Device* device_;
  MemoryTracker& tracker_;
  mutable std::mutex mutex_;
  std::multimap<size_t, void*> free_;  // cached blocks by size class
  HostPoolStats stats_;
};

}  // namespace tierzero::offload
