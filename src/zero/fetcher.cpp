// The fetcher's hand-out and fetch path: acquire/release, NVMe reads into staging, copies to the
// device, the all-gather and its queue (see fetcher.hpp). The trace and the prefetch policy are
// in fetch_trace.cpp.
#include "fetcher.hpp"

#include <cstdint>
#include <string>
#include <vector>

#include "tierzero/comm/timed_collective.hpp"
#include "tierzero/core/activity_log.hpp"
#include "tierzero/core/dtype.hpp"
#include "tierzero/core/error.hpp"
#include "tierzero/core/timer.hpp"
#include "tierzero/device/device_span.hpp"

namespace tierzero::zero {

Fetcher::Fetcher(const StoreConfig& config, ShardStorage& storage, BackgroundUpdate& background,
                 comm::Communicator& group, FetchCounters& counters)
    : config_(config),
      storage_(storage),
      background_(background),
      group_(group),
      counters_(counters),
      plan_(storage.plan()),
      device_(storage.device()),
      units_(storage.plan().num_units()) {}

Fetcher::~Fetcher() {
  for (UnitFetch& s : units_) {
    wait_io_quietly(s.reads);
    s.gather = comm::CommRequest();  // waits (an error is logged)
    try {
      if (s.ready) s.ready->synchronize();  // a copy still writing the buffers freed below
    } catch (const Error&) {
    }
  }
}

bool Fetcher::persistent(size_t unit) const {
  return config_.stage == 3 && plan_.units().at(unit).numel < config_.param_persistence_threshold;
}

bool Fetcher::is_direct(size_t unit) const {
  return group_.size() == 1 && storage_.placement(unit).param == Tier::device &&
         storage_.working() == DType::f32;
}

bool Fetcher::widens() const {
  return storage_.working() != DType::f32 && config_.compute == DType::f32;
}

const void* Fetcher::unit_params(size_t unit) {
  UnitFetch& s = units_[unit];
  if (s.direct) return storage_.arenas().ptr(StateBuffer::param_shard, unit);
  if (s.compute) return s.compute.f32();
  if (config_.stage < 3) return storage_.full_params_raw(unit);
  return s.gathered.data();
}

const void* Fetcher::acquire(size_t unit) {
  UnitFetch& s = units_[unit];
  if (config_.stage < 3) {
    if (widens() && !s.compute) {
      // The kernels compute in fp32 from 16-bit storage: a converted copy while in use.
      const size_t padded = plan_.partition(unit).padded_numel;
      s.compute = storage_.allocator().allocate(padded * sizeof(float), Category::param,
                                                "zero fp32 compute params");  // (padded) fp32
      device_.kernels().convert_to_f32(s.compute.f32(), storage_.full_params_raw(unit),
                                       storage_.working(), padded);
    }
    ++s.refs;
    return unit_params(unit);
  }
  ++counters_.acquires;
  if (pass_ == PassKind::train) note_use(unit);
  if (s.fetch == Fetch::none && !s.deferred) {
    ++counters_.on_demand_fetches;
  } else if (s.prefetched) {
    ++counters_.prefetch_hits;
  } else {
    ++counters_.resident_hits;
  }
  if (s.fetch != Fetch::ready) {
    if (s.fetch != Fetch::gathering && !s.deferred) start_gather(unit);
    finish_fetch(unit);
  }
  s.prefetched = false;
  ++s.refs;
  pump_prefetch();
  return unit_params(unit);
}

void Fetcher::release(size_t unit) {
  UnitFetch& s = units_[unit];
  TZ_CHECK(s.refs > 0,
           "PartitionStore::release_params: unit " + plan_.units()[unit].name +
               " released more often than acquired",
           "pair every release_params with an acquire_params");
  --s.refs;
  if (config_.stage < 3 && s.refs == 0) s.compute.reset();
  if (config_.stage == 3 && s.refs == 0 && !persistent(unit) && !keep_after_release(unit))
    drop(unit);
  pump_prefetch();
}

void Fetcher::read(size_t unit, float* host_values) {
  UnitFetch& s = units_[unit];
  if (s.fetch != Fetch::ready) {
    if (s.fetch != Fetch::gathering && !s.deferred) start_gather(unit);
    finish_fetch(unit, false);
  }
  Stream& st = device_.default_stream();
  const size_t numel = plan_.units()[unit].numel;
  if (config_.compute == DType::f32) {
    device_.copy(host_values, unit_params(unit), numel * sizeof(float), CopyKind::device_to_host,
                 st);
    st.synchronize();
  } else {                              // the 16-bit values handed out, widened on the host
    std::vector<uint16_t> bits(numel);  // (numel) compute type
    device_.copy(bits.data(), unit_params(unit), numel * sizeof(uint16_t), CopyKind::device_to_host,
                 st);
    st.synchronize();
    convert_to_f32(host_values, bits.data(), config_.compute, numel);
  }
  if (s.refs == 0 && !persistent(unit)) drop(unit);
}

void Fetcher::start_read(size_t unit) {
  UnitFetch& s = units_[unit];
  counters_.stall_s += background_.wait(unit, false);
  // The staging buffer is counted before it exists, under the lock the NVMe optimizer takes to
  // count its handoffs, so the two never overshoot the budget together.
  offload::PinnedBuffer handed = background_.take_staging(unit);
  s.staging_counted = true;
  if (handed) {
    // The update's new shard, still in memory: no read of what is being written.
    s.staging = std::move(handed);
    ++counters_.handoffs;
  } else {
    try {
      // The background update may still be writing these extents.
      counters_.stall_s += background_.wait(unit, true);
      const size_t n = plan_.partition(unit).shard_numel;
      const size_t eb = storage_.arenas().elem_bytes(StateBuffer::param_shard);
      s.staging = storage_.host_pool()->allocate(n * eb, Category::io, "zero nvme param staging");
      if (n > 0)
        s.reads = storage_.arenas().read(StateBuffer::param_shard, unit, 0, n, s.staging.data());
    } catch (...) {
      wait_io_quietly(s.reads);
      s.staging.reset();
      s.staging_counted = false;
      background_.read_finished();
      throw;
    }
    ++counters_.nvme_reads;
  }
  s.fetch = Fetch::reading;
}

bool Fetcher::gather_ready(size_t unit) {
  if (!background_.published(unit)) return false;
  if (storage_.placement(unit).param != Tier::nvme) return true;
  const UnitFetch& s = units_[unit];
  return s.fetch == Fetch::reading && io_finished(s.reads);
}

void Fetcher::start_gather(size_t unit) {
  UnitFetch& s = units_[unit];
  const Tier home = storage_.placement(unit).param;
  // The unit counts against the live budget from now on, issued or queued, so that every
  // budget decision is the same on every rank however fast its shards arrive.
  if (!is_direct(unit) && !persistent(unit)) live_elems_ += plan_.partition(unit).padded_numel;
  if (home == Tier::nvme && s.fetch == Fetch::none && read_startable(unit)) start_read(unit);
  if (deferred_.empty() && gather_ready(unit)) {
    issue_gather(unit);
    return;
  }
  s.deferred = true;
  deferred_.push_back(unit);
}

void Fetcher::issue_deferred(size_t through) {
  while (!deferred_.empty()) {
    const size_t u = deferred_.front();
    UnitFetch& s = units_[u];
    const bool must = through < units_.size() && units_[through].deferred;
    if (storage_.placement(u).param == Tier::nvme && s.fetch == Fetch::none) {
      if (!must && !read_startable(u)) return;
      start_read(u);
    }
    if (!must && !gather_ready(u)) return;
    deferred_.pop_front();
    s.deferred = false;
    issue_gather(u);
  }
}

void Fetcher::flush() {
  if (!deferred_.empty()) issue_deferred(deferred_.back());
}

void Fetcher::issue_gather(size_t unit) {
  counters_.stall_s += background_.wait(unit, false);  // the update publishes these parameters
  UnitFetch& s = units_[unit];
  const UnitPartition& p = plan_.partition(unit);
  const Tier home = storage_.placement(unit).param;
  if (s.fetch == Fetch::none && home == Tier::nvme) start_read(unit);
  const DType working = storage_.working();
  if (is_direct(unit)) {
    // One rank: the shard is the whole unit and already where compute reads it; nothing to
    // gather or copy (unit_params hands out the shard itself).
    s.direct = true;
    s.fetch = Fetch::gathering;
    return;
  }
  const size_t eb = dtype_size(working);
  s.gathered = storage_.allocator().allocate(p.padded_numel * eb, Category::param,
                                             "zero gathered params");  // (padded) working type
  if (!s.ready) s.ready = device_.create_event();
  Stream& st = device_.default_stream();
  // This rank's block of the gathered buffer: the all-gather runs in place.
  void* slot = static_cast<std::byte*>(s.gathered.data()) + p.shard_begin(plan_.rank()) * eb;
  const size_t bytes = p.shard_numel * eb;
  const void* send = slot;
  const auto u = static_cast<int64_t>(unit);
  // The gathered block was handed out for the default stream, whose earlier work may still use
  // it; so may work that wrote the device shard the gather sends.
  s.ready->record(st);
  if (home == Tier::device) {
    send = storage_.arenas().raw(StateBuffer::param_shard, unit);
  } else {
    const void* src = nullptr;
    if (home == Tier::host) {
      src = storage_.arenas().raw(StateBuffer::param_shard, unit);
    } else {
      const double t0 = monotonic_seconds();
      wait_io(s.reads);
      const double t1 = monotonic_seconds();
      counters_.stall_s += t1 - t0;
      if (t1 > t0) ActivityLog::global().record(Track::stall, "wait nvme read", t0, t1, 0, u);
      // The read is done: the budget counts reads (and handoffs) in flight. The buffer itself
      // lives on until its copy to the device has landed.
      background_.read_finished();
      s.staging_counted = false;
      src = s.staging.data();
    }
    // The copy runs on the copy stream beside the compute; the gather starts after it.
    Stream& copies = storage_.copy_stream();
    s.ready->make_wait(copies);
    const double t0 = monotonic_seconds();
    DeviceSpan span(timeline_, copies);
    device_.copy(slot, src, bytes, CopyKind::host_to_device, copies);
    span.close_copy(device_, Track::host_to_device, "param shard to device", u, bytes, t0);
    s.ready->record(copies);
  }
  s.gather_issued_s = monotonic_seconds();
  s.gather_timed = false;
  if (group_.size() == 1) {
    if (send != slot) device_.copy(slot, send, bytes, CopyKind::device_to_device, st);
  } else if (p.padded_numel > 0) {
    comm::IssuedCollective gather = comm::issue_collective(
        timeline_, group_, s.ready.get(), "all_gather", u, p.padded_numel * eb, [&] {
          return group_.all_gather_async(send, s.gathered.data(), p.shard_numel, working,
                                         s.ready.get());
        });
    s.gather = std::move(gather.request);
    s.gather_timed = gather.timed;
    ++counters_.gathers;
  }
  s.fetch = Fetch::gathering;
}

void Fetcher::release_landed_copies() {
  for (UnitFetch& s : units_)
    if (s.staging && (s.fetch == Fetch::gathering || s.fetch == Fetch::ready) && s.ready->query())
      s.staging.reset();
}

void Fetcher::finish_copy(UnitFetch& s) {
  if (s.ready) s.ready->synchronize();
  s.staging.reset();
  if (s.staging_counted) background_.read_finished();
  s.staging_counted = false;
}

void Fetcher::finish_fetch(size_t unit, bool stall) {
  UnitFetch& s = units_[unit];
  if (s.deferred) issue_deferred(unit);
  if (s.direct) {
    s.fetch = Fetch::ready;
    return;
  }
  if (s.fetch == Fetch::gathering) {
    const double t0 = monotonic_seconds();
    if (s.gather.pending()) s.gather.wait();
    if (group_.size() == 1 && s.ready)
      // One rank: nothing else waited for the copy. The compute stream waits for it instead of
      // the host (no host wait on a GPU: the work issued ahead keeps running); a staging buffer
      // lives on until the copy has landed (release_landed_copies, drop).
      s.ready->make_wait(device_.default_stream());
    else
      finish_copy(s);  // the gather waited for the copy; this frees its staging
    const double t1 = monotonic_seconds();
    const auto u = static_cast<int64_t>(unit);
    if (stall) {
      counters_.stall_s += t1 - t0;
      if (t1 > t0) ActivityLog::global().record(Track::stall, "wait gather", t0, t1, 0, u);
    }
    // From its issue until the host saw it done; one rank moves nothing over a network.
    if (!s.gather_timed && group_.size() > 1)
      ActivityLog::global().record(
          Track::collective, "all_gather", s.gather_issued_s, t1,
          plan_.partition(unit).padded_numel * dtype_size(storage_.working()), u);
  }
  if (widens() && s.gathered) {
    // The kernels compute in fp32 from 16-bit storage: widened on the device, in stream order
    // (the gathered block is reused only after the conversion that reads it).
    const size_t padded = plan_.partition(unit).padded_numel;
    s.compute = storage_.allocator().allocate(padded * sizeof(float), Category::param,
                                              "zero fp32 compute params");  // (padded) fp32
    device_.kernels().convert_to_f32(s.compute.f32(), s.gathered.data(), storage_.working(),
                                     padded);
    s.gathered.reset();
  }
  s.fetch = Fetch::ready;
}

void Fetcher::drop(size_t unit) {
  UnitFetch& s = units_[unit];
  // Another rank may have issued this gather already: it must be issued here too.
  if (s.deferred) issue_deferred(unit);
  wait_io(s.reads);  // the staging buffer must outlive its reads
  if (s.gather.pending()) s.gather.wait();
  // ... and its copy, as must the gathered buffer, unless the compute stream already waits for
  // the copy (a finished fetch), so that the buffer's stream-ordered release is safe.
  if (s.fetch != Fetch::ready || s.staging) finish_copy(s);
  if (s.gathered || s.compute) {
    if (!persistent(unit)) live_elems_ -= plan_.partition(unit).padded_numel;
    s.gathered.reset();  // stream-ordered: later work reuses the block after this unit's work
    s.compute.reset();
  }
  s.fetch = Fetch::none;
  s.prefetched = false;
  s.direct = false;
}

void Fetcher::drop_unused() {
  for (size_t u = 0; u < units_.size(); ++u)
    if (units_[u].refs == 0) drop(u);
}

}  // namespace tierzero::zero
