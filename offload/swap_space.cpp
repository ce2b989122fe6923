// SwapSpace: best-fit extent allocation with coalescing over the engine's logical swap space.
#include "tierzero/offload/swap_space.hpp"

#include <algorithm>
#include <string>

#include "tierzero/core/error.hpp"

namespace tierzero::offload {

namespace {
uint64_t round_up(uint64_t x, uint64_t a) {
  return (x + a - 1) / a * a;
}
}  // namespace

SwapSpace::SwapSpace(NvmeEngine& engine, size_t capacity_bytes, MemoryTracker& tracker)
    : engine_(engine),
      tracker_(tracker),
      capacity_(capacity_bytes),
      stripe_(engine.options().block_size) {}

SwapSpace::~SwapSpace() {
  std::lock_guard<std::mutex> lock(mutex_);
  for (const auto& [offset, live] : live_) tracker_.on_free(Tier::nvme, live.category, live.padded);
}

void SwapSpace::insert_free_locked(uint64_t offset, size_t bytes) {
  if (bytes == 0) return;
  free_by_offset_[offset] = bytes;
  free_by_size_.insert({bytes, offset});
}

void SwapSpace::erase_free_locked(std::map<uint64_t, size_t>::iterator it) {
  free_by_size_.erase({it->second, it->first});
  free_by_offset_.erase(it);
}

Extent SwapSpace::allocate(size_t bytes, Category category, const char* label) {
  const size_t padded = std::max<size_t>(kIoAlignment, round_up(bytes, kIoAlignment));
  const size_t align = padded >= stripe_ ? stripe_ : kIoAlignment;
  std::lock_guard<std::mutex> lock(mutex_);
  uint64_t offset = 0;
  bool found = false;
  // Best fit: the smallest free range that holds the request at the alignment it needs.
  for (auto it = free_by_size_.lower_bound({padded, 0}); it != free_by_size_.end(); ++it) {
    const auto [range_bytes, range_off] = *it;
    const uint64_t start = round_up(range_off, align);
    if (start + padded > range_off + range_bytes) continue;
    erase_free_locked(free_by_offset_.find(range_off));
    insert_free_locked(range_off, static_cast<size_t>(start - range_off));
    insert_free_locked(start + padded,
                       static_cast<size_t>(range_off + range_bytes - start - padded));
    offset = start;
    found = true;
    break;
  }
  if (!found) {
    const uint64_t start = round_up(end_, align);
    if (capacity_ != 0 && start + padded > capacity_) {
      TZ_THROW("NVMe swap capacity exceeded: " + std::string(label ? label : "unnamed") +
                   " asked for " + format_bytes(bytes) + " (" + category_name(category) +
                   ") with " + format_bytes(in_use_) + " in use; capacity " +
                   format_bytes(capacity_),
               "raise the swap capacity or keep more state in host or device memory");
    }
    insert_free_locked(end_, static_cast<size_t>(start - end_));  // alignment gap stays usable
    offset = start;
    end_ = start + padded;
    high_water_ = std::max(high_water_, end_);
  }
  engine_.reserve(offset + padded);
  live_[offset] = {padded, category, label};
  in_use_ += padded;
  tracker_.on_alloc(Tier::nvme, category, padded, label);
  return Extent{next_id_++, offset, bytes, padded};
}

void SwapSpace::free(const Extent& extent) {
  engine_.forget(extent);
  std::lock_guard<std::mutex> lock(mutex_);
  auto live = live_.find(extent.offset);
  TZ_CHECK(live != live_.end() && live->second.padded == extent.padded,
           "free of extent #" + std::to_string(extent.id) + " at swap offset " +
               std::to_string(extent.offset) + ", which is not allocated",
           "an extent is freed once, through the SwapSpace that made it");
  tracker_.on_free(Tier::nvme, live->second.category, live->second.padded, live->second.label);
  in_use_ -= live->second.padded;
  live_.erase(live);
  uint64_t start = extent.offset;
  size_t bytes = extent.padded;
  auto next = free_by_offset_.lower_bound(start);
  if (next != free_by_offset_.end() && next->first == start + bytes) {
    bytes += next->second;
    erase_free_locked(next);
  }
  auto prev = free_by_offset_.lower_bound(start);
  if (prev != free_by_offset_.begin()) {
    --prev;
    if (prev->first + prev->second == start) {
      start = prev->first;
      bytes += prev->second;
      erase_free_locked(prev);
    }
  }
  if (start + bytes == end_) {
    end_ = start;  // the tail of the space shrinks back instead of staying a free range
  } else {
    insert_free_locked(start, bytes);
  }
}

std::vector<Extent> SwapSpace::allocate_chunked(size_t bytes, size_t chunk_bytes, Category category,
                                                const char* label) {
  TZ_CHECK(chunk_bytes > 0, "chunk size must be positive", "pass the staging buffer size");
  std::vector<Extent> out;
  try {
    for (size_t done = 0; done < bytes || out.empty(); done += chunk_bytes) {
      out.push_back(allocate(std::min(chunk_bytes, bytes - done), category, label));
      if (bytes == 0) break;
    }
  } catch (...) {
    for (const Extent& e : out) free(e);
    throw;
  }
  return out;
}

SwapStats SwapSpace::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  SwapStats s;
  s.capacity = capacity_;
  s.in_use = in_use_;
  s.high_water = high_water_;
  s.free_ranges = free_by_offset_.size();
  s.extents = live_.size();
  return s;
}

}  // namespace tierzero::offload
