// CheckpointTier: activation checkpoints placed on a tier like any other state class (issue 31).
// A checkpoint (keyed by micro-batch and position) is written by the forward into one of a few
// device slots, copied out behind the forward on a copy stream (write-behind: to pinned host
// memory, and from there to NVMe through the swap space), and its slot is reused once that copy
// is done. The backward reads checkpoints back in decreasing position, ahead of use, into free
// slots (the slots are the prefetch's byte budget); the last ones written are often still in
// their slot and are not read at all. Device slots, host copies and NVMe extents are counted by
// the MemoryTracker as Category::activation_checkpoint on their tier; NVMe extents carry the
// engine's CRC32C, and a damaged one is an Error naming the swap file and the block.
// It knows nothing of GPT: nn::CheckpointStore is connected to it in train.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "tierzero/core/memory_tracker.hpp"
#include "tierzero/device/device_allocator.hpp"
#include "tierzero/device/device_timeline.hpp"
#include "tierzero/offload/host_pool.hpp"
#include "tierzero/offload/nvme_engine.hpp"
#include "tierzero/offload/swap_space.hpp"

namespace tierzero::zero {

struct CheckpointTierConfig {
  Tier tier = Tier::host;  // host or nvme (on the device the model keeps them itself)
  // Device slots at most (at least 2: the checkpoint being written and the one being read).
  size_t device_slots = 3;
  size_t host_budget_bytes = size_t{8} << 30;  // the own pool's, when no pool is shared
  offload::NvmeOptions nvme;                   // tier nvme: the swap directories
};

struct CheckpointTierStats {
  size_t writes = 0;       // checkpoints moved to the tier
  size_t reads = 0;        // read back from the tier
  size_t device_hits = 0;  // found still in their device slot by the backward
};

class CheckpointTier {
 public:
  // pool: the partition store's pinned pool, shared so one host budget covers both; null: an own
  // pool of config.host_budget_bytes.
  CheckpointTier(const CheckpointTierConfig& config, DeviceAllocator& allocator,
                 offload::HostPool* pool = nullptr);
  ~CheckpointTier();
  CheckpointTier(const CheckpointTier&) = delete;
  CheckpointTier& operator=(const CheckpointTier&) = delete;

  float* begin_write(uint64_t micro_batch, size_t position, size_t bytes);
  void end_write(uint64_t micro_batch, size_t position, bool discard);
  const float* begin_read(uint64_t micro_batch, size_t position);
  void end_read(uint64_t micro_batch, size_t position);
  void drop(uint64_t micro_batch);
  void wait_idle();  // every copy and I/O issued so far has finished (tests, shutdown)

  // Every copy and NVMe transfer is in the ActivityLog (the profile's links): the copies timed on
  // `timeline` where the copy stream ran them while profiling (null: issue to landing on the
  // host's clock), the NVMe reads and writes from submission to completion.
  void set_device_timeline(DeviceTimeline* timeline) { timeline_ = timeline; }

  Tier tier() const { return config_.tier; }
  size_t device_slots() const { return config_.device_slots; }  // at least 2
  CheckpointTierStats stats() const { return stats_; }
  // The engine's swap file paths (tier nvme; tests damage them).
  offload::NvmeEngine* nvme() { return nvme_.get(); }
  // Where the extent of (micro_batch, position) lives: the swap file index and offset (tests).
  std::pair<size_t, uint64_t> locate(uint64_t micro_batch, size_t position) const;
  // Exactly the device bytes the slots take for checkpoints of `bytes` when `live` checkpoints
  // are alive at once at most (the tracker's count).
  static size_t device_bytes_for(size_t slots, size_t bytes, size_t live);

 private:
  struct Entry;
  using Key = std::pair<uint64_t, size_t>;
  Entry& find(const Key& key, const char* what);
  int take_slot(bool may_evict);  // a free slot, or -1
  void free_slot(Entry& e);       // after the default stream's work so far
  void evict(Entry& e);           // its tier copy done, its slot freed
  void write_out(const Key& key, Entry& e);
  void start_read(const Key& key, Entry& e);
  void finish_read(const Key& key, Entry& e);  // the tier copy is in its slot (copy issued)
  void advance();                              // moves finished copies and I/O along
  void bound_write_staging();                  // NVMe: device_slots staged writes at most
  void prefetch_below(const Key& key);
  void wait_io(const Key& key, Entry& e, const char* what);
  void release(Entry& e);

  CheckpointTierConfig config_;
  DeviceAllocator& allocator_;
  Device& device_;
  std::unique_ptr<offload::HostPool> own_pool_;
  offload::HostPool* pool_;
  std::unique_ptr<offload::NvmeEngine> nvme_;
  std::unique_ptr<offload::SwapSpace> swap_;
  std::unique_ptr<Stream> copy_stream_;
  DeviceTimeline* timeline_ = nullptr;  // set_device_timeline
  std::vector<DeviceBuffer> slots_;     // (slots, bytes_ / 4) each one checkpoint
  std::vector<char> slot_used_;
  std::vector<std::unique_ptr<Event>> slot_free_;  // the default stream's last use of the slot
  size_t slot_bytes_ = 0;
  std::map<Key, std::unique_ptr<Entry>> entries_;
  uint64_t clock_ = 0;  // orders entries for eviction (least recently used first)
  CheckpointTierStats stats_;
};

}  // namespace tierzero::zero
