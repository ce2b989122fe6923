// The partition store's optimizer step: the global gradient norm over every shard wherever it
// lives, then AdamW where each unit's optimizer states live — the device's kernel, the CPU kernel
// on host shards, or a read -> update -> write pipeline over chunks of NVMe-resident shards
// (store_nvme_optimizer.cpp) — and the updated parameters published to wherever the next forward
// reads them.
//
// Every path applies the same elementwise kernel to the same values (the device tier of the CPU
// backend and the host path run the same CPU function), so the placements agree bitwise; the
// NVMe pipeline only cuts the calls at chunk boundaries, which an elementwise update ignores.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>

#include "segment_update.hpp"
#include "state_arenas.hpp"
#include "tierzero/core/activity_log.hpp"
#include "tierzero/core/error.hpp"
#include "tierzero/core/timer.hpp"
#include "tierzero/kernels/cpu_ops.hpp"
#include "tierzero/zero/partition_store.hpp"

namespace tierzero::zero {

double PartitionStore::local_grad_sum_squares() {
  // Sum of squares over the gradient this rank owns. At stage 0 every rank owns (and holds) the
  // whole mean gradient; at stage 1 every rank holds it but owns only its shard.
  kernels::Kernels& k = device_.kernels();
  double local = 0.0;
  for (size_t u = 0; u < units_.size(); ++u) {
    const size_t n = plan_.partition(u).shard_numel;
    const float* g = grad_shard_ptr(u);
    local +=
        placement_[u].grad == Tier::device ? k.sum_squares(g, n) : kernels::cpu::sum_squares(g, n);
  }
  return local;
}

void PartitionStore::publish_params(size_t unit, const float* master, size_t begin, size_t count,
                                    bool master_on_device) {
  // The updated master values become the working parameters wherever they live, rounded once to
  // the working type: by the device's kernel where master and parameters are both on the device,
  // else on the host (a device master is copied out first).
  if (count == 0) return;
  const Tier home = config_.stage == 3 ? placement_[unit].param : Tier::device;
  const DType working = config_.placement.working;
  const size_t eb = dtype_size(working);
  const size_t bytes = count * eb;
  Stream& st = device_.default_stream();
  const double t0 = monotonic_seconds();
  const auto u = static_cast<int64_t>(unit);
  std::vector<float> master_copy;  // (count) host, a device master of 16-bit parameters off it
  std::vector<uint16_t> bits;      // (count) working type, 16-bit types only
  const void* src = master;
  if (working != DType::f32) {
    if (master_on_device && home == Tier::device) {
      void* dst = static_cast<std::byte*>(param_shard_raw(unit)) + begin * eb;
      device_.kernels().convert_from_f32(dst, working, master, count);
      st.synchronize();
      return;
    }
    if (master_on_device) {
      master_copy.resize(count);
      device_.copy(master_copy.data(), master, count * sizeof(float), CopyKind::device_to_host, st);
      st.synchronize();
      master = master_copy.data();
    }
    bits.resize(count);
    convert_from_f32(bits.data(), working, master, count);
    src = bits.data();
    master_on_device = false;
  }
  if (home == Tier::device || home == Tier::host) {
    void* dst = static_cast<std::byte*>(param_shard_raw(unit)) + begin * eb;
    if (home == Tier::host && !master_on_device) {
      std::memcpy(dst, src, bytes);
      return;
    }
    const CopyKind kind = home == Tier::host ? CopyKind::device_to_host
                          : master_on_device ? CopyKind::device_to_device
                                             : CopyKind::host_to_device;
    device_.copy(dst, src, bytes, kind, st);
    st.synchronize();
    if (kind != CopyKind::device_to_device)
      ActivityLog::global().record(
          kind == CopyKind::host_to_device ? Track::host_to_device : Track::device_to_host,
          "publish params", t0, monotonic_seconds(), bytes, u);
    return;
  }
  offload::PinnedBuffer staging;
  if (master_on_device) {
    staging = host_pool_->allocate(bytes, Category::io, "zero param publish staging");
    device_.copy(staging.data(), src, bytes, CopyKind::device_to_host, st);
    st.synchronize();
    src = staging.data();
  }
  auto writes = arenas_->write(StateBuffer::param_shard, unit, begin, count, src);
  wait_io(writes);
}

void PartitionStore::update_unit_in_memory(size_t unit, const kernels::AdamWParams& base,
                                           bool on_device) {
  // The device's kernel for device-resident states, the CPU kernel for host-resident ones (on
  // the CPU backend both are the same function, so the placements agree bitwise).
  kernels::Kernels& k = device_.kernels();
  float* param = master_ptr(unit);
  const float* grad = grad_shard_ptr(unit);
  float* m = arenas_->ptr(StateBuffer::adam_m, unit);
  float* v = arenas_->ptr(StateBuffer::adam_v, unit);
  const size_t n = plan_.partition(unit).shard_numel;
  for_segments(plan_.segments(unit), 0, n, base, static_cast<float>(optimizer_.weight_decay),
               [&](size_t o, size_t count, const kernels::AdamWParams& p) {
                 if (on_device)
                   k.adamw_update(param + o, m + o, v + o, grad + o, count, p);
                 else
                   kernels::cpu::adamw_update(param + o, m + o, v + o, grad + o, count, p);
               });
  if (!placement_[unit].master_is_param) publish_params(unit, param, 0, n, on_device);
}

StoreStepStats PartitionStore::step(double lr, double clip, double loss_scale) {
  wait_optimizer_all();
  for (size_t u = 0; u < units_.size(); ++u)
    TZ_CHECK(units_[u].param_refs == 0 && !units_[u].grads_open,
             "PartitionStore::step: unit " + plan_.units()[u].name +
                 " is still acquired (params or gradients)",
             "release every unit and call grads_done before the optimizer step");
  finish_all_reductions();
  if (config_.stage == 3) {
    if (pass_ == PassKind::train && recording_) {
      check_trace_end();
      trace_ = recording_trace_;
      trace_valid_ = true;
      recording_ = false;
    } else if (pass_ == PassKind::train && off_trace_) {
      trace_valid_ = false;  // record it again next step
    }
    // Every gathered copy is stale after the update, and gathers still in flight read the
    // shards the update writes.
    drop_unused_fetches();
  }
  // Below stage 2 with the optimizer on the CPU: the rank's slice of the averaged gradient goes
  // to its host gradient shard.
  Stream& st = device_.default_stream();
  for (size_t u = 0; u < units_.size(); ++u) {
    if (config_.stage >= 2 || placement_[u].grad == Tier::device) continue;
    const size_t n = plan_.partition(u).shard_numel;
    const double t0 = monotonic_seconds();
    device_.copy(
        arenas_->ptr(StateBuffer::grad_shard, u),
        arenas_->ptr(StateBuffer::grads_full, u) + plan_.partition(u).shard_begin(plan_.rank()),
        n * sizeof(float), CopyKind::device_to_host, st);
    st.synchronize();
    ActivityLog::global().record(Track::device_to_host, "grad shard to host", t0,
                                 monotonic_seconds(), n * sizeof(float), static_cast<int64_t>(u));
  }

  TZ_CHECK(loss_scale > 0.0 && std::isfinite(loss_scale),
           "PartitionStore::step: loss scale " + std::to_string(loss_scale) + " is not positive",
           "pass 1 without loss scaling");
  const double local = local_grad_sum_squares();
  StoreStepStats stats;
  stats.grad_norm = std::sqrt(config_.stage == 0 ? local : global_sum_squares(local)) / loss_scale;
  if (!std::isfinite(stats.grad_norm) && loss_scale != 1.0) {
    stats.skipped = true;  // every rank sees the same norm, so every rank skips
    return stats;
  }
  if (!std::isfinite(stats.grad_norm))
    TZ_THROW("gradient norm is not finite at optimizer step " + std::to_string(t_ + 1) +
                 " (ZeRO stage " + std::to_string(config_.stage) + ", " + group_.describe() + ")",
             "lower the learning rate; the parameters were not updated");
  if (clip > 0.0) {
    const double coef = clip / (stats.grad_norm + 1e-6);
    if (coef < 1.0) stats.clip_scale = coef;
  }
  ++t_;
  const kernels::AdamWParams base{static_cast<float>(lr),
                                  static_cast<float>(optimizer_.beta1),
                                  static_cast<float>(optimizer_.beta2),
                                  static_cast<float>(optimizer_.eps),
                                  0.0f,
                                  static_cast<float>(stats.clip_scale / loss_scale),
                                  t_};
  const double t0 = monotonic_seconds();
  for (size_t u = 0; u < units_.size(); ++u) {
    if (placement_[u].optimizer != Tier::nvme)
      update_unit_in_memory(u, base, placement_[u].optimizer == Tier::device);
  }
  st.synchronize();
  ActivityLog::global().record(Track::optimizer, "adamw", t0, monotonic_seconds());
  bool any_nvme = false;
  for (const UnitPlacement& p : placement_) any_nvme = any_nvme || p.optimizer == Tier::nvme;
  if (any_nvme && background_optimizer_) {
    // Stage 3 on the CPU backend: the NVMe pipeline runs behind the next forward. Every access
    // to a unit's parameters or gradient shard waits until that unit's update is published
    // (wait_optimizer); the pipeline clears each gradient shard once it has read it.
    {
      std::lock_guard<std::mutex> lock(optimizer_mutex_);
      for (const SwapChunk& c : swap_chunks_) update_state_[c.unit] = kUpdating;
    }
    auto run = [this, base, threads = kernels::cpu::threads()] {
      kernels::cpu::set_threads(threads);  // not OpenMP's default of every core
      try {
        update_units_on_nvme(base, true);
      } catch (...) {
        std::lock_guard<std::mutex> lock(optimizer_mutex_);
        optimizer_error_ = std::current_exception();
        std::fill(update_state_.begin(), update_state_.end(), kUpdateDone);
        optimizer_cv_.notify_all();
      }
    };
    try {
      optimizer_thread_ = std::thread(run);
    } catch (...) {
      std::lock_guard<std::mutex> lock(optimizer_mutex_);
      std::fill(update_state_.begin(), update_state_.end(), kUpdateDone);
      throw;
    }
  } else if (any_nvme) {
    update_units_on_nvme(base, false);
  }

  // Make the update visible. Stage 0: every rank made the same update. Stages 1-2: each rank
  // updated its slice of the full parameters; gather every unit in place. Stage 3: the shard is
  // the parameter; it is gathered on next use.
  if (config_.stage == 1 || config_.stage == 2) {
    st.synchronize();
    const double g0 = monotonic_seconds();
    size_t bytes = 0;
    std::vector<comm::CommRequest> gathers;
    for (size_t u = 0; u < units_.size(); ++u) {
      const UnitPartition& p = plan_.partition(u);
      if (p.padded_numel == 0) continue;
      gathers.push_back(group_.all_gather_async(param_shard_raw(u),
                                                arenas_->raw(StateBuffer::params_full, u),
                                                p.shard_numel, config_.placement.working));
      bytes += p.padded_numel * dtype_size(config_.placement.working);
    }
    comm::wait_all(gathers);
    ActivityLog::global().record(Track::collective, "all_gather params", g0, monotonic_seconds(),
                                 bytes);
  }
  return stats;
}

}  // namespace tierzero::zero
