// The gradient reducer: accumulation, buckets, reductions and the deferred mode (see
// gradient_reducer.hpp), and the bound on its buffers that the estimator shares.
#include "gradient_reducer.hpp"

#include <algorithm>
#include <cstring>
#include <string>

#include "tierzero/comm/timed_collective.hpp"
#include "tierzero/core/activity_log.hpp"
#include "tierzero/core/error.hpp"
#include "tierzero/core/timer.hpp"
#include "tierzero/device/device_span.hpp"
#include "tierzero/zero/unit_groups.hpp"

namespace tierzero::zero {

GradientReducer::GradientReducer(const StoreConfig& config, ShardStorage& storage,
                                 BackgroundUpdate& background, comm::Communicator& group,
                                 FetchCounters& counters, std::function<void()> flush_collectives,
                                 std::function<void(size_t)> on_reduced)
    : config_(config),
      storage_(storage),
      background_(background),
      group_(group),
      counters_(counters),
      flush_collectives_(std::move(flush_collectives)),
      on_reduced_(std::move(on_reduced)),
      plan_(storage.plan()),
      device_(storage.device()),
      units_(storage.plan().num_units()),
      host_zero_(storage.plan().num_units(), 0),
      capacity_(bucket_capacity(storage.plan(), config.reduce_bucket_elems, config.overlap_comm)) {}

GradientReducer::~GradientReducer() {
  pending_.clear();  // each request waits for its operation (errors are logged)
}

DeviceBuffer GradientReducer::allocate(size_t elems, const char* label, DType dtype) {
  try {
    return storage_.allocator().allocate(elems * dtype_size(dtype), Category::comm, label);
  } catch (const Error& e) {
    // The device budget may be too small for the buckets rather than for the model.
    throw Error(e.what_failed(), e.where(),
                e.hint() + "; or lower zero_optimization.reduce_bucket_size (now " +
                    std::to_string(config_.reduce_bucket_elems) +
                    " elements): gradient buckets hold up to that many elements on the device");
  }
}

float* GradientReducer::acquire(size_t unit) {
  UnitGrad& s = units_[unit];
  if (!s.open) {
    s.direct =
        config_.stage >= 2 && group_.size() == 1 && storage_.placement(unit).grad == Tier::device;
    // A unit still in the open bucket goes out first: the next micro-batch must not add to a
    // gradient that is still to be reduced on its own.
    if (s.in_bucket) issue_bucket();
    if (s.direct) {
      // One rank: the mean over the group is the gradient itself, and backward's += is the
      // accumulation across micro-batches; no bucket, no reduction.
      finish_through(unit);
    } else if (config_.stage >= 2) {
      if (!s.held) {
        // Awaiting reduce-scatter: transient, so it counts as a comm buffer, not model state.
        const size_t padded = plan_.partition(unit).padded_numel;
        s.full = allocate(padded, "zero reduce-scatter bucket");  // (padded) fp32
        device_.fill_zero(s.full.data(), padded * sizeof(float), device_.default_stream());
      }
    } else {
      // The previous micro-batch's all-reduce works in place on these gradients.
      finish_through(unit);
    }
    s.held = false;
    s.open = true;
  }
  if (s.direct) return storage_.grad_shard_ptr(unit);
  if (config_.stage >= 2) return s.full.f32();
  return storage_.arenas().ptr(StateBuffer::grads_full, unit);
}

void GradientReducer::done(size_t unit) {
  UnitGrad& s = units_[unit];
  s.open = false;
  if (plan_.partition(unit).padded_numel == 0 || s.direct) {
    s.full.reset();
    return;
  }
  if (!sync_) {
    s.held = true;  // reduced at the first finish with sync on, or at the step
    return;
  }
  add_to_bucket(unit);
}

void GradientReducer::discard(size_t unit) {
  units_[unit].open = false;
  units_[unit].full.reset();
}

bool GradientReducer::adjacent_to_bucket(size_t unit) const {
  const auto [lo, hi] = std::minmax_element(bucket_.begin(), bucket_.end());
  // Units sit back to back in unit order in the full-gradient arena (empty ones take no room).
  auto next_nonempty = [&](size_t u, int dir) {
    for (size_t v = u;;) {
      if (dir < 0 && v == 0) return units_.size();
      v = dir < 0 ? v - 1 : v + 1;
      if (v >= units_.size()) return units_.size();
      if (plan_.partition(v).padded_numel > 0) return v;
    }
  };
  return unit == next_nonempty(*lo, -1) || unit == next_nonempty(*hi, +1);
}

void GradientReducer::add_to_bucket(size_t unit) {
  const size_t padded = plan_.partition(unit).padded_numel;
  const size_t capacity = capacity_;
  const bool fits = bucket_elems_ + padded <= capacity;
  if (!bucket_.empty() && (!fits || (config_.stage < 2 && !adjacent_to_bucket(unit))))
    issue_bucket();
  bucket_.push_back(unit);
  bucket_elems_ += padded;
  units_[unit].in_bucket = true;
  if (bucket_elems_ >= capacity) issue_bucket();
}

void GradientReducer::issue_bucket() {
  if (bucket_.empty()) return;
  // In flight at once: at most max_pending_reductions buckets and a bucket's worth of elements
  // (always at least one bucket), so the memory of reductions follows reduce_bucket_size.
  const size_t max_pending = std::max<size_t>(1, config_.max_pending_reductions);
  while (!pending_.empty() &&
         (pending_.size() >= max_pending || pending_elems_ + bucket_elems_ > capacity_))
    finish_oldest();
  flush_collectives_();  // collectives go out in the same order on every rank
  Stream& st = device_.default_stream();
  Pending r;
  r.units = bucket_;
  r.elems = bucket_elems_;
  r.ready = device_.create_event();
  const DType wire = config_.reduce_dtype;
  if (config_.stage >= 2) {
    size_t shard_elems = 0;
    for (size_t u : r.units) shard_elems += plan_.partition(u).shard_numel;
    r.shard_elems = shard_elems;
    // Allocated before anything changes: a failed allocation leaves the bucket as it was.
    if (r.units.size() > 1)
      r.input = allocate(r.elems, "zero reduce-scatter bucket (packed)");  // (elems) fp32
    r.shard_mean = allocate(shard_elems, "zero reduce-scatter shard");     // (shard_elems) fp32
    r.widen_for_host =
        wire != DType::f32 && std::none_of(r.units.begin(), r.units.end(), [&](size_t u) {
          return storage_.placement(u).grad == Tier::device;
        });
    if (wire != DType::f32) {
      r.wire_in = allocate(r.elems, "zero reduce-scatter bucket (16-bit)", wire);  // (elems)
      r.wire_out = allocate(shard_elems, "zero reduce-scatter shard (16-bit)", wire);
    }
    if (r.units.size() == 1) {
      r.input = std::move(units_[r.units[0]].full);  // one unit is already rank-major
    } else {
      // Rank-major: rank q's block holds its shard of every unit, in bucket order.
      size_t at = 0;
      for (int q = 0; q < group_.size(); ++q)
        for (size_t u : r.units) {
          const UnitPartition& p = plan_.partition(u);
          device_.copy(r.input.f32() + at, units_[u].full.f32() + p.shard_begin(q),
                       p.shard_numel * sizeof(float), CopyKind::device_to_device, st);
          at += p.shard_numel;
        }
      for (size_t u : r.units) units_[u].full.reset();  // stream-ordered after the copies
    }
    if (wire != DType::f32) {
      device_.kernels().convert_from_f32(r.wire_in.data(), wire, r.input.f32(), r.elems);
      r.input.reset();  // stream-ordered after the conversion
    }
    // Backward's and the packing's writes (and earlier users of the new blocks) land before the
    // engine reads and writes.
    r.ready->record(st);
    r.issued_s = monotonic_seconds();
    comm::IssuedCollective rs = comm::issue_collective(
        timeline_, group_, r.ready.get(), "reduce_scatter", static_cast<int64_t>(r.units[0]),
        wire_bytes(r), [&] {
          return wire == DType::f32
                     ? group_.reduce_scatter_async(r.input.data(), r.shard_mean.data(), shard_elems,
                                                   DType::f32, comm::ReduceOp::avg, r.ready.get())
                     : group_.reduce_scatter_async(r.wire_in.data(), r.wire_out.data(), shard_elems,
                                                   wire, comm::ReduceOp::avg, r.ready.get());
        });
    r.request = std::move(rs.request);
    r.timed = rs.timed;
  } else {
    // Every rank ends with the mean gradient. Under accumulation this is still right: the part
    // already averaged is equal on every rank, so the mean of (it + local) is it + mean(local).
    const size_t first = *std::min_element(r.units.begin(), r.units.end());
    r.arena = storage_.arenas().ptr(StateBuffer::grads_full, first);
    if (wire != DType::f32) {
      r.wire_in = allocate(r.elems, "zero all-reduce bucket (16-bit)", wire);  // (elems)
      device_.kernels().convert_from_f32(r.wire_in.data(), wire, r.arena, r.elems);
    }
    r.ready->record(st);  // backward's writes (and the conversion) land before the engine reads
    void* g = wire == DType::f32 ? static_cast<void*>(r.arena) : r.wire_in.data();
    r.issued_s = monotonic_seconds();
    comm::IssuedCollective ar = comm::issue_collective(
        timeline_, group_, r.ready.get(), "all_reduce", static_cast<int64_t>(r.units[0]),
        wire_bytes(r), [&] {
          return group_.all_reduce_async(g, g, r.elems, wire, comm::ReduceOp::avg, r.ready.get());
        });
    r.request = std::move(ar.request);
    r.timed = ar.timed;
  }
  for (size_t u : bucket_) units_[u].in_bucket = false;
  bucket_.clear();
  bucket_elems_ = 0;
  ++counters_.reductions;
  pending_elems_ += r.elems;
  pending_.push_back(std::move(r));
  // Without overlap_comm a reduction is waited for at once, as DeepSpeed's: none is in flight
  // while the backward computes.
  if (!config_.overlap_comm) finish_oldest();
}

void GradientReducer::accumulate(const Pending& r) {
  // shard += mean of this bucket's gradient: accumulation across micro-batches and steps. A host
  // shard still zero since zero() (its first reduction of the step) takes the mean as it is,
  // copied straight into it, as a clear NVMe shard does: no staging and no pass of the host's
  // over it (the same values; only a zero's sign may differ from 0 + mean's, which nothing after
  // depends on). The others come through pinned staging and are added by the host.
  const size_t units = r.units.size();
  std::vector<size_t> offset(units), staged_at(units, 0);  // elements into shard_mean, staging
  std::vector<char> straight(units, 0);  // per bucket unit: copied into its zero host shard
  size_t total = 0, staged = 0;
  for (size_t i = 0; i < units; ++i) {
    const size_t u = r.units[i];
    const size_t n = plan_.partition(u).shard_numel;
    offset[i] = total;
    total += n;
    const Tier tier = storage_.placement(u).grad;
    if (tier == Tier::host && host_zero_[u]) {
      straight[i] = 1;
    } else if (tier != Tier::device) {
      staged_at[i] = staged;
      staged += n;
    }
  }
  offload::PinnedBuffer staging;  // (staged) fp32: the means the host adds or writes to NVMe
  std::vector<HostCopy> copies;
  if (staged > 0) {
    staging = storage_.host_pool()->allocate(staged * sizeof(float), Category::io,
                                             "zero grad shard staging");
  }
  for (size_t i = 0; i < units; ++i) {
    const size_t u = r.units[i];
    const size_t bytes = plan_.partition(u).shard_numel * sizeof(float);
    const float* mean = r.shard_mean.f32() + offset[i];
    if (straight[i])
      copies.push_back({storage_.grad_shard_ptr(u), mean, bytes});
    else if (storage_.placement(u).grad != Tier::device)
      copies.push_back({static_cast<float*>(staging.data()) + staged_at[i], mean, bytes});
  }
  // Widened on the compute stream (a bucket with device gradients), the means' last writer is a
  // kernel there; else they are widened on the copy stream, right before the copies.
  const bool widened_by_compute = config_.reduce_dtype != DType::f32 && !r.widen_for_host;
  if (!copies.empty())
    copy_to_host(copies, r.units[0], widened_by_compute, r.widen_for_host ? &r : nullptr);
  for (size_t i = 0; i < units; ++i) {
    const size_t u = r.units[i];
    const size_t n = plan_.partition(u).shard_numel;
    float* acc = storage_.grad_shard_ptr(u);
    float* staged_mean = static_cast<float*>(staging.data()) + staged_at[i];
    const Tier tier = storage_.placement(u).grad;
    if (tier == Tier::nvme) {
      accumulate_on_nvme(u, staged_mean);
      background_.mark_gradient_held(u);
    } else if (tier == Tier::device) {
      device_.kernels().residual_forward(acc, acc, r.shard_mean.f32() + offset[i], n);
    } else {
      if (!straight[i]) storage_.host_kernels().residual_forward(acc, acc, staged_mean, n);
      host_zero_[u] = 0;
      background_.mark_gradient_held(u);
    }
    if (on_reduced_) on_reduced_(u);
  }
}

void GradientReducer::accumulate_on_nvme(size_t unit, float* mean) {
  // A clear shard takes the mean as it is; otherwise read, add, write back. Chunk by chunk
  // through one pinned buffer of a chunk, so host memory does not grow with the unit.
  const size_t n = plan_.partition(unit).shard_numel;
  StateArenas& arenas = storage_.arenas();
  if (storage_.grad_clear(unit)) {
    auto writes = arenas.write(StateBuffer::grad_shard, unit, 0, n, mean);
    wait_io(writes);
    storage_.set_grad_clear(unit, false);
    return;
  }
  const size_t chunk = std::min(arenas.chunk_elems, n);
  offload::PinnedBuffer acc = storage_.host_pool()->allocate(
      chunk * sizeof(float), Category::io, "zero nvme grad accumulate");  // (chunk) fp32
  for (size_t at = 0; at < n; at += chunk) {
    const size_t count = std::min(chunk, n - at);
    auto reads = arenas.read(StateBuffer::grad_shard, unit, at, count, acc.data());
    wait_io(reads);
    auto* a = static_cast<float*>(acc.data());
    storage_.host_kernels().residual_forward(a, a, mean + at, count);
    auto writes = arenas.write(StateBuffer::grad_shard, unit, at, count, a);
    wait_io(writes);
  }
}

size_t GradientReducer::wire_bytes(const Pending& r) const {
  size_t bytes = 0;
  for (size_t u : r.units)
    bytes += plan_.partition(u).padded_numel * dtype_size(config_.reduce_dtype);
  return bytes;
}

void GradientReducer::finish_oldest() {
  Pending& r = pending_.front();
  // Without overlap_comm the training thread did nothing between issuing and this wait.
  const double wait_from = config_.overlap_comm ? monotonic_seconds() : r.issued_s;
  r.request.wait();
  const double completed = std::max(r.request.completed_s(), r.issued_s);
  counters_.reduction_s += completed - r.issued_s;
  counters_.reduction_exposed_s += std::max(0.0, completed - wait_from);
  // The background update must have read the shards this adds into.
  for (size_t u : r.units) counters_.stall_s += background_.wait(u, false);
  if (!r.timed)  // from its issue until the host saw it done
    ActivityLog::global().record(
        Track::collective, config_.stage >= 2 ? "reduce_scatter" : "all_reduce", r.issued_s,
        monotonic_seconds(), wire_bytes(r), static_cast<int64_t>(r.units[0]));
  if (config_.reduce_dtype != DType::f32 && !r.widen_for_host) {
    // The mean back in fp32: into the shard buffer (stages 2-3) or the arena (stages 0-1).
    if (config_.stage >= 2)
      device_.kernels().convert_to_f32(r.shard_mean.f32(), r.wire_out.data(), config_.reduce_dtype,
                                       r.shard_elems);
    else
      device_.kernels().convert_to_f32(r.arena, r.wire_in.data(), config_.reduce_dtype, r.elems);
  }
  pending_elems_ -= r.elems;
  Pending done = std::move(r);
  pending_.pop_front();
  if (config_.stage >= 2) {
    accumulate(done);
  } else if (on_reduced_) {
    for (size_t u : done.units) on_reduced_(u);
  }
}

void GradientReducer::finish_through(size_t unit) {
  auto involves = [&](const Pending& r) {
    return std::find(r.units.begin(), r.units.end(), unit) != r.units.end();
  };
  while (std::any_of(pending_.begin(), pending_.end(), involves)) finish_oldest();
}

void GradientReducer::finish_all() {
  // Deferred gradients go out in unit order, which every rank shares.
  for (size_t u = units_.size(); u-- > 0;) {
    if (!units_[u].held) continue;
    units_[u].held = false;
    add_to_bucket(u);
  }
  issue_bucket();
  while (!pending_.empty()) finish_oldest();
  // The step writes into the shards from here on (tied and replicated sums), so a shard nothing
  // landed in is no longer known to be zeros: until the next zero(), means are added.
  std::fill(host_zero_.begin(), host_zero_.end(), 0);
}

void GradientReducer::zero() {
  for (UnitGrad& s : units_) {
    s.held = false;  // a deferred gradient is zeroed anyway: no need to reduce it first
    s.full.reset();
  }
  for (size_t u : bucket_) units_[u].in_bucket = false;
  bucket_.clear();
  bucket_elems_ = 0;
  while (!pending_.empty()) finish_oldest();  // a result landing later would leak into the step
  Stream& s = device_.default_stream();
  StateArenas& arenas = storage_.arenas();
  StateArenas::Kind& full = arenas.kinds[static_cast<size_t>(StateBuffer::grads_full)];
  if (full.device) device_.fill_zero(full.device.data(), full.device.bytes(), s);
  for (size_t u = 0; u < units_.size(); ++u) {
    if (!arenas.has(StateBuffer::grad_shard, u)) continue;
    // A unit the background optimizer has not reached yet is cleared by it after reading (its
    // first mean is then added to those zeros, not copied over them).
    host_zero_[u] = 0;
    if (background_.gradient_cleared_by_update(u)) continue;
    const size_t bytes = plan_.partition(u).shard_numel * sizeof(float);
    if (storage_.placement(u).grad == Tier::device) {
      device_.fill_zero(storage_.grad_shard_ptr(u), bytes, s);
    } else if (storage_.placement(u).grad == Tier::nvme) {
      storage_.set_grad_clear(u, true);
    } else {
      std::memset(storage_.grad_shard_ptr(u), 0, bytes);
      host_zero_[u] = 1;
    }
  }
  // Not waited for: the backward's writes follow the fills on this stream, and each reduction
  // starts after an event recorded on it (its `ready`), so the device orders them all.
}

void GradientReducer::copy_slices_to_host(const std::vector<char>& copied) {
  for (size_t u = 0; u < units_.size(); ++u)
    if (copied.empty() || !copied[u]) copy_slice_to_host(u);
}

void GradientReducer::copy_slice_to_host(size_t u) {
  if (config_.stage >= 2 || storage_.placement(u).grad == Tier::device) return;
  const size_t n = plan_.partition(u).shard_numel;
  // The slice's last writer may be zero()'s fill on the compute stream (a unit with nothing
  // reduced this step): this copy follows the compute stream.
  copy_to_host({{storage_.arenas().ptr(StateBuffer::grad_shard, u),
                 storage_.arenas().ptr(StateBuffer::grads_full, u) +
                     plan_.partition(u).shard_begin(plan_.rank()),
                 n * sizeof(float)}},
               u, true);
}

void GradientReducer::copy_to_host(const std::vector<HostCopy>& copies, size_t unit,
                                   bool after_compute, const Pending* widen_first) {
  // The reduction that wrote src has landed (its request was waited for), so the copy need not
  // follow the compute stream: on its own stream the host waits for this copy only, while the
  // backward already issued keeps the GPU busy. A 16-bit reduction bound for the host is widened
  // on that stream too, before the copies. Where src's last writer is a kernel on the compute
  // stream (after_compute: a fill, or a widening there), the copy starts after an event recorded
  // behind it (in stream order, not waited for on the host).
  if (!d2h_stream_) {
    d2h_stream_ = device_.create_stream();
    copied_ = device_.create_event();
  }
  if (after_compute) {
    copied_->record(device_.default_stream());
    copied_->make_wait(*d2h_stream_);
  }
  const double t0 = monotonic_seconds();
  if (widen_first != nullptr) {
    kernels::KernelStreamScope on_copy_stream(device_.kernels(), d2h_stream_->native());
    device_.kernels().convert_to_f32(widen_first->shard_mean.f32(), widen_first->wire_out.data(),
                                     config_.reduce_dtype, widen_first->shard_elems);
  }
  size_t bytes = 0;
  DeviceSpan span(timeline_, *d2h_stream_);  // the copies only, not the widening before them
  for (const HostCopy& c : copies) {
    device_.copy(c.dst, c.src, c.bytes, CopyKind::device_to_host, *d2h_stream_);
    bytes += c.bytes;
  }
  span.close(Track::device_to_host, "grad shard to host", static_cast<int64_t>(unit), bytes);
  copied_->record(*d2h_stream_);
  copied_->synchronize();
  if (!span.timed())  // from their issue until the host saw them land
    ActivityLog::global().record(Track::device_to_host, "grad shard to host", t0,
                                 monotonic_seconds(), bytes, static_cast<int64_t>(unit));
}

size_t bucket_capacity(const PartitionPlan& plan, size_t reduce_bucket_elems, bool overlap_comm) {
  const size_t capacity = std::max<size_t>(1, reduce_bucket_elems);
  if (!overlap_comm) return capacity;
  return std::max<size_t>(1, std::min(capacity, plan.largest_padded_numel()));
}

ReductionBuffers reduction_buffer_bound(const PartitionPlan& plan, int stage,
                                        const std::vector<UnitPlacement>& placement,
                                        size_t reduce_bucket_elems, bool overlap_comm,
                                        DType reduce_dtype) {
  return reduction_buffer_bound(plan_groups(plan, placement), plan.ranks(), stage,
                                reduce_bucket_elems, overlap_comm, reduce_dtype);
}

}  // namespace tierzero::zero
