// The memory estimator: bytes per tier and category that one rank holds for a training run,
// predicted before running. Model state comes from zero::model_state_bytes (the very arithmetic
// the partition store allocates from), so those bytes are exact; transient buffers (activations,
// gathered units, gradients in reduction, NVMe staging) are upper bounds of what a step holds at
// once. The profile layer knows nothing of GPT: the model arrives as zero::UnitSpec lists and an
// activation byte count computed by the caller. Formulas: docs/estimator.md.
#pragma once

#include <algorithm>
#include <cstddef>
#include <string>
#include <vector>

#include "tierzero/core/memory_tracker.hpp"
#include "tierzero/zero/partition.hpp"
#include "tierzero/zero/placement.hpp"
#include "tierzero/zero/unit_groups.hpp"

namespace tierzero::profile {

// The process mesh (DESIGN.md): ranks = dp * tp * pp * sp. Sequence-parallel ranks hold identical
// weights, so ZeRO partitions over dp * sp.
struct WorldLayout {
  int dp = 1;
  int tp = 1;
  int pp = 1;
  int sp = 1;
  int ranks() const { return dp * tp * pp * sp; }
  int partition_group() const { return dp * sp; }
};

// Activation checkpoints placed on a tier (tierzero.activation_checkpoints; zero::CheckpointTier).
// On the device (the default) they are part of EstimateInput::activation_bytes; on the host or
// NVMe activation_bytes leaves them out (the micro-batches' form without them) and they are
// counted here: the device slots they pass through, and their copies on their tier.
struct CheckpointPlacementInput {
  Tier tier = Tier::device;
  size_t bytes = 0;         // one checkpoint (its sequence shard under sequence parallelism)
  size_t stored = 0;        // checkpoints a rank stores at once (micro-batches in flight x blocks)
  size_t device_slots = 3;  // tierzero.activation_checkpoints.buffer_count
  // The most any rank stores (pipeline stages differ: the estimate's device is the rank with the
  // most device bytes, its host and NVMe bytes bound every rank's); 0: `stored`.
  size_t stored_most = 0;
  size_t tier_count() const { return std::max(stored, stored_most); }
};

// The bytes per tier the placement adds (Category::activation_checkpoint; NVMe staging in io),
// as zero::CheckpointTier allocates them.
void add_checkpoint_bytes(const CheckpointPlacementInput& c, zero::StateBytes& into);

struct EstimateInput {
  // The units one rank holds — its pipeline stage's, as its tensor-parallel rank holds them (its
  // pieces of every tensor) — in execution order.
  std::vector<zero::UnitSpec> units;
  WorldLayout world;
  int stage = 0;
  zero::PlacementConfig placement;
  size_t activation_bytes = 0;  // device bytes of activations per rank (caller's model formula)
  CheckpointPlacementInput checkpoints;  // where the block checkpoints live (default: device)
  size_t param_persistence_threshold = 100000;  // stage3_param_persistence_threshold (elements)
  size_t max_live_parameters = 1000000000;      // stage3_max_live_parameters (elements)
  size_t reduce_bucket_elems = 500000000;       // reduce_bucket_size (elements per bucket)
  bool overlap_comm = true;                     // buckets go out at the largest unit's size
  DType reduce_dtype = DType::f32;              // communication_data_type of the reductions
  // The dtype the model computes in (StoreConfig::compute): fp32, or the 16-bit working type,
  // in which a stage-3 unit is held for use as gathered instead of widened to fp32.
  DType compute = DType::f32;
  // The partition group is MPI on host memory (the CPU backend; CUDA's is NCCL on the device):
  // a 16-bit reduction is widened to fp32 in the comm layer's host staging.
  bool host_widening = false;
  size_t staging_buffer_count = 4;   // NVMe optimizer slots (offload_optimizer.buffer_count)
  size_t param_staging_buffers = 5;  // NVMe parameter shards staged (offload_param.buffer_count)
  size_t nvme_bounce_bytes = 0;      // the NVMe engine's pinned bounce buffers (aio queue_depth x
                                     // block_size, host-pool rounded)
};

// Per tier and category: [tier][category], the same shape the memory tracker reports.
using TierBytes = zero::StateBytes;

struct Estimate {
  TierBytes persistent;           // model state for the whole run (exact)
  TierBytes buffers;              // transient per-step buffers (upper bounds)
  size_t parameters = 0;          // real parameters this rank's stage holds (after tp, pp)
  size_t units = 0;               // units of this rank's pipeline stage
  size_t persistent_units = 0;    // stage 3: units kept gathered (below the threshold)
  size_t largest_unit_elems = 0;  // padded, of the worst stage
  size_t full_elems = 0;          // sum of padded unit lengths of the worst stage
  size_t shard_elems = 0;         // this rank's shard of the worst stage

  size_t at(Tier t, Category c) const { return persistent.at(t, c) + buffers.at(t, c); }
  size_t tier_total(Tier t) const { return persistent.tier_total(t) + buffers.tier_total(t); }
  size_t total() const;
};

// The units one rank holds: they come as the rank's already (nn's layout for its pipeline
// stage and tensor-parallel rank, the real local shapes and padding), so this only checks the
// world layout and that there are units.
std::vector<zero::UnitSpec> rank_units(const std::vector<zero::UnitSpec>& units,
                                       const WorldLayout& world);

// Throws Error (naming the option) for impossible combinations: offload_param below stage 3,
// offload_optimizer at stage 0, a layout with a part < 1, an empty model.
Estimate estimate(const EstimateInput& input);
// The same with the input's units already grouped (zero::identical_runs(input.units)), for
// callers that estimate one model many times.
Estimate estimate(const EstimateInput& input, const std::vector<zero::UnitRun>& runs);

// The offload options of the overview table, in its order.
enum class OffloadOption : uint8_t {
  none,
  optimizer_cpu,
  optimizer_nvme,
  param_optimizer_cpu,
  param_optimizer_nvme
};
constexpr size_t kNumOffloadOptions = 5;
const char* offload_option_name(OffloadOption o);  // "none", "optimizer cpu", ...
// Sets input.placement's tiers (ratio 1) for an option; nvme_chunk_elems is kept.
void apply_offload_option(OffloadOption o, zero::PlacementConfig& placement);

struct TableRow {
  int stage = 0;
  OffloadOption offload = OffloadOption::none;
  bool valid = false;
  std::string reason;  // why the row is n/a (the estimator's error message)
  Estimate estimate;
};

// Every stage 0-3 x every offload option, from `base` (whose stage and placement are replaced).
std::vector<TableRow> estimate_table(const EstimateInput& base);

}  // namespace tierzero::profile
