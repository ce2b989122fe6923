// The NVMe optimizer pipeline of the partition store: AdamW over NVMe-resident master weights and
// Adam moments, streamed chunk by chunk through a fixed set of pinned slots (read -> update ->
// write), and the hand-over of its results to the rest of the store.
//
// The disk, not the arithmetic, bounds this step (12 bytes per parameter read and written), so
// the pipeline keeps the disk busy while the training thread computes:
//   - the slots outlive the step: once a step's writes are on disk, the slots start reading the
//     next step's first chunks, which arrive during the next forward and backward;
//   - at stage 3 on the CPU backend the pipeline runs on its own thread behind the next forward;
//     each unit is published as soon as its own update is computed (update_state_), and a unit
//     whose parameters live on NVMe hands its new shard straight to the next fetch (handoff_), so
//     the forward neither waits for the write nor reads back what was just written;
//   - refills never wait for a write while another chunk is ready to be updated.
// The chunks are the same elementwise calls as the in-memory update, so the result is bitwise
// the same.
#include <algorithm>
#include <cstring>
#include <mutex>
#include <string>

#include "segment_update.hpp"
#include "state_arenas.hpp"
#include "tierzero/core/activity_log.hpp"
#include "tierzero/core/error.hpp"
#include "tierzero/core/timer.hpp"
#include "tierzero/kernels/cpu_ops.hpp"
#include "tierzero/zero/partition_store.hpp"

