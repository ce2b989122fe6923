// Placement of the partition store's state: which tier (device, host, nvme) holds each unit's
// parameter shard, gradient shard and optimizer states, and exactly how many bytes each tier holds
// for the model state of one rank. Pure arithmetic shared by the store (which allocates from it)
// and the estimator in the profile layer (which predicts from it), so that predicted and measured
// model-state bytes agree by construction and a test can hold the store to it.
//
// Rules (DeepSpeed's meaning of the offload options):
//  - offload_param moves parameter shards off the device; it needs stage 3 (below it every rank
//    holds the full parameters on the device for compute).
//  - offload_optimizer moves the optimizer states (Adam m, v and the fp32 master copy) off the
//    device; it needs stage >= 1. Gradient shards follow the optimizer to the host (the CPU runs
//    the update), also when the optimizer states are on NVMe.
//  - `ratio` offloads the first round(ratio * units) units (in unit order) and keeps the rest on
//    the device, so a fraction of the model can be offloaded.
//  - With fp32 working parameters, a parameter shard on the same tier as its unit's optimizer
//    states *is* the master copy (one buffer); otherwise (another tier, or bf16/fp16 working
//    parameters) the master is a separate fp32 shard on the optimizer's tier and each step
//    publishes the updated values, rounded to the working type, to the parameter's tier.
//  - Working parameters (params_full, param_shard) take dtype_size(working) bytes per element;
//    every other state is fp32.
#pragma once

#include <array>
#include <cstddef>
#include <string>
#include <vector>

#include "tierzero/core/dtype.hpp"
#include "tierzero/core/memory_tracker.hpp"
#include "tierzero/zero/partition.hpp"

namespace tierzero::zero {

struct OffloadTarget {
  Tier tier = Tier::device;
  double ratio = 1.0;  // fraction of units (first ones in unit order) that go to `tier`
};

struct PlacementConfig {
  OffloadTarget param;      // offload_param
  OffloadTarget optimizer;  // offload_optimizer
  // Elements per NVMe chunk of the optimizer step pipeline (offload_optimizer.buffer_size);
  // every NVMe-resident shard is cut into chunks of at most this many elements.
  size_t nvme_chunk_elems = size_t{1} << 20;
  DType working = DType::f32;  // the working parameters' type (bf16.enabled / fp16.enabled)
  // Where the fp32 gradient shards of units whose optimizer is on NVMe live: host (the CPU
  // update reads them there) or nvme too (stages 2-3), so that no state of the model needs host
  // memory in proportion to its size; the update then streams them in with m and v.
  Tier nvme_grads = Tier::host;
};

// Where one unit's states live on one rank.
struct UnitPlacement {
  Tier param = Tier::device;      // stage 3: the parameter shard; below: the full parameters
  Tier grad = Tier::device;       // the fp32 gradient shard accumulator (stages 2-3), or the
                                  // host copy of this rank's gradient slice (stages 0-1); nvme
                                  // only at stages 2-3 with the optimizer on nvme
  Tier optimizer = Tier::device;  // Adam m, v and (when separate) the fp32 master shard
  bool master_is_param = true;    // the parameter shard is the master copy (no separate buffer)
};

// Throws Error naming the option when the combination is not possible (offload_param below
// stage 3, offload_optimizer at stage 0, a ratio outside [0, 1]).
std::vector<UnitPlacement> place_units(const PartitionPlan& plan, int stage,
                                       const PlacementConfig& config);

// place_units' checks, and its rule for unit `unit` given the offloaded prefixes (param_off,
// optim_off: offloaded_unit_count of each target).
void check_placement(int stage, const PlacementConfig& config);
UnitPlacement unit_placement(size_t unit, size_t param_off, size_t optim_off,
                             const PlacementConfig& config);

// How many of a plan's units place_units offloads for a ratio: round(ratio * units).
size_t offloaded_unit_count(size_t units, double ratio);

// Bytes of model state one rank holds for its whole life, per tier and category, as the store
// allocates them (rounded as the allocators round: the device allocator's and the host pool's size
// classes, the swap space's 4 KiB-padded extents). Transient buffers (gathered units, reduce-
// scatter buckets, staging) are not included: see the store's live-gather budget.
struct StateBytes {
  std::array<std::array<size_t, kNumCategories>, kNumTiers> bytes{};  // [tier][category]
  size_t at(Tier t, Category c) const {
    return bytes[static_cast<size_t>(t)][static_cast<size_t>(c)];
  }
  size_t tier_total(Tier t) const;
};

// The persistent buffers the store makes: one arena per (tier, buffer kind) holding that kind for
// every unit placed on the tier, units back to back in unit order (NVMe: one extent per chunk).
enum class StateBuffer : uint8_t {
  params_full,  // stages 0-2: all units' full parameters (device)       category param
  grads_full,   // stages 0-1: all units' full averaged gradients (device) category grad
  param_shard,  // stage 3: parameter shards                             category param
  grad_shard,   // stages 2-3 (and 0-1 with the optimizer offloaded)     category grad
  master,       // separate fp32 master shards                            category optimizer
  adam_m,       //                                                        category optimizer
  adam_v,       //                                                        category optimizer
};
constexpr size_t kNumStateBuffers = 7;
const char* state_buffer_name(StateBuffer b);
Category state_buffer_category(StateBuffer b);

// Elements of `buffer` that `unit` has on `tier` (0 when it lives elsewhere or does not exist).
size_t unit_state_elems(const PartitionPlan& plan, int stage,
                        const std::vector<UnitPlacement>& placement, size_t unit,
                        StateBuffer buffer, Tier tier);
size_t unit_state_elems(const UnitPartition& part, const UnitPlacement& placement, int stage,
                        StateBuffer buffer, Tier tier);

// Bytes per element of a state buffer: the working type's for the working parameters, else 4.
size_t state_elem_bytes(StateBuffer b, DType working);

// Bytes the allocators count for one arena of `bytes`: the device allocator's or the host pool's
// size class of one block (0: no arena, 0 bytes). For nvme the store writes each unit's part as
// chunks of at most chunk_elems elements, each extent padded to 4 KiB: nvme_unit_bytes gives one
// unit's part.
size_t arena_bytes(Tier tier, size_t bytes);  // device or host
size_t nvme_unit_bytes(size_t unit_elems, size_t chunk_elems, size_t elem_bytes = 4);

StateBytes model_state_bytes(const PartitionPlan& plan, int stage,
                             const std::vector<UnitPlacement>& placement,
                             const PlacementConfig& config);

// The NVMe optimizer pipeline: every unit whose optimizer states live on NVMe is cut into chunks
// of at most chunk_elems elements of its shard, and `slots` pinned slots (buffer_count, at least
// 2, never more than there are chunks) each hold one chunk's fp32 master, m and v. What the store
// allocates and the estimator predicts.
struct OptimizerSwapShape {
  size_t chunks = 0;         // over all NVMe-resident units
  size_t largest_chunk = 0;  // elements
  size_t slots = 0;          // 0 when no optimizer state is on NVMe
  size_t buffers = 3;        // per slot: master, m, v, and the gradient when it is on NVMe
};
OptimizerSwapShape optimizer_swap_shape(const PartitionPlan& plan,
                                        const std::vector<UnitPlacement>& placement,
                                        size_t chunk_elems, size_t buffer_count);
// Pinned host bytes of the slots (the host pool's size classes).
size_t optimizer_swap_host_bytes(const OptimizerSwapShape& shape);

}  // namespace tierzero::zero
