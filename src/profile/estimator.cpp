// The memory estimator (see estimator.hpp; formulas in docs/estimator.md).
#include "tierzero/profile/estimator.hpp"

#include <algorithm>

#include "tierzero/core/error.hpp"
#include "tierzero/device/device_allocator.hpp"
#include "tierzero/offload/host_pool.hpp"
#include "tierzero/zero/checkpoint_tier.hpp"
#include "tierzero/zero/partition_store.hpp"
#include "tierzero/zero/unit_groups.hpp"

namespace tierzero::profile {

namespace {

size_t& slot(TierBytes& b, Tier t, Category c) {
  return b.bytes[static_cast<size_t>(t)][static_cast<size_t>(c)];
}

size_t unit_parameters(const zero::UnitSpec& u) {
  size_t n = 0;
  for (const zero::TensorSpec& t : u.tensors) n += t.numel;
  return u.tensors.empty() ? u.numel : n;
}

}  // namespace

size_t Estimate::total() const {
  size_t n = 0;
  for (Tier t : {Tier::device, Tier::host, Tier::nvme}) n += tier_total(t);
  return n;
}

namespace {

void check_rank_units(const std::vector<zero::UnitSpec>& units, const WorldLayout& world) {
  TZ_CHECK(world.dp >= 1 && world.tp >= 1 && world.pp >= 1 && world.sp >= 1,
           "world layout dp=" + std::to_string(world.dp) + " tp=" + std::to_string(world.tp) +
               " pp=" + std::to_string(world.pp) + " sp=" + std::to_string(world.sp) +
               " has a part below 1",
           "every part of the layout is at least 1; ranks = dp * tp * pp * sp");
  TZ_CHECK(!units.empty(), "the model has no units", "describe at least one unit");
}

void rank_units_check(const EstimateInput& in) {
  check_rank_units(in.units, in.world);
}

}  // namespace

std::vector<zero::UnitSpec> rank_units(const std::vector<zero::UnitSpec>& units,
                                       const WorldLayout& world) {
  check_rank_units(units, world);
  return units;
}

Estimate estimate(const EstimateInput& in) {
  rank_units_check(in);
  return estimate(in, zero::identical_runs(in.units));
}

Estimate estimate(const EstimateInput& in, const std::vector<zero::UnitRun>& runs) {
  rank_units_check(in);
  // Every rank of the group has the same shard sizes; rank 0 stands for all of them. At stage 0
  // nothing is partitioned: the store plans for one rank (every rank holds everything). Identical
  // units count once per group (unit_groups.hpp): the sums below are count times the unit's.
  const int group = in.stage == 0 ? 1 : in.world.partition_group();
  TZ_CHECK(group >= 1, "partition_unit: group of " + std::to_string(group) + " ranks",
           "a partition group has at least one rank");
  const std::vector<zero::UnitGroup> groups =
      zero::group_units(runs, in.units.size(), group, in.stage, in.placement);

  Estimate e;
  e.persistent = zero::model_state_bytes(groups, in.stage, in.placement);
  e.units = in.units.size();
  for (const zero::UnitGroup& g : groups) {
    e.full_elems += g.count * g.part.padded_numel;
    e.shard_elems += g.count * g.part.shard_numel;
    e.largest_unit_elems = std::max(e.largest_unit_elems, g.part.padded_numel);
    e.parameters += g.count * unit_parameters(*g.spec);
  }

  // Stage 3: units below the persistence threshold stay gathered on the device for the whole run
  // (gathering them each time costs more in latency than they save), one allocator block each.
  // The rest are gathered on demand: at most max_live_parameters elements at once, but never
  // fewer than the two largest (the unit in use and the one prefetched), nor more than all.
  if (in.stage == 3) {
    // A unit ready for use is held in the compute dtype: fp32 (a 16-bit gather widened as it
    // lands), or in 16-bit compute the gathered working copy itself.
    const DType working = in.placement.working;
    const size_t held = in.compute == DType::f32 ? sizeof(float) : dtype_size(working);
    std::vector<std::pair<size_t, size_t>> gathered;  // padded lengths of non-persistent units,
                                                      // with their counts
    for (const zero::UnitGroup& g : groups) {
      const zero::UnitPartition& p = g.part;
      // On one rank a device-resident fp32 shard is the unit itself: nothing is gathered.
      const bool direct =
          group == 1 && g.placement.param == Tier::device && in.placement.working == DType::f32;
      if (direct) continue;
      if (p.numel < in.param_persistence_threshold) {
        slot(e.persistent, Tier::device, Category::param) +=
            g.count * DeviceAllocator::round_size(p.padded_numel * held);
        e.persistent_units += g.count;
      } else {
        gathered.emplace_back(p.padded_numel, g.count);
      }
    }
    std::sort(gathered.rbegin(), gathered.rend());
    size_t all = 0;
    for (const auto& [n, count] : gathered) all += count * n;
    size_t two_largest = 0, taken = 0;
    for (const auto& [n, count] : gathered) {
      const size_t take = std::min<size_t>(2 - taken, count);
      two_largest += take * n;
      taken += take;
      if (taken == 2) break;
    }
    const size_t live = std::min(all, std::max(in.max_live_parameters, two_largest));
    // While a 16-bit gather is widened, its gathered block and the fp32 copy both exist: the
    // largest unit's block on top of the live units' fp32.
    const bool widens = working != DType::f32 && in.compute == DType::f32;
    const size_t widening =
        widens && !gathered.empty() ? gathered.front().first * dtype_size(working) : 0;
    slot(e.buffers, Tier::device, Category::param) += live * held + widening;
  }

  // Below stage 3 the whole working copy is held (model state); a 16-bit one computed in fp32 is
  // widened unit by unit while in use, one at a time.
  if (in.stage < 3 && in.placement.working != DType::f32 && in.compute == DType::f32)
    slot(e.buffers, Tier::device, Category::param) +=
        DeviceAllocator::round_size(e.largest_unit_elems * sizeof(float));

  // The gradient reducer's buckets: full gradients being accumulated or waiting to be reduced,
  // packed buckets and their reduced shards in flight (zero's rule: reduction_buffer_bound).
  const zero::ReductionBuffers reduction = zero::reduction_buffer_bound(
      groups, group, in.stage, in.reduce_bucket_elems, in.overlap_comm, in.reduce_dtype);
  slot(e.buffers, Tier::device, Category::comm) += reduction.device_comm;

  // From stage 1 each rank owns only part of the gradient, so clipping exchanges the partial sums
  // of squares: a (ranks, 2) fp32 block, allocated after the reductions have finished; under
  // tensor parallelism the sum goes on over the tensor-parallel group (a (tp, 2) block, after
  // the first one is freed).
  // Before them, under tensor parallelism, the replicated tensors' gradient segments go out in
  // one packed broadcast over the tp group (zero::replicated_shard_elems; the rank holding the
  // most of them), also freed first.
  size_t norm_exchange = 0;
  if (in.stage >= 1)
    norm_exchange = DeviceAllocator::round_size(2 * static_cast<size_t>(group) * sizeof(float));
  if (in.world.tp > 1) {
    const auto tp = static_cast<size_t>(in.world.tp);
    norm_exchange = std::max(norm_exchange, DeviceAllocator::round_size(2 * tp * sizeof(float)));
    const size_t replicated = zero::max_replicated_shard_elems(groups, group);
    if (replicated > 0)
      norm_exchange =
          std::max(norm_exchange, DeviceAllocator::round_size(replicated * sizeof(float)));
  }
  slot(e.buffers, Tier::device, Category::comm) += norm_exchange;

  // NVMe-resident optimizer states stream through the pipeline's slots (zero's rule:
  // optimizer_swap_shape). NVMe-resident parameters are staged a shard at a time,
  // offload_param.buffer_count shards at most (reads in flight and the optimizer's handoffs to the
  // next fetch share them).
  const zero::OptimizerSwapShape swap = zero::optimizer_swap_shape(
      groups, std::max<size_t>(in.placement.nvme_chunk_elems, 1), in.staging_buffer_count);
  size_t largest_param_shard = 0;
  bool param_nvme = false;
  for (const zero::UnitGroup& g : groups) {
    const size_t n = g.part.shard_numel;
    if (g.placement.param == Tier::nvme) {
      param_nvme = true;
      largest_param_shard = std::max(largest_param_shard, n);
    }
  }
  const bool optim_nvme = swap.slots > 0;
  // Stages 2-3 with gradients on the host: each reduced bucket is staged through pinned memory on
  // its way to the host accumulators, one at a time.
  slot(e.buffers, Tier::host, Category::io) += reduction.host_io;
  // Gradient shards on NVMe are added into (and their norm taken) one chunk at a time.
  size_t largest_nvme_grad = 0;
  for (const zero::UnitGroup& g : groups)
    if (g.placement.grad == Tier::nvme)
      largest_nvme_grad = std::max(largest_nvme_grad, g.part.shard_numel);
  if (largest_nvme_grad > 0)
    slot(e.buffers, Tier::host, Category::io) += offload::HostPool::round_size(
        std::min(std::max<size_t>(in.placement.nvme_chunk_elems, 1), largest_nvme_grad) *
        sizeof(float));
  slot(e.buffers, Tier::host, Category::io) += zero::optimizer_swap_host_bytes(swap);
  if (param_nvme)
    slot(e.buffers, Tier::host, Category::io) +=
        std::max<size_t>(1, in.param_staging_buffers) *
        offload::HostPool::round_size(largest_param_shard * dtype_size(in.placement.working));
  if (param_nvme || optim_nvme) slot(e.buffers, Tier::host, Category::io) += in.nvme_bounce_bytes;
  // Loading the model (its initial values or a checkpoint) stages one unit's fp32 values in host
  // memory at a time (at stage 3 only this rank's shard), beside the optimizer's slots, which
  // exist from the start; from the pinned pool where the store has one (its size classes).
  size_t load_staging = 0;
  bool host_pool = false;
  for (const zero::UnitGroup& g : groups) {
    const zero::UnitPartition& p = g.part;
    load_staging =
        std::max(load_staging, (in.stage < 3 ? p.padded_numel : p.shard_numel) * sizeof(float));
    host_pool =
        host_pool || g.placement.param != Tier::device || g.placement.optimizer != Tier::device;
  }
  if (host_pool) load_staging = offload::HostPool::round_size(load_staging);
  size_t& host_io = slot(e.buffers, Tier::host, Category::io);
  host_io = std::max(host_io, zero::optimizer_swap_host_bytes(swap) + load_staging);

  // MPI on host memory widens a 16-bit reduction to fp32 in two grow-only staging buffers (the
  // comm layer's HostScratch), sized by zero's rule; from the pinned pool where the store has one,
  // else the heap.
  if (in.host_widening && in.world.partition_group() > 1) {
    const auto round = [host_pool](size_t elems) {
      const size_t bytes = elems * sizeof(float);
      return host_pool ? offload::HostPool::round_size(bytes) : (bytes + 63) / 64 * 64;
    };
    if (reduction.widened_in_elems > 0)
      slot(e.buffers, Tier::host, Category::comm) +=
          round(reduction.widened_in_elems) + round(reduction.widened_out_elems);
  }

  slot(e.buffers, Tier::device, Category::activation) += in.activation_bytes;
  add_checkpoint_bytes(in.checkpoints, e.buffers);
  // The checkpoints' NVMe engine stages through its own bounce buffers from the same pool.
  if (in.checkpoints.tier == Tier::nvme && in.checkpoints.stored > 0)
    slot(e.buffers, Tier::host, Category::io) += in.nvme_bounce_bytes;
  return e;
}

void add_checkpoint_bytes(const CheckpointPlacementInput& c, zero::StateBytes& into) {
  if (c.tier == Tier::device || c.stored == 0) return;
  auto cell = [&into](Tier t, Category k) -> size_t& {
    return into.bytes[static_cast<size_t>(t)][static_cast<size_t>(k)];
  };
  cell(Tier::device, Category::activation_checkpoint) +=
      zero::CheckpointTier::device_bytes_for(c.device_slots, c.bytes, c.stored);
  if (c.tier == Tier::host) {
    cell(Tier::host, Category::activation_checkpoint) +=
        c.tier_count() * offload::HostPool::round_size(c.bytes);
    return;
  }
  const size_t padded =
      std::max<size_t>(offload::kIoAlignment, (c.bytes + offload::kIoAlignment - 1) /
                                                  offload::kIoAlignment * offload::kIoAlignment);
  cell(Tier::nvme, Category::activation_checkpoint) += c.tier_count() * padded;
  // Pinned staging: a checkpoint per slot on its way out and one per slot on its way in.
  cell(Tier::host, Category::io) += 2 * std::min(std::max<size_t>(c.device_slots, 2), c.stored) *
                                    offload::HostPool::round_size(c.bytes);
}

const char* offload_option_name(OffloadOption o) {
  switch (o) {
    case OffloadOption::none:
      return "none";
    case OffloadOption::optimizer_cpu:
      return "optimizer cpu";
    case OffloadOption::optimizer_nvme:
      return "optimizer nvme";
    case OffloadOption::param_optimizer_cpu:
      return "param+optimizer cpu";
    case OffloadOption::param_optimizer_nvme:
      return "param+optimizer nvme";
  }
  return "?";
}

void apply_offload_option(OffloadOption o, zero::PlacementConfig& placement) {
  placement.param = {Tier::device, 1.0};
  placement.optimizer = {Tier::device, 1.0};
  switch (o) {
    case OffloadOption::none:
      break;
    case OffloadOption::optimizer_cpu:
      placement.optimizer.tier = Tier::host;
      break;
    case OffloadOption::optimizer_nvme:
      placement.optimizer.tier = Tier::nvme;
      break;
    case OffloadOption::param_optimizer_cpu:
      placement.param.tier = Tier::host;
      placement.optimizer.tier = Tier::host;
      break;
    case OffloadOption::param_optimizer_nvme:
      placement.param.tier = Tier::nvme;
      placement.optimizer.tier = Tier::nvme;
      break;
  }
}

std::vector<TableRow> estimate_table(const EstimateInput& base) {
  std::vector<TableRow> rows;
  // One copy of the input and one grouping of its units for every row: stage and offload are
  // all that changes.
  EstimateInput in = base;
  std::vector<zero::UnitRun> runs;
  try {
    runs = zero::identical_runs(in.units);
  } catch (const Error&) {
    runs.clear();  // each row reports the invalid unit through estimate(in)
  }
  for (int stage = 0; stage <= 3; ++stage) {
    for (size_t o = 0; o < kNumOffloadOptions; ++o) {
      TableRow row;
      row.stage = stage;
      row.offload = static_cast<OffloadOption>(o);
      in.stage = stage;
      apply_offload_option(row.offload, in.placement);
      try {
        row.estimate = runs.empty() ? estimate(in) : estimate(in, runs);
        row.valid = true;
      } catch (const Error& err) {
        row.reason = err.what_failed();
      }
      rows.push_back(std::move(row));
    }
  }
  return rows;
}

}  // namespace tierzero::profile
