// PartitionStore: ZeRO stages 0-3 on the device tier over one data-parallel communicator.
// Gradient reductions are issued asynchronously at grads_done and completed lazily (at most
// max_pending_reductions in flight), so they overlap the backward of the next unit.
#include "tierzero/zero/partition_store.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "tierzero/core/error.hpp"

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

PartitionStore::PartitionStore(std::vector<UnitSpec> units, const StoreConfig& config,
                               const OptimizerConfig& optimizer, comm::Communicator& group,
                               DeviceAllocator& allocator)
    : config_(config),
      optimizer_(optimizer),
      group_(group),
      allocator_(allocator),
      device_(allocator.device()),
      plan_(std::move(units), plan_ranks(config, group), plan_rank(config, group),
            config.shard_align_elems),
      units_(plan_.num_units()) {
  Stream& s = device_.default_stream();
  auto zeroed = [&](size_t numel, Category category, const char* label) {
    DeviceBuffer b = allocator_.allocate(numel * sizeof(float), category, label);
    device_.fill_zero(b.data(), numel * sizeof(float), s);
    return b;
  };
  const size_t full = plan_.full_numel();
  const size_t shard = plan_.shard_numel();
  if (config_.stage <= 2) params_full_ = zeroed(full, Category::param, "zero params (full)");
  if (config_.stage <= 1) grads_full_ = zeroed(full, Category::grad, "zero grads (full)");
  if (config_.stage == 3) param_shard_ = zeroed(shard, Category::param, "zero param shards");
  if (config_.stage >= 2) grad_shard_ = zeroed(shard, Category::grad, "zero grad shards");
  adam_m_ = zeroed(shard, Category::optimizer, "zero adam m shards");
  adam_v_ = zeroed(shard, Category::optimizer, "zero adam v shards");
}

PartitionStore::~PartitionStore() {
  // Wait for reductions still in flight (quietly, in CommRequest's destructor) before the
  // buffers they read and write are freed: at stages 0-1 they work in place in grads_full_.
  pending_.clear();
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
  if (config_.stage == 3) return param_shard_.f32() + plan_.shard_offset(unit);
  return params_full_.f32() + plan_.full_offset(unit) +
         plan_.partition(unit).shard_begin(plan_.rank());
}

float* PartitionStore::grad_shard_ptr(size_t unit) {
  if (config_.stage >= 2) return grad_shard_.f32() + plan_.shard_offset(unit);
  return grads_full_.f32() + plan_.full_offset(unit) +
         plan_.partition(unit).shard_begin(plan_.rank());
}

void PartitionStore::gather_unit(size_t unit, float* full) {
  const UnitPartition& p = plan_.partition(unit);
  if (p.padded_numel == 0) return;
  device_.default_stream().synchronize();  // the shard must be ready before the engine reads it
  group_.all_gather(param_shard_ptr(unit), full, p.shard_numel, DType::f32);
}

const float* PartitionStore::acquire_params(size_t unit) {
  check_unit("acquire_params", unit);
  UnitState& s = units_[unit];
  if (config_.stage < 3) {
    ++s.param_refs;
    return params_full_.f32() + plan_.full_offset(unit);
  }
  if (!s.gathered_fresh) {
    if (!s.gathered)
      s.gathered = allocator_.allocate(plan_.partition(unit).padded_numel * sizeof(float),
                                       Category::param, "zero gathered params");
    gather_unit(unit, s.gathered.f32());
    s.gathered_fresh = true;
  }
  ++s.param_refs;
  return s.gathered.f32();
}

void PartitionStore::release_params(size_t unit) {
  check_unit("release_params", unit);
  UnitState& s = units_[unit];
  TZ_CHECK(s.param_refs > 0,
           "PartitionStore::release_params: unit " + plan_.units()[unit].name +
               " released more often than acquired",
           "pair every release_params with an acquire_params");
  --s.param_refs;
  if (config_.stage == 3 && s.param_refs == 0 && !persistent(unit)) {
    s.gathered.reset();  // stream-ordered: later work reuses the block after this unit's work
    s.gathered_fresh = false;
  }
}

