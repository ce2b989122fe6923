// Grouped byte arithmetic of the partition store (see unit_groups.hpp). Each function is the
// per-unit rule it replaces, a sum becoming count times the group's term: unsigned arithmetic
// wraps alike either way, so the results equal the per-unit loops' for any model.
#include "tierzero/zero/unit_groups.hpp"

#include <algorithm>

#include "tierzero/core/error.hpp"
#include "tierzero/device/device_allocator.hpp"
#include "tierzero/offload/host_pool.hpp"

namespace tierzero::zero {

namespace {

bool same_shape(const UnitSpec& a, const UnitSpec& b) {
  if (a.numel != b.numel || a.tied != b.tied || a.tensors.size() != b.tensors.size()) return false;
  for (size_t i = 0; i < a.tensors.size(); ++i) {
    const TensorSpec &x = a.tensors[i], &y = b.tensors[i];
    if (x.offset != y.offset || x.numel != y.numel || x.decay != y.decay ||
        x.replicated != y.replicated)
      return false;
  }
  return true;
}

}  // namespace

std::vector<UnitRun> identical_runs(const std::vector<UnitSpec>& units) {
  std::vector<UnitRun> runs;
  for (size_t u = 0; u < units.size(); ++u) {
    if (!runs.empty() && same_shape(*runs.back().spec, units[u])) {
      ++runs.back().count;
      continue;
    }
    validate_unit(units[u]);
    runs.push_back(UnitRun{&units[u], u, 1});
  }
  return runs;
}

std::vector<UnitGroup> group_units(const std::vector<UnitRun>& runs, size_t units, int ranks,
                                   int stage, const PlacementConfig& config, size_t align_elems) {
  check_placement(stage, config);
  const size_t param_off = offloaded_unit_count(units, config.param.ratio);
  const size_t optim_off = offloaded_unit_count(units, config.optimizer.ratio);
  std::vector<UnitGroup> groups;
  for (const UnitRun& run : runs) {
    const UnitPartition part = partition_unit(run.spec->numel, ranks, align_elems);
    const size_t end = run.first + run.count;
    size_t at = run.first;
    while (at < end) {
      // The placement changes only where an offloaded prefix ends.
      size_t next = end;
      for (size_t cut : {param_off, optim_off})
        if (cut > at && cut < next) next = cut;
      groups.push_back(
          UnitGroup{run.spec, part, unit_placement(at, param_off, optim_off, config), next - at});
      at = next;
    }
  }
  return groups;
}

std::vector<UnitGroup> plan_groups(const PartitionPlan& plan,
                                   const std::vector<UnitPlacement>& placement) {
  std::vector<UnitGroup> groups;
  groups.reserve(plan.num_units());
  for (size_t u = 0; u < plan.num_units(); ++u)
    groups.push_back(UnitGroup{&plan.units()[u], plan.partition(u), placement.at(u), 1});
  return groups;
}

StateBytes model_state_bytes(const std::vector<UnitGroup>& groups, int stage,
                             const PlacementConfig& config) {
  StateBytes out;
  for (size_t b = 0; b < kNumStateBuffers; ++b) {
    const auto buffer = static_cast<StateBuffer>(b);
    const auto c = static_cast<size_t>(state_buffer_category(buffer));
    const size_t elem_bytes = state_elem_bytes(buffer, config.working);
    for (Tier tier : {Tier::device, Tier::host, Tier::nvme}) {
      size_t elems = 0;
      size_t nvme = 0;
      for (const UnitGroup& g : groups) {
        const size_t e = unit_state_elems(g.part, g.placement, stage, buffer, tier);
        elems += g.count * e;
        if (tier == Tier::nvme && e > 0)
          nvme += g.count * nvme_unit_bytes(e, config.nvme_chunk_elems, elem_bytes);
      }
      out.bytes[static_cast<size_t>(tier)][c] +=
          tier == Tier::nvme ? nvme : arena_bytes(tier, elems * elem_bytes);
    }
  }
  return out;
}

OptimizerSwapShape optimizer_swap_shape(const std::vector<UnitGroup>& groups, size_t chunk_elems,
                                        size_t buffer_count) {
  TZ_CHECK(chunk_elems > 0, "optimizer_swap_shape: chunk of 0 elements",
           "offload_optimizer.buffer_size must be positive");
  OptimizerSwapShape shape;
  for (const UnitGroup& g : groups) {
    if (g.placement.optimizer != Tier::nvme) continue;
    if (g.placement.grad == Tier::nvme) shape.buffers = 4;
    const size_t n = g.part.shard_numel;
    shape.chunks += g.count * ((n + chunk_elems - 1) / chunk_elems);
    shape.largest_chunk = std::max(shape.largest_chunk, std::min(chunk_elems, n));
  }
  shape.slots = std::min(shape.chunks, std::max<size_t>(2, buffer_count));
  return shape;
}

namespace {

// bucket_capacity, over the largest unit of the groups.
size_t group_bucket_capacity(const std::vector<UnitGroup>& groups, size_t reduce_bucket_elems,
                             bool overlap_comm) {
  const size_t capacity = std::max<size_t>(1, reduce_bucket_elems);
  if (!overlap_comm) return capacity;
  size_t largest = 0;
  for (const UnitGroup& g : groups) largest = std::max(largest, g.part.padded_numel);
  return std::max<size_t>(1, std::min(capacity, largest));
}

}  // namespace

ReductionBuffers reduction_buffer_bound(const std::vector<UnitGroup>& groups, int ranks, int stage,
                                        size_t reduce_bucket_elems, bool overlap_comm,
                                        DType reduce_dtype) {
  ReductionBuffers out;
  const size_t capacity = group_bucket_capacity(groups, reduce_bucket_elems, overlap_comm);
  if (stage < 2) {
    // Stages 0-1 reduce in place in the full-gradient arena; a 16-bit reduce_dtype adds the
    // buckets' 16-bit copies in flight: at most one bucket's worth, in at most two blocks.
    if (reduce_dtype == DType::f32) return out;
    size_t largest = 0, total = 0;
    for (const UnitGroup& g : groups) {
      largest = std::max(largest, g.part.padded_numel);
      total += g.count * g.part.padded_numel;
    }
    if (total == 0) return out;
    const size_t bucket = std::max(std::min(capacity, total), largest);
    out.device_comm = 2 * DeviceAllocator::round_size(bucket * dtype_size(reduce_dtype));
    out.widened_in_elems = out.widened_out_elems = bucket;  // an all-reduce
    return out;
  }
  // Units whose gradient is reduced at all (one rank with device gradients adds in place).
  size_t largest = 0, total = 0, slack = 0, host_units = 0;
  for (const UnitGroup& g : groups) {
    if (ranks == 1 && g.placement.grad == Tier::device) continue;
    const size_t padded = g.part.padded_numel;
    largest = std::max(largest, padded);
    total += g.count * padded;
    slack +=
        g.count * (DeviceAllocator::round_size(padded * sizeof(float)) - padded * sizeof(float));
    host_units += g.placement.grad != Tier::device ? g.count : 0;
  }
  if (total == 0) return out;
  // A bucket of several units holds at most reduce_bucket_elems; a bucket of one unit is that
  // unit. Its reduced shards are 1/ranks of it (shards pad units evenly). With a 16-bit
  // reduce_dtype a bucket holds 1.5x its fp32 blocks only while it is converted, and half its
  // packed block in flight: the same bound holds.
  const size_t bucket = std::max(std::min(capacity, total), largest);
  const auto n = static_cast<size_t>(ranks);
  const size_t packed = DeviceAllocator::round_size(bucket * sizeof(float));
  const size_t shard = DeviceAllocator::round_size(bucket / n * sizeof(float));
  // Two units open under backward (the tied head keeps the embeddings' gradients open through the
  // whole backward), the open bucket's full gradients, and the buckets in flight with their
  // reduced shards: at most one bucket's worth of elements, in at most max_pending_reductions
  // blocks (bounded by twice a bucket's block to cover their rounding).
  out.device_comm = 2 * DeviceAllocator::round_size(largest * sizeof(float)) +
                    bucket * sizeof(float) + slack + 2 * (packed + shard);
  if (host_units > 0) out.host_io = offload::HostPool::round_size(bucket / n * sizeof(float));
  if (reduce_dtype != DType::f32) {  // a reduce-scatter
    out.widened_in_elems = bucket;
    out.widened_out_elems = bucket / n;
  }
  return out;
}

size_t max_replicated_shard_elems(const std::vector<UnitGroup>& groups, int ranks) {
  // Per rank, the overlap of its shard [r s, (r + 1) s) of each unit with each replicated tensor:
  // a tensor touches only the ranks its range spans.
  std::vector<size_t> per_rank(static_cast<size_t>(ranks), 0);
  for (const UnitGroup& g : groups) {
    const size_t s = g.part.shard_numel;
    if (s == 0) continue;
    for (const TensorSpec& t : g.spec->tensors) {
      if (!t.replicated || t.numel == 0) continue;
      const size_t end = t.offset + t.numel;
      for (size_t r = t.offset / s; r <= (end - 1) / s && r < per_rank.size(); ++r)
        per_rank[r] += g.count * (std::min(end, (r + 1) * s) - std::max(t.offset, r * s));
    }
  }
  size_t most = 0;
  for (size_t n : per_rank) most = std::max(most, n);
  return most;
}

}  // namespace tierzero::zero
