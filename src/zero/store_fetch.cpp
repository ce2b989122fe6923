// Stage 3 fetching: getting a unit's full parameters onto the device (NVMe read into pinned
// staging, copy to the device, all-gather), the trace of unit uses and the prefetcher that
// follows it.
//
// Collectives must be issued in the same order on every rank, so every decision that issues a
// gather depends only on the trace, the position in it and the budgets — never on how fast an
// NVMe read or a gather happened to finish on this rank. NVMe reads (local, not collective) are
// started further ahead, as far as the staging buffers allow. A gather whose shard is not ready
// (its NVMe read, or its update behind the previous step, still running) is queued rather than
// waited for; the queue is issued in order at later calls, and flushed before the store issues
// any other collective, so the order of collectives stays the same on every rank.
//
// While the trace is recorded (the first training step, or the step after a unit was used out of
// order), every acquire and every gradient reduction first exchanges (kind, unit) with the group,
// so ranks that diverge fail with an Error naming both units instead of hanging in mismatched
// collectives.
#include <algorithm>
#include <limits>
#include <mutex>
#include <string>

#include "state_arenas.hpp"
#include "tierzero/core/activity_log.hpp"
#include "tierzero/core/error.hpp"
#include "tierzero/core/timer.hpp"
#include "tierzero/zero/partition_store.hpp"