float* PartitionStore::acquire_grads(size_t unit) {
  check_unit("acquire_grads", unit);
  UnitState& s = units_[unit];
  if (!s.grads_open) {
    if (config_.stage >= 2) {
      const size_t padded = plan_.partition(unit).padded_numel;
      s.full_grad = allocator_.allocate(padded * sizeof(float), Category::grad, "zero full grads");
      device_.fill_zero(s.full_grad.data(), padded * sizeof(float), device_.default_stream());
    } else {
      // The previous micro-batch's all-reduce works in place on these gradients.
      finish_reductions_through(unit);
    }
    s.grads_open = true;
  }
  if (config_.stage >= 2) return s.full_grad.f32();
  return grads_full_.f32() + plan_.full_offset(unit);
}

void PartitionStore::grads_done(size_t unit) {
  check_unit("grads_done", unit);
  UnitState& s = units_[unit];
  TZ_CHECK(
      s.grads_open,
      "PartitionStore::grads_done: unit " + plan_.units()[unit].name + " has no open gradients",
      "call acquire_grads before grads_done, once per backward of the unit");
  s.grads_open = false;
  const UnitPartition& p = plan_.partition(unit);
  if (p.padded_numel == 0) {
    s.full_grad.reset();
    return;
  }
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
    float* g = grads_full_.f32() + plan_.full_offset(unit);
    r.request = group_.all_reduce_async(g, g, p.padded_numel, DType::f32, comm::ReduceOp::avg);
  }
  pending_.push_back(std::move(r));
  while (pending_.size() > std::max<size_t>(1, config_.max_pending_reductions))
    finish_oldest_reduction();
}

