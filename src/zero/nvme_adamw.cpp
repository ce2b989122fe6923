// The NVMe optimizer pipeline (see nvme_adamw.hpp).
#include "nvme_adamw.hpp"

#include <algorithm>
#include <cstring>
#include <string>

#include "segment_update.hpp"
#include "tierzero/core/activity_log.hpp"
#include "tierzero/core/error.hpp"
#include "tierzero/core/timer.hpp"
#include "tierzero/kernels/cpu_ops.hpp"

namespace tierzero::zero {

NvmeAdamW::NvmeAdamW(ShardStorage& storage, BackgroundUpdate& background, const StoreConfig& config,
                     const AdamWConfig& adamw)
    : storage_(storage), background_(background), stage_(config.stage), adamw_(adamw) {
  const PartitionPlan& plan = storage_.plan();
  const size_t chunk = storage_.arenas().chunk_elems;
  for (size_t u = 0; u < plan.num_units(); ++u) {
    if (storage_.placement(u).optimizer != Tier::nvme) continue;
    const size_t n = plan.partition(u).shard_numel;
    for (size_t at = 0; at < n; at += chunk) chunks_.push_back({u, at, std::min(chunk, n - at)});
  }
  const OptimizerSwapShape shape =
      optimizer_swap_shape(plan, storage_.placement(), chunk, config.optimizer_swap_buffers);
  bool grads_on_nvme = false;
  for (size_t u = 0; u < plan.num_units(); ++u)
    grads_on_nvme = grads_on_nvme || storage_.placement(u).grad == Tier::nvme;
  slots_.resize(shape.slots);
  for (Slot& s : slots_) {
    for (offload::PinnedBuffer* b : {&s.master, &s.m, &s.v, &s.grad}) {
      if (b == &s.grad && !grads_on_nvme) continue;
      *b = storage_.host_pool()->allocate(shape.largest_chunk * sizeof(float), Category::io,
                                          "zero nvme optim slot");
      // The slots live as long as the store: as io_uring fixed buffers the kernel does not pin
      // their pages again for every transfer.
      storage_.nvme()->register_memory(b->data(), b->capacity());
    }
  }
}

NvmeAdamW::~NvmeAdamW() {
  wait_io_quietly_all();
  for (Slot& s : slots_)
    for (offload::PinnedBuffer* b : {&s.master, &s.m, &s.v, &s.grad}) {
      if (*b) storage_.nvme()->unregister_memory(b->data());
      b->reset();
    }
}

void NvmeAdamW::issue_grad_read(size_t chunk, size_t position) {
  const Chunk& c = chunks_[chunk];
  if (storage_.placement(c.unit).grad != Tier::nvme) return;
  Slot& s = slots_[position % slots_.size()];
  if (storage_.grad_clear(c.unit)) {
    std::memset(s.grad.data(), 0, c.count * sizeof(float));
    return;
  }
  std::vector<offload::IoHandle> reads =
      storage_.arenas().read(StateBuffer::grad_shard, c.unit, c.begin, c.count, s.grad.data());
  s.reads.insert(s.reads.end(), reads.begin(), reads.end());
}

void NvmeAdamW::issue_read(size_t chunk, size_t position) {
  const Chunk& c = chunks_[chunk];
  Slot& s = slots_[position % slots_.size()];
  StateArenas& arenas = storage_.arenas();
  auto append = [&](std::vector<offload::IoHandle> from) {
    s.reads.insert(s.reads.end(), from.begin(), from.end());
  };
  append(arenas.read(storage_.master_kind(c.unit), c.unit, c.begin, c.count, s.master.data()));
  append(arenas.read(StateBuffer::adam_m, c.unit, c.begin, c.count, s.m.data()));
  append(arenas.read(StateBuffer::adam_v, c.unit, c.begin, c.count, s.v.data()));
}

void NvmeAdamW::wait_io_quietly_all() {
  for (Slot& s : slots_) {
    wait_io_quietly(s.reads);
    wait_io_quietly(s.writes);
  }
}

void NvmeAdamW::discard_staged_reads() {
  for (Slot& s : slots_) wait_io_quietly(s.reads);
  staged_ = false;
}

void NvmeAdamW::step(const kernels::AdamWParams& base, bool behind_forward,
                     const std::vector<char>& updated) {
  // The chunks of the units not updated yet (during the backward), in unit order.
  std::vector<size_t> order;
  for (size_t i = 0; i < chunks_.size(); ++i)
    if (updated.empty() || !updated[chunks_[i].unit]) order.push_back(i);
  if (order.empty()) return;
  if (!behind_forward) {
    update_chunks(order, base, false, true);
    return;
  }
  // Every access to a unit's parameters or gradient shard waits until that unit's update is
  // published; the pipeline clears each gradient shard once it has read it.
  std::vector<size_t> units;
  for (size_t i : order)
    if (units.empty() || units.back() != chunks_[i].unit) units.push_back(chunks_[i].unit);
  background_.start(
      units, [this, base, order = std::move(order)] { update_chunks(order, base, true, true); });
}

void NvmeAdamW::update_unit(size_t unit, const kernels::AdamWParams& base) {
  std::vector<size_t> order;
  for (size_t i = 0; i < chunks_.size(); ++i)
    if (chunks_[i].unit == unit) order.push_back(i);
  if (order.empty()) return;
  // No handoff: the next forward is a step away, and a handoff would hold a staging buffer that
  // the rest of the backward's parameter reads need.
  update_chunks(order, base, false, false);
}

void NvmeAdamW::update_chunks(const std::vector<size_t>& order, const kernels::AdamWParams& base,
                              bool behind_forward, bool handoffs) {
  const size_t n = order.size();
  const size_t slots = slots_.size();
  const DType working = storage_.working();
  const size_t eb = dtype_size(working);
  StateArenas& arenas = storage_.arenas();
  kernels::Kernels& k = storage_.host_kernels();
  auto last_of_unit = [&](size_t i) {
    return i + 1 == n || chunks_[order[i + 1]].unit != chunks_[order[i]].unit;
  };

  // Slot i % slots holds order[i]. The staged reads are chunks 0, 1, ... in their slots: usable
  // when this update starts with them, else dropped.
  const bool whole = n == chunks_.size();
  if (staged_ && !whole) discard_staged_reads();
  size_t next_read = std::min(slots, n);  // order[0, next_read) have their reads issued
  for (size_t i = 0; i < next_read; ++i) {
    if (!staged_) issue_read(order[i], i);
    issue_grad_read(order[i], i);
  }
  staged_ = false;
  size_t on_disk = 0;  // chunks [0, on_disk) are written back
  // Waits for the writes of chunks [on_disk, end) (in order, so a slot's writes are always its
  // own chunk's); a unit whose last chunk is on disk is done.
  auto written_through = [&](size_t end) {
    for (; on_disk < end; ++on_disk) {
      wait_io(slots_[on_disk % slots].writes);
      if (behind_forward && last_of_unit(on_disk))
        background_.mark_on_disk(chunks_[order[on_disk]].unit);
    }
  };

  offload::PinnedBuffer handoff;  // (shard_numel) working type: the unit being updated
  bool reserved = false;          // handoff counts against the staging budget
  try {
    for (size_t i = 0; i < n; ++i) {
      // Refill the slots of chunks already updated, but wait for a write only when chunk i
      // itself still needs its slot.
      while (next_read < n && next_read < i + slots) {
        const size_t previous = next_read - slots;  // the slot's last chunk, updated already
        if (next_read != i && !io_finished(slots_[previous % slots].writes)) break;
        written_through(previous + 1);
        issue_grad_read(order[next_read], next_read);
        issue_read(order[next_read], next_read);
        ++next_read;
      }
      const Chunk& c = chunks_[order[i]];
      Slot& s = slots_[i % slots];
      const auto u = static_cast<int64_t>(c.unit);
      const double t0 = monotonic_seconds();
      wait_io(s.reads);
      const double t1 = monotonic_seconds();
      if (t1 > t0)
        ActivityLog::global().record(Track::stall, "wait nvme optimizer read", t0, t1, 0, u);
      const bool grad_on_nvme = storage_.placement(c.unit).grad == Tier::nvme;
      const float* grad = grad_on_nvme ? static_cast<const float*>(s.grad.data())
                                       : storage_.grad_shard_ptr(c.unit) + c.begin;
      auto* param = static_cast<float*>(s.master.data());
      auto* m = static_cast<float*>(s.m.data());
      auto* v = static_cast<float*>(s.v.data());
      // (c.count) the chunk's bf16 working parameters when they live in host memory: rounded in
      // the update's own pass (or null: published after it).
      uint16_t* host_bf16 = storage_.host_bf16_params(c.unit);
      if (host_bf16 != nullptr) host_bf16 += c.begin;
      for_segments(storage_.plan().segments(c.unit), c.begin, c.count, base,
                   static_cast<float>(adamw_.weight_decay),
                   [&](size_t o, size_t count, const kernels::AdamWParams& p) {
                     if (host_bf16 != nullptr)
                       kernels::cpu::adamw_update_with_copy(param + o, m + o, v + o, grad + o,
                                                            host_bf16 + o, count, p);
                     else
                       k.adamw_update(param + o, m + o, v + o, grad + o, count, p);
                   });
      ActivityLog::global().record(Track::optimizer, "adamw nvme chunk", t1, monotonic_seconds(), 0,
                                   u);
      if (!storage_.placement(c.unit).master_is_param && host_bf16 == nullptr)
        storage_.publish_params(c.unit, param, c.begin, c.count, false);
      if (handoffs && c.begin == 0 && stage_ == 3 &&
          storage_.placement(c.unit).param == Tier::nvme && background_.reserve_handoff()) {
        reserved = true;
        try {
          handoff =
              storage_.host_pool()->allocate(storage_.plan().partition(c.unit).shard_numel * eb,
                                             Category::io, "zero param handoff");
        } catch (const Error&) {
          // No room in the host pool: the next fetch reads the shard from NVMe instead.
          background_.release_handoff();
          reserved = false;
        }
      }
      if (handoff) {
        void* dst = static_cast<std::byte*>(handoff.data()) + c.begin * eb;
        if (working == DType::f32)
          std::memcpy(dst, param, c.count * sizeof(float));
        else
          k.convert_from_f32(dst, working, param, c.count);
      }
      auto append = [&](std::vector<offload::IoHandle> from) {
        s.writes.insert(s.writes.end(), from.begin(), from.end());
      };
      append(arenas.write(storage_.master_kind(c.unit), c.unit, c.begin, c.count, param));
      append(arenas.write(StateBuffer::adam_m, c.unit, c.begin, c.count, m));
      append(arenas.write(StateBuffer::adam_v, c.unit, c.begin, c.count, v));
      if (last_of_unit(i)) {
        // Every chunk of the unit is updated. Its new parameters are published — in the handoff
        // when there is one, else in its (host or device) parameter arena or, once written, on
        // NVMe — and behind the forward its gradient shard, read now, is cleared for the next
        // accumulation.
        if (behind_forward && grad_on_nvme)
          storage_.set_grad_clear(c.unit, true);
        else if (behind_forward)
          std::memset(storage_.grad_shard_ptr(c.unit), 0,
                      storage_.plan().partition(c.unit).shard_numel * sizeof(float));  // host
        background_.publish(c.unit, std::move(handoff), behind_forward);
        handoff = offload::PinnedBuffer();
        reserved = false;
      }
    }
    written_through(n);
    // The next step's first chunks load while the next forward and backward run (only after a
    // whole step: a unit updated during the backward leaves the slots empty).
    if (whole) {
      for (size_t i = 0; i < std::min(slots, n); ++i) issue_read(i, i);
      staged_ = true;
    }
  } catch (...) {
    // No slot may be reused or freed under a transfer still in flight; the staged reads are
    // gone, and the half-built handoff goes back to the pool.
    wait_io_quietly_all();
    staged_ = false;
    if (handoff) handoff.reset();
    if (reserved) background_.release_handoff();
    throw;
  }
}

}  // namespace tierzero::zero
