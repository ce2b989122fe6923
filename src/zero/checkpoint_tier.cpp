// CheckpointTier: write-behind to the host or NVMe, read-ahead into free device slots (see
// checkpoint_tier.hpp). Every call runs on the training thread; the copy stream and the NVMe
// engine do the moving, and advance() moves finished steps along at each call.
#include "tierzero/zero/checkpoint_tier.hpp"

#include <algorithm>
#include <string>

#include "tierzero/core/activity_log.hpp"
#include "tierzero/core/error.hpp"
#include "tierzero/core/timer.hpp"
#include "tierzero/device/device_span.hpp"

namespace tierzero::zero {

struct CheckpointTier::Entry {
  size_t bytes = 0;
  int slot = -1;               // the device slot holding it, or none
  bool ended = false;          // the forward is done with it (end_write)
  bool in_use = false;         // between begin_write and end_write, or begin_read and end_read
  bool d2h_pending = false;    // copied to the host, not yet confirmed
  bool writing_nvme = false;   // its NVMe write is in flight
  bool reading_nvme = false;   // its NVMe read is in flight (into `host`)
  bool h2d_pending = false;    // copied into its slot, not yet confirmed
  bool on_nvme = false;        // the extent holds it
  offload::PinnedBuffer host;  // tier host: the copy; tier nvme: staging while moving
  offload::Extent extent;
  bool has_extent = false;
  offload::IoHandle io;
  std::unique_ptr<Event> copied;  // the last copy issued for it on the copy stream
  uint64_t used = 0;              // clock_ at its last use (eviction: least recent first)
};

namespace {

std::string name_of(uint64_t micro_batch, size_t position) {
  return "activation checkpoint of block " + std::to_string(position) + " (micro-batch " +
         std::to_string(micro_batch) + ")";
}

}  // namespace

CheckpointTier::CheckpointTier(const CheckpointTierConfig& config, DeviceAllocator& allocator,
                               offload::HostPool* pool)
    : config_(config), allocator_(allocator), device_(allocator.device()), pool_(pool) {
  TZ_CHECK(config_.tier == Tier::host || config_.tier == Tier::nvme,
           std::string("activation checkpoints on tier ") + tier_name(config_.tier) +
               " need no CheckpointTier",
           "internal error: device checkpoints stay in the micro-batch");
  config_.device_slots = std::max<size_t>(config_.device_slots, 2);
  if (pool_ == nullptr) {
    own_pool_ = std::make_unique<offload::HostPool>(config_.host_budget_bytes, &device_,
                                                    allocator_.tracker());
    pool_ = own_pool_.get();
  }
  if (config_.tier == Tier::nvme) {
    TZ_CHECK(!config_.nvme.directories.empty(),
             "activation checkpoints on NVMe need a directory: nvme_path is empty",
             "set tierzero.activation_checkpoints.nvme_path (train --activation-nvme-path)");
    nvme_ = std::make_unique<offload::NvmeEngine>(config_.nvme, pool_);
    swap_ = std::make_unique<offload::SwapSpace>(*nvme_, 0, allocator_.tracker());
  }
  copy_stream_ = device_.create_stream();
}

CheckpointTier::~CheckpointTier() {
  try {
    wait_idle();
  } catch (...) {  // a failed copy or read: nothing left to report it to
  }
  for (auto& [key, e] : entries_) release(*e);
  entries_.clear();
}

size_t CheckpointTier::device_bytes_for(size_t slots, size_t bytes, size_t live) {
  return std::min(std::max<size_t>(slots, 2), live) * DeviceAllocator::round_size(bytes);
}

CheckpointTier::Entry& CheckpointTier::find(const Key& key, const char* what) {
  auto it = entries_.find(key);
  TZ_CHECK(it != entries_.end(), std::string(what) + ": no " + name_of(key.first, key.second),
           "internal error: the forward writes a checkpoint before the backward reads it");
  return *it->second;
}

int CheckpointTier::take_slot(bool may_evict) {
  for (size_t s = 0; s < slots_.size(); ++s)
    if (!slot_used_[s]) {
      slot_used_[s] = 1;
      return static_cast<int>(s);
    }
  if (slots_.size() < config_.device_slots) {
    slots_.push_back(allocator_.allocate(slot_bytes_, Category::activation_checkpoint,
                                         "activation checkpoint slot"));
    slot_used_.push_back(1);
    slot_free_.push_back(device_.create_event());
    return static_cast<int>(slots_.size() - 1);
  }
  if (!may_evict) return -1;
  Entry* victim = nullptr;
  for (auto& [key, e] : entries_)
    if (e->slot >= 0 && e->ended && !e->in_use && (!victim || e->used < victim->used))
      victim = e.get();
  if (victim == nullptr) return -1;
  const int s = victim->slot;
  evict(*victim);
  slot_used_[static_cast<size_t>(s)] = 1;
  return s;
}

void CheckpointTier::free_slot(Entry& e) {
  if (e.slot < 0) return;
  const size_t s = static_cast<size_t>(e.slot);
  slot_free_[s]->record(device_.default_stream());
  slot_used_[s] = 0;
  e.slot = -1;
}

void CheckpointTier::evict(Entry& e) {
  if (e.d2h_pending || e.h2d_pending) e.copied->synchronize();
  if (e.h2d_pending) {
    e.h2d_pending = false;
    if (config_.tier == Tier::nvme) e.host.reset();  // the staging it was read through
  }
  free_slot(e);
  advance();  // a confirmed host copy moves on to NVMe
}

void CheckpointTier::release(Entry& e) {
  if (e.io) {
    try {
      e.io.wait();
    } catch (...) {  // dropped anyway
    }
  }
  if (e.copied) e.copied->synchronize();
  free_slot(e);
  e.host.reset();
  if (e.has_extent) swap_->free(e.extent);
  e.has_extent = false;
}

float* CheckpointTier::begin_write(uint64_t micro_batch, size_t position, size_t bytes) {
  const Key key{micro_batch, position};
  if (auto it = entries_.find(key); it != entries_.end()) {  // a forward without a backward
    release(*it->second);
    entries_.erase(it);
  }
  if (entries_.empty() && bytes != slot_bytes_) {  // a new shape: new slots
    for (size_t s = 0; s < slots_.size(); ++s) slot_free_[s]->synchronize();
    slots_.clear();
    slot_used_.clear();
    slot_free_.clear();
    slot_bytes_ = bytes;
  }
  TZ_CHECK(bytes <= slot_bytes_,
           name_of(micro_batch, position) + " has " + std::to_string(bytes) +
               " bytes but the slots hold " + std::to_string(slot_bytes_),
           "internal error: micro-batches of one shape at a time");
  auto e = std::make_unique<Entry>();
  e->bytes = bytes;
  e->in_use = true;
  e->used = ++clock_;
  e->copied = device_.create_event();
  e->slot = take_slot(true);
  TZ_CHECK(e->slot >= 0, "no device slot free for " + name_of(micro_batch, position),
           "internal error: more checkpoints in use than device slots");
  float* at = slots_[static_cast<size_t>(e->slot)].f32();
  entries_[key] = std::move(e);
  return at;
}

void CheckpointTier::end_write(uint64_t micro_batch, size_t position, bool discard) {
  const Key key{micro_batch, position};
  Entry& e = find(key, "end_write");
  e.in_use = false;
  e.ended = true;
  if (discard) {
    free_slot(e);
    entries_.erase(key);
    return;
  }
  if (config_.tier == Tier::nvme) bound_write_staging();
  write_out(key, e);
  advance();
}

void CheckpointTier::bound_write_staging() {
  // At most device_slots checkpoints staged on their way to NVMe: wait for the oldest ones.
  for (;;) {
    Entry* oldest = nullptr;
    size_t staged = 0;
    for (auto& [key, p] : entries_)
      if (p->d2h_pending || p->writing_nvme) {
        ++staged;
        if (!oldest || p->used < oldest->used) oldest = p.get();
      }
    if (staged < config_.device_slots) return;
    if (oldest->d2h_pending) oldest->copied->synchronize();
    advance();  // submits its write
    for (auto& [key, p] : entries_)
      if (p.get() == oldest && p->writing_nvme) {
        wait_io(key, *p, "written");
        p->writing_nvme = false;
        p->on_nvme = true;
        p->host.reset();
      }
  }
}

void CheckpointTier::write_out(const Key& key, Entry& e) {
  // Behind the forward's writes of the slot: its copy to pinned memory on the copy stream.
  std::unique_ptr<Event> ready = device_.create_event();
  ready->record(device_.default_stream());
  ready->make_wait(*copy_stream_);
  const bool host = config_.tier == Tier::host;
  e.host = pool_->allocate(e.bytes, host ? Category::activation_checkpoint : Category::io,
                           host ? "activation checkpoint" : "activation checkpoint staging");
  const double t0 = monotonic_seconds();
  DeviceSpan span(timeline_, *copy_stream_);
  device_.copy(e.host.data(), slots_[static_cast<size_t>(e.slot)].data(), e.bytes,
               CopyKind::device_to_host, *copy_stream_);
  span.close_copy(device_, Track::device_to_host, "activation checkpoint to host", -1, e.bytes, t0);
  e.copied->record(*copy_stream_);
  e.d2h_pending = true;
  // Its NVMe extent is reserved now, not when the copy is seen done: every checkpoint handed to
  // the tier holds one until the backward ends it, so the NVMe bytes are the stored checkpoints'
  // exactly, whatever the copies' timing (on a GPU the last ones are often read back from their
  // slot before their copy is seen done, and would otherwise never take one).
  if (!host && !e.has_extent) {
    e.extent = swap_->allocate(e.bytes, Category::activation_checkpoint, "activation checkpoint");
    e.has_extent = true;
  }
  ++stats_.writes;
  (void)key;
}

void CheckpointTier::advance() {
  for (auto& [key, p] : entries_) {
    Entry& e = *p;
    if (e.d2h_pending && e.copied->query()) {
      e.d2h_pending = false;
      if (config_.tier == Tier::nvme) {  // its extent was reserved by write_out
        const double t0 = monotonic_seconds();
        e.io = swap_->write(e.extent, e.host.data(), [t0](const offload::IoResult& r) {
          ActivityLog::global().record(Track::nvme_write, "activation checkpoint nvme write", t0,
                                       monotonic_seconds(), r.bytes);
        });
        e.writing_nvme = true;
      }
    }
    if (e.writing_nvme && e.io.poll()) {
      wait_io(key, e, "written");
      e.writing_nvme = false;
      e.on_nvme = true;
      e.host.reset();
    }
    if (e.reading_nvme && e.io.poll()) finish_read(key, e);
    if (e.h2d_pending && !e.in_use && e.copied->query()) {
      e.h2d_pending = false;
      if (config_.tier == Tier::nvme) e.host.reset();
    }
  }
}

void CheckpointTier::wait_io(const Key& key, Entry& e, const char* what) {
  try {
    e.io.wait();
  } catch (const Error& err) {
    const std::string file =
        nvme_ && e.has_extent ? nvme_->file_path(nvme_->locate(e.extent.offset).first) : "";
    TZ_THROW(name_of(key.first, key.second) + " could not be " + what + " (swap file " + file +
                 "): " + err.what(),
             "the activation swap file was damaged or the drive failed; check the drive and "
             "nvme_path, then rerun");
  }
  e.io = {};
}

void CheckpointTier::start_read(const Key& key, Entry& e) {
  if (config_.tier == Tier::host) {
    finish_read(key, e);
    return;
  }
  if (e.d2h_pending) {
    e.copied->synchronize();
    advance();
  }
  if (e.writing_nvme) {
    wait_io(key, e, "written");
    e.writing_nvme = false;
    e.on_nvme = true;
    e.host.reset();
  }
  e.host = pool_->allocate(e.bytes, Category::io, "activation checkpoint staging");
  const double t0 = monotonic_seconds();
  e.io = swap_->read(e.extent, e.host.data(), [t0](const offload::IoResult& r) {
    ActivityLog::global().record(Track::nvme_read, "activation checkpoint nvme read", t0,
                                 monotonic_seconds(), r.bytes);
  });
  e.reading_nvme = true;
  ++stats_.reads;
}

void CheckpointTier::finish_read(const Key& key, Entry& e) {
  if (e.reading_nvme) {
    wait_io(key, e, "read");
    e.reading_nvme = false;
  } else {
    ++stats_.reads;
  }
  const size_t s = static_cast<size_t>(e.slot);
  slot_free_[s]->make_wait(*copy_stream_);  // the slot's last reader is done
  const double t0 = monotonic_seconds();
  DeviceSpan span(timeline_, *copy_stream_);
  device_.copy(slots_[s].data(), e.host.data(), e.bytes, CopyKind::host_to_device, *copy_stream_);
  span.close_copy(device_, Track::host_to_device, "activation checkpoint to device", -1, e.bytes,
                  t0);
  e.copied->record(*copy_stream_);
  e.h2d_pending = true;
}

const float* CheckpointTier::begin_read(uint64_t micro_batch, size_t position) {
  const Key key{micro_batch, position};
  Entry& e = find(key, "begin_read");
  TZ_CHECK(e.ended, name_of(micro_batch, position) + " is read before the forward ended it",
           "internal error");
  e.in_use = true;
  e.used = ++clock_;
  if (e.slot >= 0 && !e.h2d_pending && !e.reading_nvme) {
    ++stats_.device_hits;
  } else if (e.slot < 0) {
    e.slot = take_slot(true);
    TZ_CHECK(e.slot >= 0, "no device slot free for " + name_of(micro_batch, position),
             "internal error: more checkpoints in use than device slots");
    start_read(key, e);
  }
  if (e.reading_nvme) finish_read(key, e);
  if (e.h2d_pending) e.copied->make_wait(device_.default_stream());
  prefetch_below(key);
  return slots_[static_cast<size_t>(e.slot)].f32();
}

void CheckpointTier::end_read(uint64_t micro_batch, size_t position) {
  const Key key{micro_batch, position};
  Entry& e = find(key, "end_read");
  release(e);
  entries_.erase(key);
  prefetch_below(key);
  advance();
}

void CheckpointTier::prefetch_below(const Key& key) {
  // The backward's next positions of the same micro-batch, into slots that are free now.
  auto it = entries_.lower_bound(key);
  size_t ahead = 0;
  while (it != entries_.begin() && ahead + 1 < config_.device_slots) {
    --it;
    if (it->first.first != key.first) break;
    Entry& e = *it->second;
    ++ahead;
    if (e.slot >= 0 || !e.ended || e.in_use) continue;
    const int s = take_slot(false);
    if (s < 0) break;
    e.slot = s;
    e.used = ++clock_;
    start_read(it->first, e);
  }
}

void CheckpointTier::drop(uint64_t micro_batch) {
  for (auto it = entries_.lower_bound(Key{micro_batch, 0});
       it != entries_.end() && it->first.first == micro_batch;) {
    release(*it->second);
    it = entries_.erase(it);
  }
}

void CheckpointTier::wait_idle() {
  copy_stream_->synchronize();
  for (auto& [key, e] : entries_) {
    if (e->writing_nvme || e->reading_nvme) (void)e->io.poll();
  }
  advance();
  for (auto& [key, e] : entries_) {
    if (e->writing_nvme) {
      wait_io(key, *e, "written");
      e->writing_nvme = false;
      e->on_nvme = true;
      e->host.reset();
    }
  }
}

std::pair<size_t, uint64_t> CheckpointTier::locate(uint64_t micro_batch, size_t position) const {
  auto it = entries_.find(Key{micro_batch, position});
  TZ_CHECK(nvme_ && it != entries_.end() && it->second->has_extent,
           name_of(micro_batch, position) + " has no NVMe extent", "");
  return nvme_->locate(it->second->extent.offset);
}

}  // namespace tierzero::zero
