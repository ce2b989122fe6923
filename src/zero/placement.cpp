// Placement rules and model-state byte arithmetic of the partition store (see placement.hpp).
#include "tierzero/zero/placement.hpp"

#include <algorithm>
#include <cmath>

#include "tierzero/core/error.hpp"
#include "tierzero/device/device_allocator.hpp"
#include "tierzero/offload/host_pool.hpp"
#include "tierzero/offload/nvme_engine.hpp"
#include "tierzero/zero/unit_groups.hpp"

namespace tierzero::zero {

size_t StateBytes::tier_total(Tier t) const {
  size_t total = 0;
  for (size_t c = 0; c < kNumCategories; ++c) total += bytes[static_cast<size_t>(t)][c];
  return total;
}

size_t offloaded_unit_count(size_t units, double ratio) {
  TZ_CHECK(ratio >= 0.0 && ratio <= 1.0,
           "offload ratio " + std::to_string(ratio) + " is outside [0, 1]",
           "ratio is the fraction of units offloaded: 1 offloads all, 0.5 the first half");
  return static_cast<size_t>(std::llround(ratio * static_cast<double>(units)));
}

void check_placement(int stage, const PlacementConfig& config) {
  TZ_CHECK(stage >= 0 && stage <= 3, "ZeRO stage " + std::to_string(stage) + " does not exist",
           "zero_optimization.stage is 0, 1, 2 or 3");
  if (config.param.tier != Tier::device)
    TZ_CHECK(stage == 3,
             std::string("zero_optimization.offload_param.device = ") +
                 (config.param.tier == Tier::host ? "cpu" : "nvme") + " needs stage 3 (stage is " +
                 std::to_string(stage) + ")",
             "below stage 3 every rank keeps the full parameters on the device; set "
             "zero_optimization.stage to 3 or offload_param.device to none");
  if (config.optimizer.tier != Tier::device)
    TZ_CHECK(stage >= 1, "zero_optimization.offload_optimizer needs stage 1, 2 or 3 (stage is 0)",
             "set zero_optimization.stage to 1 or more, or offload_optimizer.device to none");
  if (config.nvme_grads == Tier::nvme) {
    TZ_CHECK(config.optimizer.tier == Tier::nvme,
             "gradients on NVMe need the optimizer on NVMe (offload_optimizer.device is " +
                 std::string(config.optimizer.tier == Tier::host ? "cpu" : "none") + ")",
             "set zero_optimization.offload_optimizer.device to nvme, or keep the gradients on "
             "the host");
    TZ_CHECK(stage >= 2,
             "gradients on NVMe need ZeRO stage 2 or 3 (stage is " + std::to_string(stage) + ")",
             "below stage 2 every rank holds the full gradient on the device; set "
             "zero_optimization.stage to 2 or 3");
  }
}

UnitPlacement unit_placement(size_t unit, size_t param_off, size_t optim_off,
                             const PlacementConfig& config) {
  UnitPlacement p;
  p.param = unit < param_off ? config.param.tier : Tier::device;
  p.optimizer = unit < optim_off ? config.optimizer.tier : Tier::device;
  // The CPU updates offloaded optimizer states, so it needs the gradient in host memory.
  p.grad = p.optimizer == Tier::device ? Tier::device : Tier::host;
  if (p.optimizer == Tier::nvme && config.nvme_grads == Tier::nvme) p.grad = Tier::nvme;
  // Below stage 3 the parameters are the device's full copy; the master shard is its slice
  // only while the optimizer is on the device too.
  p.master_is_param = p.param == p.optimizer && config.working == DType::f32;
  return p;
}

std::vector<UnitPlacement> place_units(const PartitionPlan& plan, int stage,
                                       const PlacementConfig& config) {
  check_placement(stage, config);
  const size_t units = plan.num_units();
  const size_t param_off = offloaded_unit_count(units, config.param.ratio);
  const size_t optim_off = offloaded_unit_count(units, config.optimizer.ratio);
  std::vector<UnitPlacement> out(units);
  for (size_t u = 0; u < units; ++u) out[u] = unit_placement(u, param_off, optim_off, config);
  return out;
}

size_t unit_state_elems(const PartitionPlan& plan, int stage,
                        const std::vector<UnitPlacement>& placement, size_t unit,
                        StateBuffer buffer, Tier tier) {
  return unit_state_elems(plan.partition(unit), placement.at(unit), stage, buffer, tier);
}

size_t unit_state_elems(const UnitPartition& part, const UnitPlacement& p, int stage,
                        StateBuffer buffer, Tier tier) {
  const size_t shard = part.shard_numel;
  switch (buffer) {
    case StateBuffer::params_full:
      return stage <= 2 && tier == Tier::device ? part.padded_numel : 0;
    case StateBuffer::grads_full:
      return stage <= 1 && tier == Tier::device ? part.padded_numel : 0;
    case StateBuffer::param_shard:
      return stage == 3 && tier == p.param ? shard : 0;
    case StateBuffer::grad_shard:
      // Stages 2-3 always hold the shard accumulator; stages 0-1 only a host copy of the slice
      // when the CPU runs the update (on the device the slice of grads_full serves).
      if (tier != p.grad) return 0;
      return stage >= 2 || p.grad != Tier::device ? shard : 0;
    case StateBuffer::master:
      return !p.master_is_param && tier == p.optimizer ? shard : 0;
    case StateBuffer::adam_m:
    case StateBuffer::adam_v:
      return tier == p.optimizer ? shard : 0;
  }
  return 0;
}

const char* state_buffer_name(StateBuffer b) {
  switch (b) {
    case StateBuffer::params_full:
      return "params (full)";
    case StateBuffer::grads_full:
      return "grads (full)";
    case StateBuffer::param_shard:
      return "param shards";
    case StateBuffer::grad_shard:
      return "grad shards";
    case StateBuffer::master:
      return "master shards";
    case StateBuffer::adam_m:
      return "adam m shards";
    case StateBuffer::adam_v:
      return "adam v shards";
  }
  return "?";
}

Category state_buffer_category(StateBuffer b) {
  switch (b) {
    case StateBuffer::params_full:
    case StateBuffer::param_shard:
      return Category::param;
    case StateBuffer::grads_full:
    case StateBuffer::grad_shard:
      return Category::grad;
    case StateBuffer::master:
    case StateBuffer::adam_m:
    case StateBuffer::adam_v:
      return Category::optimizer;
  }
  return Category::workspace;
}

size_t state_elem_bytes(StateBuffer b, DType working) {
  return b == StateBuffer::params_full || b == StateBuffer::param_shard ? dtype_size(working)
                                                                        : sizeof(float);
}

size_t arena_bytes(Tier tier, size_t bytes) {
  if (bytes == 0) return 0;
  TZ_CHECK(tier != Tier::nvme, "arena_bytes: nvme arenas are counted per unit",
           "use nvme_unit_bytes");
  return tier == Tier::device ? DeviceAllocator::round_size(bytes)
                              : offload::HostPool::round_size(bytes);
}

size_t nvme_unit_bytes(size_t unit_elems, size_t chunk_elems, size_t elem_bytes) {
  TZ_CHECK(chunk_elems > 0, "nvme_unit_bytes: chunk of 0 elements", "");
  // Every chunk's bytes rounded up to the I/O alignment (at least one block): the whole chunks
  // alike, then the tail; closed form, as a unit of 1e12 elements has a million chunks.
  const auto aligned = [elem_bytes](size_t elems) {
    size_t bytes = 0;
    TZ_CHECK(!__builtin_mul_overflow(elems, elem_bytes, &bytes),
             "an NVMe chunk of " + std::to_string(elems) + " elements is beyond 64-bit sizes",
             "the model is too large to represent");
    return std::max(offload::kIoAlignment, (bytes + offload::kIoAlignment - 1) /
                                               offload::kIoAlignment * offload::kIoAlignment);
  };
  const size_t whole = unit_elems / chunk_elems, tail = unit_elems % chunk_elems;
  size_t total = 0;
  if (whole > 0)
    TZ_CHECK(!__builtin_mul_overflow(whole, aligned(chunk_elems), &total),
             "a unit of " + std::to_string(unit_elems) + " elements is beyond 64-bit sizes on NVMe",
             "the model is too large to represent");
  if (tail > 0)
    TZ_CHECK(!__builtin_add_overflow(total, aligned(tail), &total),
             "a unit of " + std::to_string(unit_elems) + " elements is beyond 64-bit sizes on NVMe",
             "the model is too large to represent");
  return total;
}

OptimizerSwapShape optimizer_swap_shape(const PartitionPlan& plan,
                                        const std::vector<UnitPlacement>& placement,
                                        size_t chunk_elems, size_t buffer_count) {
  return optimizer_swap_shape(plan_groups(plan, placement), chunk_elems, buffer_count);
}

size_t optimizer_swap_host_bytes(const OptimizerSwapShape& shape) {
  if (shape.slots == 0) return 0;
  return shape.slots * shape.buffers *
         offload::HostPool::round_size(shape.largest_chunk * sizeof(float));
}

StateBytes model_state_bytes(const PartitionPlan& plan, int stage,
                             const std::vector<UnitPlacement>& placement,
                             const PlacementConfig& config) {
  return model_state_bytes(plan_groups(plan, placement), stage, config);
}

}  // namespace tierzero::zero
