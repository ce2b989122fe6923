// PartitionStore: construction, placement of the persistent state, parameter and gradient
// hand-out and the gradient reductions. Stage 3 fetching and prefetch live in store_fetch.cpp,
// the optimizer step in store_optimizer.cpp. Gradient reductions are issued asynchronously at
// grads_done and completed lazily (at most max_pending_reductions in flight), so they overlap the
// backward of the next unit.
#include "tierzero/zero/partition_store.hpp"

#include <algorithm>
#include <cstring>
#include <string>

#include "state_arenas.hpp"
#include "tierzero/core/activity_log.hpp"
#include "tierzero/core/error.hpp"
#include "tierzero/core/log.hpp"
#include "tierzero/core/timer.hpp"
#include "tierzero/kernels/cpu_ops.hpp"
#include "tierzero/offload/swap_space.hpp"

namespace tierzero::zero {

namespace {

int checked_stage(const StoreConfig& c) {
  TZ_CHECK(c.stage >= 0 && c.stage <= 3,
           "PartitionStore: ZeRO stage " + std::to_string(c.stage) + " does not exist",
           "zero_optimization.stage is 0, 1, 2 or 3");
  return c.stage;
}

// Stage 0 replicates optimizer states too: plan as a group of one so every rank owns all.
int plan_ranks(const StoreConfig& c, const comm::Communicator& g) {
  return checked_stage(c) == 0 ? 1 : g.size();
}
int plan_rank(const StoreConfig& c, const comm::Communicator& g) {
  return checked_stage(c) == 0 ? 0 : g.rank();
}

}  // namespace

size_t reductions_in_flight(int64_t reduce_bucket_elems, const std::vector<UnitSpec>& units) {
  size_t largest = 1;
  for (const UnitSpec& u : units) largest = std::max(largest, u.numel);
  const auto bucket = static_cast<size_t>(std::max<int64_t>(reduce_bucket_elems, 1));
  return std::clamp<size_t>(bucket / largest, 1, 2);
}

PartitionStore::PartitionStore(std::vector<UnitSpec> units, const StoreConfig& config,
                               const AdamWConfig& optimizer, comm::Communicator& group,
                               DeviceAllocator& allocator)
    : config_(config),
      optimizer_(optimizer),
      group_(group),
      allocator_(allocator),
      device_(allocator.device()),
      plan_(std::move(units), plan_ranks(config, group), plan_rank(config, group),
            config.shard_align_elems),
      placement_(place_units(plan_, config.stage, config.placement)),
      units_(plan_.num_units()) {
  bool host = false, nvme = false;
  for (const UnitPlacement& p : placement_) {
    host = host || p.param != Tier::device || p.optimizer != Tier::device;
    nvme = nvme || p.param == Tier::nvme || p.optimizer == Tier::nvme;
  }
  if (host)
    host_pool_ = std::make_unique<offload::HostPool>(config_.host_budget_bytes, &device_,
                                                     allocator_.tracker());
  if (nvme) {
    TZ_CHECK(!config_.nvme.directories.empty(),
             "NVMe placement needs a directory: nvme_path is empty",
             "set offload_param.nvme_path / offload_optimizer.nvme_path to a directory on the "
             "drive (several, comma-separated, stripe over several drives)");
    nvme_ = std::make_unique<offload::NvmeEngine>(config_.nvme, host_pool_.get());
    swap_ = std::make_unique<offload::SwapSpace>(*nvme_, 0, allocator_.tracker());
  }
  arenas_ = std::make_unique<Arenas>(plan_, config_.stage, placement_, config_.placement,
                                     allocator_, host_pool_.get(), swap_.get());
  // The NVMe optimizer pipeline may run behind the next forward at stage 3 (below it the updated
  // parameters are all-gathered right after the step). The CPU backend only: on CUDA its copies
  // would share the training thread's stream.
  background_optimizer_ = config_.stage == 3 && device_.kind() == DeviceKind::cpu;
  grads_cleared_.assign(units_.size(), 0);
  setup_optimizer_swap();
}

PartitionStore::~PartitionStore() {
  // Wait for the background optimizer, reductions, gathers and NVMe reads still in flight
  // (quietly) before the buffers they read and write are freed.
  try {
    wait_optimizer_all();
  } catch (const std::exception& e) {
    log::error(std::string("the background optimizer step failed: ") + e.what());
  } catch (...) {
    log::error("the background optimizer step failed");
  }
  release_optimizer_swap();
  pending_.clear();
  for (UnitState& s : units_) {
    wait_io_quietly(s.reads);
    s.gather = comm::CommRequest();
  }
}

bool PartitionStore::persistent(size_t unit) const {
  check_unit("persistent", unit);
  return config_.stage == 3 && plan_.units().at(unit).numel < config_.param_persistence_threshold;
}

void PartitionStore::check_unit(const char* op, size_t unit) const {
  TZ_CHECK(unit < plan_.num_units(),
           std::string("PartitionStore::") + op + ": unit " + std::to_string(unit) +
               " does not exist (the store has " + std::to_string(plan_.num_units()) + " units)",
           "units are numbered as in the unit list the store was built from");
}

float* PartitionStore::param_shard_ptr(size_t unit) {
  if (config_.stage == 3) return arenas_->ptr(StateBuffer::param_shard, unit);
  return arenas_->ptr(StateBuffer::params_full, unit) +
         plan_.partition(unit).shard_begin(plan_.rank());
}

void* PartitionStore::param_shard_raw(size_t unit) {
  if (config_.stage == 3) return arenas_->raw(StateBuffer::param_shard, unit);
  return static_cast<std::byte*>(arenas_->raw(StateBuffer::params_full, unit)) +
         plan_.partition(unit).shard_begin(plan_.rank()) *
             arenas_->elem_bytes(StateBuffer::params_full);
}

const float* PartitionStore::unit_params(size_t unit) {
  UnitState& s = units_[unit];
  if (s.direct) return arenas_->ptr(StateBuffer::param_shard, unit);
  if (s.compute) return s.compute.f32();
  if (config_.stage < 3) return arenas_->ptr(StateBuffer::params_full, unit);
  return s.gathered.f32();
}

float* PartitionStore::grad_shard_ptr(size_t unit) {
  if (arenas_->has(StateBuffer::grad_shard, unit))
    return arenas_->ptr(StateBuffer::grad_shard, unit);
  return arenas_->ptr(StateBuffer::grads_full, unit) +
         plan_.partition(unit).shard_begin(plan_.rank());
}

StateBuffer PartitionStore::master_kind(size_t unit) const {
  if (!placement_[unit].master_is_param) return StateBuffer::master;
  return config_.stage == 3 ? StateBuffer::param_shard : StateBuffer::params_full;
}

float* PartitionStore::master_ptr(size_t unit) {
  return placement_[unit].master_is_param ? param_shard_ptr(unit)
                                          : arenas_->ptr(StateBuffer::master, unit);
}

void PartitionStore::write_shard(StateBuffer kind, size_t unit, const float* host_shard) {
  const size_t n = plan_.partition(unit).shard_numel;
  if (n == 0) return;
  // 16-bit working parameters are rounded once here; the bits are then stored like any state.
  const size_t elem_bytes = arenas_->elem_bytes(kind);
  std::vector<uint16_t> bits;  // (shard_numel) working type, 16-bit kinds only
  const void* src = host_shard;
  if (elem_bytes != sizeof(float)) {
    bits.resize(n);
    convert_from_f32(bits.data(), config_.placement.working, host_shard, n);
    src = bits.data();
  }
  const Arenas::Slot& slot = arenas_->slot(kind, unit);
  if (slot.tier == Tier::nvme) {
    auto writes = arenas_->write(kind, unit, 0, n, src);
    wait_io(writes);
  } else if (slot.tier == Tier::host) {
    std::memcpy(arenas_->raw(kind, unit), src, n * elem_bytes);
  } else {
    device_.copy(arenas_->raw(kind, unit), src, n * elem_bytes, CopyKind::host_to_device,
                 device_.default_stream());
    device_.default_stream().synchronize();
  }
}

// ---- parameters -------------------------------------------------------------------------------

const float* PartitionStore::acquire_params(size_t unit) {
  check_unit("acquire_params", unit);
  UnitState& s = units_[unit];
  if (config_.stage < 3) {
    if (config_.placement.working != DType::f32 && !s.compute) {
      // The kernels compute in fp32 from 16-bit storage: a converted copy while in use.
      const size_t padded = plan_.partition(unit).padded_numel;
      s.compute = allocator_.allocate(padded * sizeof(float), Category::param,
                                      "zero fp32 compute params");  // (padded_numel) fp32
      device_.kernels().convert_to_f32(s.compute.f32(),
                                       arenas_->raw(StateBuffer::params_full, unit),
                                       config_.placement.working, padded);
    }
    ++s.param_refs;
    return unit_params(unit);
  }
  ++counters_.acquires;
  if (pass_ == PassKind::train) {
    if (recording_) {
      check_trace_position(unit);
    } else if (!off_trace_ && (cursor_ >= trace_.size() || trace_[cursor_] != unit)) {
      off_trace_ = true;
      ++counters_.out_of_order;
      flush_deferred_gathers();  // prefetches the trace promised: every rank issues them now
      log::warn("stage 3: unit " + plan_.units()[unit].name + " used out of trace order (call " +
                std::to_string(cursor_ + 1) + " of the step, the trace expects " +
                (cursor_ < trace_.size() ? plan_.units()[trace_[cursor_]].name
                                         : std::string("no more units")) +
                "): fetching on demand for the rest of this step; the trace is recorded again "
                "next step");
    }
    ++cursor_;
  }
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
  ++s.param_refs;
  pump_prefetch();
  return unit_params(unit);
}

void PartitionStore::release_params(size_t unit) {
  check_unit("release_params", unit);
  UnitState& s = units_[unit];
  TZ_CHECK(s.param_refs > 0,
           "PartitionStore::release_params: unit " + plan_.units()[unit].name +
               " released more often than acquired",
           "pair every release_params with an acquire_params");
  --s.param_refs;
  if (config_.stage < 3 && s.param_refs == 0) s.compute.reset();
  if (config_.stage == 3 && s.param_refs == 0 && !persistent(unit) && !keep_after_release(unit))
    drop_gathered(unit);
  pump_prefetch();
}

// ---- gradients --------------------------------------------------------------------------------

float* PartitionStore::acquire_grads(size_t unit) {
  check_unit("acquire_grads", unit);
  UnitState& s = units_[unit];
  if (!s.grads_open) {
    s.grads_direct =
        config_.stage >= 2 && group_.size() == 1 && placement_[unit].grad == Tier::device;
    if (s.grads_direct) {
      // One rank: the mean over the group is the gradient itself, and backward's += is the
      // accumulation across micro-batches; no bucket, no reduction.
      finish_reductions_through(unit);
    } else if (config_.stage >= 2) {
      // A bucket awaiting reduce-scatter: transient, so it counts as a comm buffer, not as
      // model state.
      const size_t padded = plan_.partition(unit).padded_numel;
      s.full_grad =
          allocator_.allocate(padded * sizeof(float), Category::comm, "zero reduce-scatter bucket");
      device_.fill_zero(s.full_grad.data(), padded * sizeof(float), device_.default_stream());
    } else {
      // The previous micro-batch's all-reduce works in place on these gradients.
      finish_reductions_through(unit);
    }
    s.grads_open = true;
  }
  if (s.grads_direct) return grad_shard_ptr(unit);
  if (config_.stage >= 2) return s.full_grad.f32();
  return arenas_->ptr(StateBuffer::grads_full, unit);
}

void PartitionStore::grads_done(size_t unit) {
  check_unit("grads_done", unit);
  UnitState& s = units_[unit];
  TZ_CHECK(
      s.grads_open,
      "PartitionStore::grads_done: unit " + plan_.units()[unit].name + " has no open gradients",
      "call acquire_grads before grads_done, once per backward of the unit");
  s.grads_open = false;
  // While the trace is recorded, reductions are checked like gathers: a rank reducing another
  // unit than the others is an Error on every rank, not a mismatched collective.
  if (config_.stage == 3 && pass_ == PassKind::train && recording_)
    exchange_trace_word(2.0f, static_cast<float>(unit), "reduces the gradients of");
  const UnitPartition& p = plan_.partition(unit);
  if (p.padded_numel == 0 || s.grads_direct) {
    s.full_grad.reset();
    return;
  }
  flush_deferred_gathers();                // collectives go out in the same order on every rank
  device_.default_stream().synchronize();  // backward's writes must land before the engine reads
  PendingReduction r;
  r.unit = unit;
  if (config_.stage >= 2) {
    r.full_grad = std::move(s.full_grad);
    r.shard_mean = allocator_.allocate(p.shard_numel * sizeof(float), Category::comm,
                                       "zero reduce-scatter shard");
    r.request = group_.reduce_scatter_async(r.full_grad.data(), r.shard_mean.data(), p.shard_numel,
                                            DType::f32, comm::ReduceOp::avg);
  } else {
    // Every rank ends with the mean gradient. Under accumulation this is still right: the part
    // already averaged is equal on every rank, so the mean of (it + local) is it + mean(local).
    float* g = arenas_->ptr(StateBuffer::grads_full, unit);
    r.request = group_.all_reduce_async(g, g, p.padded_numel, DType::f32, comm::ReduceOp::avg);
  }
  r.issued_s = monotonic_seconds();
  pending_.push_back(std::move(r));
  while (pending_.size() > std::max<size_t>(1, config_.max_pending_reductions))
    finish_oldest_reduction();
}

void PartitionStore::finish_oldest_reduction() {
  PendingReduction& r = pending_.front();
  r.request.wait();
  wait_optimizer(r.unit);  // the background update must have read the shard this adds into
  const UnitPartition& p = plan_.partition(r.unit);
  ActivityLog::global().record(
      Track::collective, config_.stage >= 2 ? "reduce_scatter" : "all_reduce", r.issued_s,
      monotonic_seconds(), p.padded_numel * sizeof(float), static_cast<int64_t>(r.unit));
  if (config_.stage >= 2) {
    // Accumulate across micro-batches: shard += mean of this micro-batch's unit gradient.
    float* acc = grad_shard_ptr(r.unit);
    const size_t n = p.shard_numel;
    if (placement_[r.unit].grad == Tier::device) {
      device_.kernels().residual_forward(acc, acc, r.shard_mean.f32(), n);
    } else {
      offload::PinnedBuffer staging =
          host_pool_->allocate(n * sizeof(float), Category::io, "zero grad shard staging");
      const double t0 = monotonic_seconds();
      device_.copy(staging.data(), r.shard_mean.data(), n * sizeof(float), CopyKind::device_to_host,
                   device_.default_stream());
      device_.default_stream().synchronize();
      ActivityLog::global().record(Track::device_to_host, "grad shard to host", t0,
                                   monotonic_seconds(), n * sizeof(float),
                                   static_cast<int64_t>(r.unit));
      kernels::cpu::residual_forward(acc, acc, static_cast<const float*>(staging.data()), n);
      std::lock_guard<std::mutex> lock(optimizer_mutex_);
      grads_cleared_[r.unit] = 0;  // holds a gradient again
    }
  }
  pending_.pop_front();
}

void PartitionStore::finish_reductions_through(size_t unit) {
  while (std::any_of(pending_.begin(), pending_.end(),
                     [&](const PendingReduction& r) { return r.unit == unit; }))
    finish_oldest_reduction();
}

void PartitionStore::finish_all_reductions() {
  while (!pending_.empty()) finish_oldest_reduction();
}

void PartitionStore::zero_grads() {
  for (size_t u = 0; u < units_.size(); ++u)
    TZ_CHECK(
        !units_[u].grads_open,
        "PartitionStore::zero_grads: unit " + plan_.units()[u].name + " still has open gradients",
        "call grads_done for every unit before zero_grads");
  finish_all_reductions();  // a result landing after the zeroing would leak into the next step
  Stream& s = device_.default_stream();
  Arenas::Kind& full = arenas_->kinds[static_cast<size_t>(StateBuffer::grads_full)];
  if (full.device) device_.fill_zero(full.device.data(), full.device.bytes(), s);
  for (size_t u = 0; u < units_.size(); ++u) {
    if (!arenas_->has(StateBuffer::grad_shard, u)) continue;
    {
      // A unit the background optimizer has not reached yet is cleared by it after reading.
      std::lock_guard<std::mutex> lock(optimizer_mutex_);
      if (update_state_[u] == kUpdating || grads_cleared_[u]) continue;
    }
    const size_t bytes = plan_.partition(u).shard_numel * sizeof(float);
    if (placement_[u].grad == Tier::device)
      device_.fill_zero(grad_shard_ptr(u), bytes, s);
    else
      std::memset(grad_shard_ptr(u), 0, bytes);
  }
  s.synchronize();
  begin_pass(PassKind::train);
}

std::vector<float> PartitionStore::all_gather_pair(float a, float b, const char* label) {
  flush_deferred_gathers();  // collectives go out in the same order on every rank
  const auto n = static_cast<size_t>(group_.size());
  DeviceBuffer buf = allocator_.allocate(2 * n * sizeof(float), Category::comm,
                                         label);  // (ranks, 2) fp32
  Stream& s = device_.default_stream();
  const float mine[2] = {a, b};
  float* slot = buf.f32() + 2 * static_cast<size_t>(group_.rank());
  device_.copy(slot, mine, sizeof(mine), CopyKind::host_to_device, s);
  s.synchronize();
  group_.all_gather(slot, buf.f32(), 2, DType::f32);
  std::vector<float> all(2 * n);  // (ranks, 2)
  device_.copy(all.data(), buf.data(), all.size() * sizeof(float), CopyKind::device_to_host, s);
  s.synchronize();
  return all;
}

double PartitionStore::global_sum_squares(double local) {
  // Exchange each rank's double as (hi, lo) fp32 words with an all-gather (no arithmetic on the
  // wire) and sum in rank order: every rank gets the same, near-double-precise total, so every
  // rank computes the same clip coefficient.
  const float hi = static_cast<float>(local);
  const float lo = static_cast<float>(local - static_cast<double>(hi));
  const std::vector<float> all = all_gather_pair(hi, lo, "zero grad-norm exchange");
  double total = 0.0;
  for (size_t r = 0; r < all.size() / 2; ++r)
    total += static_cast<double>(all[2 * r]) + static_cast<double>(all[2 * r + 1]);
  return total;
}

// ---- loading and reading ----------------------------------------------------------------------

void PartitionStore::load_unit(size_t unit, const float* host_values) {
  check_unit("load_unit", unit);
  wait_optimizer_all();
  discard_staged_swap_reads();  // they may hold the old master values
  TZ_CHECK(host_values != nullptr || plan_.units()[unit].numel == 0,
           "PartitionStore::load_unit: null values for unit " + plan_.units()[unit].name, "");
  UnitState& s = units_[unit];
  TZ_CHECK(s.param_refs == 0,
           "PartitionStore::load_unit: unit " + plan_.units()[unit].name + " is acquired",
           "load parameters before training or between steps");
  const UnitPartition& p = plan_.partition(unit);
  if (config_.stage < 3) {
    const size_t numel = plan_.units()[unit].numel;
    const DType working = config_.placement.working;
    std::vector<uint16_t> bits;  // (numel) working type, 16-bit types only
    const void* src = host_values;
    if (working != DType::f32) {
      bits.resize(numel);
      convert_from_f32(bits.data(), working, host_values, numel);
      src = bits.data();
    }
    Stream& st = device_.default_stream();
    device_.copy(arenas_->raw(StateBuffer::params_full, unit), src, numel * dtype_size(working),
                 CopyKind::host_to_device, st);
    st.synchronize();  // the host array may be freed on return
  }
  // This rank's shard, padding zero, for the shard-shaped homes.
  std::vector<float> shard(p.shard_numel, 0.0f);  // (shard_numel)
  const size_t owned = p.owned_numel(plan_.rank());
  if (owned > 0)
    std::memcpy(shard.data(), host_values + p.shard_begin(plan_.rank()), owned * sizeof(float));
  if (config_.stage == 3) {
    // The gathered copy is stale, and a read-ahead of these extents must not race the write.
    if (s.fetch != Fetch::none || s.deferred) drop_gathered(unit);
    write_shard(StateBuffer::param_shard, unit, shard.data());
  }
  if (!placement_[unit].master_is_param) write_shard(StateBuffer::master, unit, shard.data());
}

void PartitionStore::read_unit(size_t unit, float* host_values) {
  check_unit("read_unit", unit);
  wait_optimizer(unit);
  const size_t numel = plan_.units()[unit].numel;
  Stream& st = device_.default_stream();
  if (config_.stage < 3) {
    const DType working = config_.placement.working;
    std::vector<uint16_t> bits;  // (numel) working type, 16-bit types only
    if (working != DType::f32) bits.resize(numel);
    void* dst = working == DType::f32 ? static_cast<void*>(host_values) : bits.data();
    device_.copy(dst, arenas_->raw(StateBuffer::params_full, unit), numel * dtype_size(working),
                 CopyKind::device_to_host, st);
    st.synchronize();
    if (working != DType::f32) convert_to_f32(host_values, bits.data(), working, numel);
    return;
  }
  UnitState& s = units_[unit];
  if (s.fetch != Fetch::ready) {
    if (s.fetch != Fetch::gathering && !s.deferred) start_gather(unit);
    finish_fetch(unit, false);
  }
  device_.copy(host_values, unit_params(unit), numel * sizeof(float), CopyKind::device_to_host, st);
  st.synchronize();
  if (s.param_refs == 0 && !persistent(unit)) drop_gathered(unit);
}

}  // namespace tierzero::zero