void PartitionStore::finish_oldest_reduction() {
  PendingReduction& r = pending_.front();
  r.request.wait();
  if (config_.stage >= 2) {
    // Accumulate across micro-batches: shard += mean of this micro-batch's unit gradient.
    float* acc = grad_shard_ptr(r.unit);
    device_.kernels().residual_forward(acc, acc, r.shard_mean.f32(),
                                       plan_.partition(r.unit).shard_numel);
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
  if (grads_full_) device_.fill_zero(grads_full_.data(), grads_full_.bytes(), s);
  if (grad_shard_) device_.fill_zero(grad_shard_.data(), grad_shard_.bytes(), s);
}

double PartitionStore::global_sum_squares(double local) {
  // Exchange each rank's double as (hi, lo) fp32 words with an all-gather (no arithmetic on the
  // wire) and sum in rank order: every rank gets the same, near-double-precise total, so every
  // rank computes the same clip coefficient.
  const auto n = static_cast<size_t>(group_.size());
  const float hi = static_cast<float>(local);
  const float lo = static_cast<float>(local - static_cast<double>(hi));
  const float mine[2] = {hi, lo};
  DeviceBuffer buf = allocator_.allocate(2 * n * sizeof(float), Category::comm,
                                         "zero grad-norm exchange");  // (ranks, 2) fp32
  Stream& s = device_.default_stream();
  float* slot = buf.f32() + 2 * static_cast<size_t>(group_.rank());
  device_.copy(slot, mine, sizeof(mine), CopyKind::host_to_device, s);
  s.synchronize();
  group_.all_gather(slot, buf.f32(), 2, DType::f32);
  std::vector<float> all(2 * n);  // (ranks, 2)
  device_.copy(all.data(), buf.data(), all.size() * sizeof(float), CopyKind::device_to_host, s);
  s.synchronize();
  double total = 0.0;
  for (size_t r = 0; r < n; ++r)
    total += static_cast<double>(all[2 * r]) + static_cast<double>(all[2 * r + 1]);
  return total;
}

StoreStepStats PartitionStore::step(double lr, double clip) {
  for (size_t u = 0; u < units_.size(); ++u)
    TZ_CHECK(units_[u].param_refs == 0 && !units_[u].grads_open,
             "PartitionStore::step: unit " + plan_.units()[u].name +
                 " is still acquired (params or gradients)",
             "release every unit and call grads_done before the optimizer step");
  finish_all_reductions();
  kernels::Kernels& k = device_.kernels();

  // Sum of squares over the gradient this rank owns. At stage 0 every rank owns (and holds) the
  // whole mean gradient, so no exchange: adding the ranks' sums would count it N times. At
  // stage 1 every rank also holds the whole mean gradient but owns only its shard of it.
  double local = 0.0;
  if (config_.stage >= 2) {
    local = k.sum_squares(grad_shard_.f32(), plan_.shard_numel());
  } else {
    for (size_t u = 0; u < units_.size(); ++u)
      local += k.sum_squares(grad_shard_ptr(u), plan_.partition(u).shard_numel);
  }
  StoreStepStats stats;
  stats.grad_norm = std::sqrt(config_.stage == 0 ? local : global_sum_squares(local));
  if (!std::isfinite(stats.grad_norm))
    TZ_THROW("gradient norm is not finite at optimizer step " + std::to_string(t_ + 1) +
                 " (ZeRO stage " + std::to_string(config_.stage) + ", " + group_.describe() + ")",
             "lower the learning rate; the parameters were not updated");
  if (clip > 0.0) {
    const double coef = clip / (stats.grad_norm + 1e-6);
    if (coef < 1.0) stats.clip_scale = coef;
  }
  ++t_;

  // AdamW on this rank's shards, one kernel call per tensor piece so that decay follows the
  // tensor; shard padding is in no piece and stays zero.
  for (size_t u = 0; u < units_.size(); ++u) {
    float* param = param_shard_ptr(u);
    const float* grad = grad_shard_ptr(u);
    float* m = adam_m_.f32() + plan_.shard_offset(u);
    float* v = adam_v_.f32() + plan_.shard_offset(u);
    for (const ShardSegment& seg : plan_.segments(u)) {
      const kernels::AdamWParams p{static_cast<float>(lr),
                                   static_cast<float>(optimizer_.beta1),
                                   static_cast<float>(optimizer_.beta2),
                                   static_cast<float>(optimizer_.eps),
                                   seg.decay ? static_cast<float>(optimizer_.weight_decay) : 0.0f,
                                   static_cast<float>(stats.clip_scale),
                                   t_};
      const size_t o = seg.shard_offset;
      k.adamw_update(param + o, m + o, v + o, grad + o, seg.numel, p);
    }
  }

  // Make the update visible. Stage 0: every rank made the same update. Stages 1-2: each rank
  // updated its slice of the full parameters; gather every unit in place. Stage 3: the shard is
  // the parameter; gathered copies (persistent units) are stale now and re-gathered on use.
  if (config_.stage == 1 || config_.stage == 2) {
    device_.default_stream().synchronize();
    std::vector<comm::CommRequest> gathers;
    for (size_t u = 0; u < units_.size(); ++u) {
      const UnitPartition& p = plan_.partition(u);
      if (p.padded_numel == 0) continue;
      gathers.push_back(group_.all_gather_async(param_shard_ptr(u),
                                                params_full_.f32() + plan_.full_offset(u),
                                                p.shard_numel, DType::f32));
    }
    comm::wait_all(gathers);
  } else if (config_.stage == 3) {
    for (UnitState& s : units_) s.gathered_fresh = false;
  }
  return stats;
}

void PartitionStore::load_unit(size_t unit, const float* host_values) {
  check_unit("load_unit", unit);
  TZ_CHECK(host_values != nullptr || plan_.units()[unit].numel == 0,
           "PartitionStore::load_unit: null values for unit " + plan_.units()[unit].name, "");
  UnitState& s = units_[unit];
  TZ_CHECK(s.param_refs == 0,
           "PartitionStore::load_unit: unit " + plan_.units()[unit].name + " is acquired",
           "load parameters before training or between steps");
  Stream& st = device_.default_stream();
  if (config_.stage < 3) {
    device_.copy(params_full_.f32() + plan_.full_offset(unit), host_values,
                 plan_.units()[unit].numel * sizeof(float), CopyKind::host_to_device, st);
  } else {
    const UnitPartition& p = plan_.partition(unit);
    const size_t owned = p.owned_numel(plan_.rank());
    if (owned > 0)
      device_.copy(param_shard_ptr(unit), host_values + p.shard_begin(plan_.rank()),
                   owned * sizeof(float), CopyKind::host_to_device, st);
    s.gathered_fresh = false;
  }
  st.synchronize();  // the host array may be freed on return
}

void PartitionStore::read_unit(size_t unit, float* host_values) {
  check_unit("read_unit", unit);
  const size_t numel = plan_.units()[unit].numel;
  Stream& st = device_.default_stream();
  if (config_.stage < 3) {
    device_.copy(host_values, params_full_.f32() + plan_.full_offset(unit), numel * sizeof(float),
                 CopyKind::device_to_host, st);
  } else {
    DeviceBuffer full = allocator_.allocate(plan_.partition(unit).padded_numel * sizeof(float),
                                            Category::comm, "zero read_unit gather");
    gather_unit(unit, full.f32());  // (padded_numel)
    device_.copy(host_values, full.data(), numel * sizeof(float), CopyKind::device_to_host, st);
  }
  st.synchronize();
}

}  // namespace tierzero::zero