namespace tierzero::zero {

void PartitionStore::begin_pass(PassKind kind) {
  pass_ = kind;
  cursor_ = 0;
  off_trace_ = false;
  if (kind == PassKind::train) {
    counters_ = FetchCounters{};
    recording_ = config_.stage == 3 && !trace_valid_;
    if (recording_) recording_trace_.clear();
  }
  pump_prefetch();
}

void PartitionStore::exchange_trace_word(float kind, float value, const char* what) {
  const auto n = static_cast<size_t>(group_.size());
  if (n == 1) return;
  const std::vector<float> all = all_gather_pair(kind, value, "zero trace check");  // (ranks, 2)
  auto describe = [&](float k, float v) -> std::string {
    const auto u = static_cast<size_t>(v < 0.0f ? 0.0f : v);
    const std::string name = u < plan_.num_units() ? "unit '" + plan_.units()[u].name + "'"
                                                   : "unit " + std::to_string(u);
    if (k == 1.0f) return "acquires " + name;
    if (k == 2.0f) return "reduces the gradients of " + name;
    if (k == 3.0f) return "ends the step after " + std::to_string(u) + " unit uses";
    return "sends an unknown trace word";
  };
  for (size_t r = 0; r < n; ++r) {
    if (all[2 * r] == kind && all[2 * r + 1] == value) continue;
    TZ_THROW("ZeRO stage 3: ranks use the model's units in different orders (" + group_.describe() +
                 ", call " + std::to_string(recording_trace_.size() + 1) +
                 " of the step being traced): rank " + std::to_string(group_.rank()) + " " +
                 describe(kind, value) + " while rank " + std::to_string(r) + " " +
                 describe(all[2 * r], all[2 * r + 1]) + " (this rank " + what + " it)",
             "every rank must run the same forward and backward over the same units; stage 3 "
             "gathers each unit collectively, so a rank that takes another path would hang");
  }
}

void PartitionStore::check_trace_position(size_t unit) {
  exchange_trace_word(1.0f, static_cast<float>(unit), "acquires");
  recording_trace_.push_back(unit);
}

void PartitionStore::check_trace_end() {
  exchange_trace_word(3.0f, static_cast<float>(recording_trace_.size()), "ends the step at");
}

bool PartitionStore::read_startable(size_t unit) {
  const size_t limit = std::max<size_t>(1, config_.nvme_read_buffers);
  std::lock_guard<std::mutex> lock(optimizer_mutex_);
  if (handoff_[unit]) return true;  // taking it costs no buffer and no wait
  const bool on_disk = !optimizer_thread_.joinable() || update_reached_locked(unit, true);
  return on_disk && handoffs_held_ + reads_in_flight_.load() < limit;
}

void PartitionStore::start_read(size_t unit) {
  UnitState& s = units_[unit];
  wait_optimizer(unit);
  offload::PinnedBuffer handed;
  {
    // The staging buffer is counted before it exists, under the lock the NVMe optimizer takes to
    // count its handoffs, so the two never overshoot the budget together.
    std::lock_guard<std::mutex> lock(optimizer_mutex_);
    handed = std::move(handoff_[unit]);
    if (handed) --handoffs_held_;
    ++reads_in_flight_;
  }
  if (handed) {
    // The update's new shard, still in memory: no read of what is being written.
    s.staging = std::move(handed);
    ++counters_.handoffs;
  } else {
    try {
      wait_unit_on_disk(unit);  // the background update may still be writing these extents
      const size_t n = plan_.partition(unit).shard_numel;
      const size_t eb = arenas_->elem_bytes(StateBuffer::param_shard);
      s.staging = host_pool_->allocate(n * eb, Category::io, "zero nvme param staging");
      if (n > 0) s.reads = arenas_->read(StateBuffer::param_shard, unit, 0, n, s.staging.data());
    } catch (...) {
      wait_io_quietly(s.reads);
      s.staging.reset();
      --reads_in_flight_;
      throw;
    }
    ++counters_.nvme_reads;
  }
  s.fetch = Fetch::reading;
}

bool PartitionStore::gather_ready(size_t unit) {
  if (!update_published(unit)) return false;
  if (placement_[unit].param != Tier::nvme) return true;
  const UnitState& s = units_[unit];
  return s.fetch == Fetch::reading && io_finished(s.reads);
}

void PartitionStore::start_gather(size_t unit) {
  UnitState& s = units_[unit];
  const Tier home = placement_[unit].param;
  const bool direct =
      group_.size() == 1 && home == Tier::device && config_.placement.working == DType::f32;
  // The unit counts against the live budget from now on, issued or queued, so that every
  // budget decision is the same on every rank however fast its shards arrive.
  if (!direct && !persistent(unit)) live_elems_ += plan_.partition(unit).padded_numel;
  if (home == Tier::nvme && s.fetch == Fetch::none && read_startable(unit)) start_read(unit);
  if (deferred_gathers_.empty() && gather_ready(unit)) {
    issue_gather(unit);
    return;
  }
  s.deferred = true;
  deferred_gathers_.push_back(unit);
}

void PartitionStore::issue_deferred_gathers(size_t through) {
  while (!deferred_gathers_.empty()) {
    const size_t u = deferred_gathers_.front();
    UnitState& s = units_[u];
    const bool must = through < units_.size() && units_[through].deferred;
    if (placement_[u].param == Tier::nvme && s.fetch == Fetch::none) {
      if (!must && !read_startable(u)) return;
      start_read(u);
    }
    if (!must && !gather_ready(u)) return;
    deferred_gathers_.pop_front();
    s.deferred = false;
    issue_gather(u);
  }
}

void PartitionStore::flush_deferred_gathers() {
  if (!deferred_gathers_.empty()) issue_deferred_gathers(deferred_gathers_.back());
}

void PartitionStore::issue_gather(size_t unit) {
  wait_optimizer(unit);  // the background update publishes this unit's parameters
  UnitState& s = units_[unit];
  const UnitPartition& p = plan_.partition(unit);
  const Tier home = placement_[unit].param;
  if (s.fetch == Fetch::none && home == Tier::nvme) start_read(unit);
  const DType working = config_.placement.working;
  if (group_.size() == 1 && home == Tier::device && working == DType::f32) {
    // One rank: the shard is the whole unit and already where compute reads it; nothing to
    // gather or copy (unit_params hands out the shard itself).
    s.direct = true;
    s.fetch = Fetch::gathering;
    return;
  }
  const size_t eb = dtype_size(working);
  s.gathered = allocator_.allocate(p.padded_numel * eb, Category::param,
                                   "zero gathered params");  // (padded_numel) working type
  Stream& st = device_.default_stream();
  // This rank's block of the gathered buffer: the all-gather runs in place.
  void* slot = static_cast<std::byte*>(s.gathered.data()) + p.shard_begin(plan_.rank()) * eb;
  const size_t bytes = p.shard_numel * eb;
  const void* send = slot;
  const auto u = static_cast<int64_t>(unit);
  if (home == Tier::device) {
    send = arenas_->raw(StateBuffer::param_shard, unit);
  } else {
    const void* src = nullptr;
    if (home == Tier::host) {
      src = arenas_->raw(StateBuffer::param_shard, unit);
    } else {
      const double t0 = monotonic_seconds();
      wait_io(s.reads);
      const double t1 = monotonic_seconds();
      counters_.stall_s += t1 - t0;
      if (t1 > t0) ActivityLog::global().record(Track::stall, "wait nvme read", t0, t1, 0, u);
      --reads_in_flight_;
      src = s.staging.data();
    }
    const double t0 = monotonic_seconds();
    device_.copy(slot, src, bytes, CopyKind::host_to_device, st);
    st.synchronize();
    ActivityLog::global().record(Track::host_to_device, "param shard to device", t0,
                                 monotonic_seconds(), bytes, u);
    s.staging.reset();
  }
  st.synchronize();  // the shard must be ready before the engine reads it
  s.gather_issued_s = monotonic_seconds();
  if (group_.size() == 1) {
    if (send != slot) device_.copy(slot, send, bytes, CopyKind::device_to_device, st);
  } else if (p.padded_numel > 0) {
    s.gather = group_.all_gather_async(send, s.gathered.data(), p.shard_numel, working);
    ++counters_.gathers;
  }
  s.fetch = Fetch::gathering;
}

void PartitionStore::finish_fetch(size_t unit, bool stall) {
  UnitState& s = units_[unit];
  if (s.deferred) issue_deferred_gathers(unit);
  if (s.direct) {
    s.fetch = Fetch::ready;
    return;
  }
  if (s.fetch == Fetch::gathering) {
    const double t0 = monotonic_seconds();
    if (s.gather.pending()) s.gather.wait();
    const double t1 = monotonic_seconds();
    const auto u = static_cast<int64_t>(unit);
    if (stall) {
      counters_.stall_s += t1 - t0;
      if (t1 > t0) ActivityLog::global().record(Track::stall, "wait gather", t0, t1, 0, u);
    }
    ActivityLog::global().record(
        Track::collective, "all_gather", s.gather_issued_s, t1,
        plan_.partition(unit).padded_numel * dtype_size(config_.placement.working), u);
  }
  if (config_.placement.working != DType::f32 && s.gathered) {
    // The kernels compute in fp32 from 16-bit storage: widened on the device, in stream order
    // (the gathered block is reused only after the conversion that reads it).
    const size_t padded = plan_.partition(unit).padded_numel;
    s.compute = allocator_.allocate(padded * sizeof(float), Category::param,
                                    "zero fp32 compute params");  // (padded_numel) fp32
    device_.kernels().convert_to_f32(s.compute.f32(), s.gathered.data(), config_.placement.working,
                                     padded);
    s.gathered.reset();
  }
  s.fetch = Fetch::ready;
}

void PartitionStore::drop_gathered(size_t unit) {
  UnitState& s = units_[unit];
  // Another rank may have issued this gather already: it must be issued here too.
  if (s.deferred) issue_deferred_gathers(unit);
  if (s.fetch == Fetch::reading) {
    wait_io(s.reads);  // the staging buffer must outlive its reads
    --reads_in_flight_;
  }
  if (s.gather.pending()) s.gather.wait();
  if (s.gathered || s.compute) {
    if (!persistent(unit)) live_elems_ -= plan_.partition(unit).padded_numel;
    s.gathered.reset();  // stream-ordered: later work reuses the block after this unit's work
    s.compute.reset();
  }
  s.staging.reset();
  s.fetch = Fetch::none;
  s.prefetched = false;
  s.direct = false;
}

void PartitionStore::drop_unused_fetches() {
  for (size_t u = 0; u < units_.size(); ++u)
    if (units_[u].param_refs == 0) drop_gathered(u);
}

size_t PartitionStore::next_use_distance(size_t unit) const {
  size_t distance = 0;
  for (size_t i = cursor_; i < trace_.size(); ++i) {
    if (trace_[i] == unit) return distance;
    distance += plan_.partition(trace_[i]).padded_numel;
  }
  return std::numeric_limits<size_t>::max();
}

bool PartitionStore::keep_after_release(size_t unit) const {
  if (pass_ != PassKind::train || recording_ || off_trace_ || !trace_valid_) return false;
  const size_t d = next_use_distance(unit);
  // Keeping a unit must leave room for the prefetch window, or retained units would starve the
  // prefetcher and turn the next fetches into on-demand ones.
  const size_t room = config_.max_live_elems > config_.prefetch_bucket_elems
                          ? config_.max_live_elems - config_.prefetch_bucket_elems
                          : 0;
  return d != std::numeric_limits<size_t>::max() && d <= config_.max_reuse_distance &&
         live_elems_ <= room;
}

void PartitionStore::pump_prefetch() {
  if (config_.stage != 3 || pass_ != PassKind::train || recording_ || off_trace_ || !trace_valid_)
    return;
  issue_deferred_gathers();
  std::vector<char> seen(units_.size(), 0);
  size_t window = 0;  // elements gathered (or being gathered) ahead of use
  bool gathering = config_.prefetch_bucket_elems > 0;
  for (size_t i = cursor_; i < trace_.size(); ++i) {
    const size_t u = trace_[i];
    if (seen[u]) continue;
    seen[u] = 1;
    UnitState& s = units_[u];
    if (s.param_refs > 0) continue;
    // Gathered, being gathered or queued (an NVMe read alone does not count: whether it has
    // started depends on this rank's timing, and this decision must not).
    const bool held = s.deferred || s.fetch == Fetch::gathering || s.fetch == Fetch::ready;
    if (persistent(u) && held) continue;  // held until the step
    const size_t padded = plan_.partition(u).padded_numel;
    if (gathering) {
      const bool fits_bucket = window == 0 || window + padded <= config_.prefetch_bucket_elems;
      const bool fits_live =
          held || persistent(u) || live_elems_ + padded <= config_.max_live_elems;
      if (fits_bucket && fits_live) {
        window += padded;
        if (!held) {
          start_gather(u);
          s.prefetched = true;
        }
        continue;
      }
      gathering = false;
    }
    // Beyond the gather window: start NVMe reads early, as far as the staging buffers allow.
    if (placement_[u].param != Tier::nvme || s.fetch != Fetch::none || s.deferred) continue;
    if (!read_startable(u)) break;  // the staging budget is full, or the update is not on disk
    start_read(u);
    s.prefetched = true;
  }
}

}  // namespace tierzero::zero
