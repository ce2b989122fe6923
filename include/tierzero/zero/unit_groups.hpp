// Units grouped by identity: a model's units are mostly alike (every transformer block has the
// same tensors), and the byte arithmetic of placement.hpp and store_config.hpp is sums, counts and
// maxima over units, so it can run once per group of identical units and multiply. This keeps the
// estimator and the planner independent of the number of layers (a plan over 10^5 layers asks for
// thousands of estimates). The per-plan functions delegate here (groups of one unit each), so the
// store and the estimator still share one rule.
#pragma once

#include <cstddef>
#include <vector>

#include "tierzero/zero/partition.hpp"
#include "tierzero/zero/placement.hpp"
#include "tierzero/zero/store_config.hpp"

namespace tierzero::zero {

// A run of consecutive units with the same extent and tensors (names may differ).
struct UnitRun {
  const UnitSpec* spec = nullptr;  // the run's first unit
  size_t first = 0;                // its index
  size_t count = 0;
};

// The runs of `units` (which must outlive them), each run's first unit validated (validate_unit:
// identical units are equally valid, so the first invalid unit is still the one named).
std::vector<UnitRun> identical_runs(const std::vector<UnitSpec>& units);

// Units that share a partition and a placement.
struct UnitGroup {
  const UnitSpec* spec = nullptr;
  UnitPartition part;
  UnitPlacement placement;
  size_t count = 0;
};

// The groups of a model of `units` units (runs, in order) partitioned over `ranks` and placed as
// place_units places them: runs are cut where the offloaded prefix ends. Throws as place_units.
std::vector<UnitGroup> group_units(const std::vector<UnitRun>& runs, size_t units, int ranks,
                                   int stage, const PlacementConfig& config,
                                   size_t align_elems = kShardAlignElems);
// One group per unit of a plan.
std::vector<UnitGroup> plan_groups(const PartitionPlan& plan,
                                   const std::vector<UnitPlacement>& placement);

StateBytes model_state_bytes(const std::vector<UnitGroup>& groups, int stage,
                             const PlacementConfig& config);
OptimizerSwapShape optimizer_swap_shape(const std::vector<UnitGroup>& groups, size_t chunk_elems,
                                        size_t buffer_count);
ReductionBuffers reduction_buffer_bound(const std::vector<UnitGroup>& groups, int ranks, int stage,
                                        size_t reduce_bucket_elems, bool overlap_comm,
                                        DType reduce_dtype = DType::f32);
size_t max_replicated_shard_elems(const std::vector<UnitGroup>& groups, int ranks);

}  // namespace tierzero::zero
