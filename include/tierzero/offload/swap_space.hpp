// SwapSpace: allocates extents of an NvmeEngine's striped swap space for tensors.
// Free ranges are kept by offset and coalesced with their neighbours on free, and reused best-fit
// so a long run does not grow the swap files without bound. Extents of a stripe unit or more start
// on a stripe-unit boundary, so large tensors map to whole, drive-friendly requests. Bytes are
// reported to the MemoryTracker as tier `nvme` (padded on-disk bytes, the caller's category).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <set>
#include <unordered_map>
#include <vector>

#include "tierzero/core/memory_tracker.hpp"
#include "tierzero/offload/nvme_engine.hpp"

namespace tierzero::offload {

struct SwapStats {
  size_t capacity = 0;    // bytes the space may use; 0: until the drive is full
  size_t in_use = 0;      // padded bytes of live extents
  size_t high_water = 0;  // end of the furthest extent ever handed out (swap size on disk)
  size_t free_ranges = 0;
  size_t extents = 0;
};

class SwapSpace {
 public:
  SwapSpace(NvmeEngine& engine, size_t capacity_bytes = 0,
            MemoryTracker& tracker = MemoryTracker::global());
  ~SwapSpace();  // reports the bytes of extents never freed as released
  SwapSpace(const SwapSpace&) = delete;
  SwapSpace& operator=(const SwapSpace&) = delete;

  // An extent for `bytes` logical bytes (any length; 0 gets one aligned block). Throws Error
  // naming the request, `label` and the capacity when the capacity cannot hold it.
  Extent allocate(size_t bytes, Category category, const char* label);
  void free(const Extent& extent);  // its space is reused; its checksums are forgotten

  // A tensor too large for one staging buffer, as consecutive extents of `chunk_bytes` (the last
  // one shorter), for StreamPipeline.
  std::vector<Extent> allocate_chunked(size_t bytes, size_t chunk_bytes, Category category,
                                       const char* label);

  IoHandle write(const Extent& e, const void* src, IoCallback cb = {}) {
    return engine_.write(e, src, std::move(cb));
  }
  IoHandle read(const Extent& e, void* dst, IoCallback cb = {}) {
    return engine_.read(e, dst, std::move(cb));
  }

  NvmeEngine& engine() { return engine_; }
  SwapStats stats() const;

 private:
  struct Live {
    size_t padded;
    Category category;
    const char* label;
  };
  void insert_free_locked(uint64_t offset, size_t bytes);
  void erase_free_locked(std::map<uint64_t, size_t>::iterator it);

  NvmeEngine& engine_;
  MemoryTracker& tracker_;
  size_t capacity_;
  size_t stripe_;
  mutable std::mutex mutex_;
  std::map<uint64_t, size_t> free_by_offset_;           // offset -> bytes
  std::set<std::pair<size_t, uint64_t>> free_by_size_;  // (bytes, offset), for best fit
  std::unordered_map<uint64_t, Live> live_;             // offset -> extent
  uint64_t next_id_ = 1;
  size_t in_use_ = 0;
  uint64_t end_ = 0;  // end of the space handed out so far
  uint64_t high_water_ = 0;
};

}  // namespace tierzero::offload