namespace tierzero::zero {

void PartitionStore::setup_optimizer_swap() {
  update_state_.assign(units_.size(), kUpdateDone);
  handoff_.resize(units_.size());
  const size_t chunk = arenas_->chunk_elems;
  for (size_t u = 0; u < units_.size(); ++u) {
    if (placement_[u].optimizer != Tier::nvme) continue;
    const size_t n = plan_.partition(u).shard_numel;
    for (size_t at = 0; at < n; at += chunk)
      swap_chunks_.push_back({u, at, std::min(chunk, n - at)});
  }
  const OptimizerSwapShape shape =
      optimizer_swap_shape(plan_, placement_, chunk, config_.optimizer_swap_buffers);
  const size_t largest = shape.largest_chunk;
  swap_slots_.resize(shape.slots);
  for (SwapSlot& s : swap_slots_) {
    for (offload::PinnedBuffer* b : {&s.master, &s.m, &s.v}) {
      *b = host_pool_->allocate(largest * sizeof(float), Category::io, "zero nvme optim slot");
      // The slots live as long as the store: as io_uring fixed buffers the kernel does not pin
      // their pages again for every transfer.
      nvme_->register_memory(b->data(), b->capacity());
    }
  }
}

void PartitionStore::release_optimizer_swap() {
  wait_swap_io_quietly();
  for (SwapSlot& s : swap_slots_)
    for (offload::PinnedBuffer* b : {&s.master, &s.m, &s.v}) {
      if (*b) nvme_->unregister_memory(b->data());
      b->reset();
    }
}

void PartitionStore::issue_swap_read(size_t chunk) {
  const SwapChunk& c = swap_chunks_[chunk];
  SwapSlot& s = swap_slots_[chunk % swap_slots_.size()];
  auto append = [&](std::vector<offload::IoHandle> from) {
    s.reads.insert(s.reads.end(), from.begin(), from.end());
  };
  append(arenas_->read(master_kind(c.unit), c.unit, c.begin, c.count, s.master.data()));
  append(arenas_->read(StateBuffer::adam_m, c.unit, c.begin, c.count, s.m.data()));
  append(arenas_->read(StateBuffer::adam_v, c.unit, c.begin, c.count, s.v.data()));
}

void PartitionStore::wait_swap_io_quietly() {
  for (SwapSlot& s : swap_slots_) {
    wait_io_quietly(s.reads);
    wait_io_quietly(s.writes);
  }
}

void PartitionStore::discard_staged_swap_reads() {
  for (SwapSlot& s : swap_slots_) wait_io_quietly(s.reads);
  swap_staged_ = false;
}

void PartitionStore::set_update_state(size_t unit, uint8_t state) {
  std::lock_guard<std::mutex> lock(optimizer_mutex_);
  update_state_[unit] = state;
  optimizer_cv_.notify_all();
}

void PartitionStore::update_units_on_nvme(const kernels::AdamWParams& base, bool background) {
  const size_t n = swap_chunks_.size();
  if (n == 0) return;
  const size_t slots = swap_slots_.size();
  const DType working = config_.placement.working;
  const size_t eb = dtype_size(working);
  const size_t handoff_limit = std::max<size_t>(1, config_.nvme_read_buffers);
  auto last_chunk_of_unit = [&](size_t i) {
    return i + 1 == n || swap_chunks_[i + 1].unit != swap_chunks_[i].unit;
  };

  size_t next_read = std::min(slots, n);  // chunks [0, next_read) have their reads issued
  if (!swap_staged_)
    for (size_t i = 0; i < next_read; ++i) issue_swap_read(i);
  swap_staged_ = false;
  size_t on_disk = 0;  // chunks [0, on_disk) are written back
  // Waits for the writes of chunks [on_disk, end) (in order, so a slot's writes are always its
  // own chunk's); a unit whose last chunk is on disk is done.
  auto written_through = [&](size_t end) {
    for (; on_disk < end; ++on_disk) {
      wait_io(swap_slots_[on_disk % slots].writes);
      if (background && last_chunk_of_unit(on_disk))
        set_update_state(swap_chunks_[on_disk].unit, kUpdateDone);
    }
  };

  offload::PinnedBuffer handoff;  // (shard_numel) working type: the unit being updated
  try {
    for (size_t i = 0; i < n; ++i) {
      // Refill the slots of chunks already updated, but wait for a write only when chunk i
      // itself still needs its slot.
      while (next_read < n && next_read < i + slots) {
        const size_t previous = next_read - slots;  // the slot's last chunk, updated already
        if (next_read != i && !io_finished(swap_slots_[previous % slots].writes)) break;
        written_through(previous + 1);
        issue_swap_read(next_read++);
      }
      const SwapChunk& c = swap_chunks_[i];
      SwapSlot& s = swap_slots_[i % slots];
      const auto u = static_cast<int64_t>(c.unit);
      const double t0 = monotonic_seconds();
      wait_io(s.reads);
      const double t1 = monotonic_seconds();
      if (t1 > t0)
        ActivityLog::global().record(Track::stall, "wait nvme optimizer read", t0, t1, 0, u);
      const float* grad = grad_shard_ptr(c.unit) + c.begin;
      auto* param = static_cast<float*>(s.master.data());
      auto* m = static_cast<float*>(s.m.data());
      auto* v = static_cast<float*>(s.v.data());
      for_segments(plan_.segments(c.unit), c.begin, c.count, base,
                   static_cast<float>(optimizer_.weight_decay),
                   [&](size_t o, size_t count, const kernels::AdamWParams& p) {
                     kernels::cpu::adamw_update(param + o, m + o, v + o, grad + o, count, p);
                   });
      ActivityLog::global().record(Track::optimizer, "adamw nvme chunk", t1, monotonic_seconds(), 0,
                                   u);
      if (!placement_[c.unit].master_is_param)
        publish_params(c.unit, param, c.begin, c.count, false);
      if (c.begin == 0 && config_.stage == 3 && placement_[c.unit].param == Tier::nvme) {
        std::lock_guard<std::mutex> lock(optimizer_mutex_);
        if (handoffs_held_ + reads_in_flight_.load() < handoff_limit) {
          try {
            handoff = host_pool_->allocate(plan_.partition(c.unit).shard_numel * eb, Category::io,
                                           "zero param handoff");
            ++handoffs_held_;
          } catch (const Error&) {
            // No room in the host pool: the next fetch reads the shard from NVMe instead.
          }
        }
      }
      if (handoff) {
        void* dst = static_cast<std::byte*>(handoff.data()) + c.begin * eb;
        if (working == DType::f32)
          std::memcpy(dst, param, c.count * sizeof(float));
        else
          convert_from_f32(dst, working, param, c.count);
      }
      auto append = [&](std::vector<offload::IoHandle> from) {
        s.writes.insert(s.writes.end(), from.begin(), from.end());
      };
      append(arenas_->write(master_kind(c.unit), c.unit, c.begin, c.count, param));
      append(arenas_->write(StateBuffer::adam_m, c.unit, c.begin, c.count, m));
      append(arenas_->write(StateBuffer::adam_v, c.unit, c.begin, c.count, v));
      if (last_chunk_of_unit(i)) {
        // Every chunk of the unit is updated. Its new parameters are published — in the handoff
        // when there is one, else in its (host or device) parameter arena or, once written, on
        // NVMe — and in the background its gradient shard, read now, is cleared for the next
        // accumulation.
        if (background)
          std::memset(grad_shard_ptr(c.unit), 0,
                      plan_.partition(c.unit).shard_numel * sizeof(float));  // host (CPU)
        std::lock_guard<std::mutex> lock(optimizer_mutex_);
        if (handoff) handoff_[c.unit] = std::move(handoff);
        if (background) {
          grads_cleared_[c.unit] = 1;
          update_state_[c.unit] = kUpdatePublished;
          optimizer_cv_.notify_all();
        }
      }
    }
    written_through(n);
    // The next step's first chunks load while the next forward and backward run.
    for (size_t i = 0; i < std::min(slots, n); ++i) issue_swap_read(i);
    swap_staged_ = true;
  } catch (...) {
    // No slot may be reused or freed under a transfer still in flight; the staged reads are
    // gone, and the half-built handoff goes back to the pool.
    wait_swap_io_quietly();
    swap_staged_ = false;
    if (handoff) {
      handoff.reset();
      std::lock_guard<std::mutex> lock(optimizer_mutex_);
      --handoffs_held_;
    }
    throw;
  }
}

bool PartitionStore::update_reached_locked(size_t unit, bool on_disk) const {
  const uint8_t state = update_state_[unit];
  return optimizer_error_ != nullptr || (on_disk ? state == kUpdateDone : state != kUpdating);
}

bool PartitionStore::update_published(size_t unit) {
  if (!optimizer_thread_.joinable()) return true;
  std::lock_guard<std::mutex> lock(optimizer_mutex_);
  return update_reached_locked(unit, false);
}

void PartitionStore::wait_optimizer(size_t unit) {
  wait_update(unit, false);
}

void PartitionStore::wait_unit_on_disk(size_t unit) {
  wait_update(unit, true);
}

void PartitionStore::wait_update(size_t unit, bool on_disk) {
  if (!optimizer_thread_.joinable()) return;
  std::unique_lock<std::mutex> lock(optimizer_mutex_);
  auto reached = [&] { return update_reached_locked(unit, on_disk); };
  if (!reached()) {
    const double t0 = monotonic_seconds();
    optimizer_cv_.wait(lock, reached);
    const double t1 = monotonic_seconds();
    counters_.stall_s += t1 - t0;
    ActivityLog::global().record(Track::stall,
                                 on_disk ? "wait nvme optimizer write" : "wait nvme optimizer", t0,
                                 t1, 0, static_cast<int64_t>(unit));
  }
  if (optimizer_error_) {
    lock.unlock();
    wait_optimizer_all();  // rethrows
  }
}

void PartitionStore::wait_optimizer_all() {
  if (optimizer_thread_.joinable()) optimizer_thread_.join();
  std::exception_ptr error;
  {
    std::lock_guard<std::mutex> lock(optimizer_mutex_);
    std::swap(error, optimizer_error_);
    // A handoff nobody fetched is stale once the next update runs (or the values are loaded).
    for (offload::PinnedBuffer& b : handoff_) b.reset();
    handoffs_held_ = 0;
  }
  if (error) std::rethrow_exception(error);
}

}  // namespace tierzero::zero
