// The partition store's settings and what it reports: the stage and its budgets, placement and
// offload resources, the gradient buckets, AdamW's constants, the groups it works over besides
// its partition group, and the per-step statistics and fetch counters. Plain data, so that the
// trainer can fill it from a DeepSpeed-style config and the estimator can read the same rules.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "tierzero/core/dtype.hpp"
#include "tierzero/offload/nvme_engine.hpp"
#include "tierzero/zero/partition.hpp"
#include "tierzero/zero/placement.hpp"

namespace tierzero::comm {
class Communicator;
}

namespace tierzero::zero {

// AdamW's constants (the learning rate comes with each step).
struct AdamWConfig {
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.1;  // applied to tensors marked decay (matrices), not biases or norms
};

// When the optimizer runs relative to the backward (tierzero.optimizer_overlap).
enum class OptimizerOverlap {
  off,          // after the backward, every unit in the step (the reference order)
  plain,        // a unit whose states live on the host or NVMe is updated as soon as its gradient
                // shard is final, during the backward, on steps where that cannot change the result
                // (no gradient clipping, no loss scaling); on other steps only its share of the
                // gradient norm is taken then, and the update runs after the backward
  speculative,  // as plain, and on steps with clipping or loss scaling too: each unit is updated
                // during the backward as if the clip coefficient were 1 and nothing overflowed,
                // after a backup of its states; the step keeps the updates when that holds, else
                // restores the backups and redoes them (or skips, on an fp16 overflow)
};

struct StoreConfig {
  int stage = 3;  // 0, 1, 2 or 3 (zero_optimization.stage)
  // Units with fewer elements than this stay gathered at stage 3 once gathered (DeepSpeed's
  // stage3_param_persistence_threshold): re-gathering tiny units costs latency for no memory.
  size_t param_persistence_threshold = 100000;
  // Stage 3 prefetch: elements gathered ahead of use (stage3_prefetch_bucket_size), elements of
  // gathered units alive at once (stage3_max_live_parameters; units in use are always gathered),
  // and how close (in elements of the trace) a unit's next use must be for it to stay gathered
  // after release (stage3_max_reuse_distance).
  size_t prefetch_bucket_elems = 50000000;
  size_t max_live_elems = 1000000000;
  size_t max_reuse_distance = 1000000000;
  size_t shard_align_elems = kShardAlignElems;
  // Gradient buckets (reduce_bucket_size): the gradients of units finished one after another are
  // reduced together, one collective per bucket, once the bucket holds this many elements (a unit
  // larger than a bucket is a bucket of its own). Small buckets overlap the reduction with the
  // rest of the backward and hold fewer full gradients; large ones issue fewer collectives.
  size_t reduce_bucket_elems = 500000000;
  // overlap_comm: a bucket goes out as soon as it holds as many elements as the largest unit
  // (never more than reduce_bucket_elems), so reductions overlap the rest of the backward while
  // small units are still fused; off, buckets fill to reduce_bucket_elems.
  bool overlap_comm = true;
  // Stages 1-2 (allgather_bucket_size): after the step each rank's updated slice of the
  // parameters is all-gathered in place, unit by unit; at most this many elements are in flight
  // at once (a larger unit goes alone). Small values bound what the transport queues; large ones
  // issue every gather at once.
  size_t allgather_bucket_elems = 500000000;
  // The reductions' payload (communication_data_type): f32, or bf16 / f16 to halve the bytes on
  // the wire. A bucket is rounded to it (nearest even) just before its collective, which sums in
  // fp32 and rounds the mean once; the mean is widened back to fp32 and accumulated in fp32.
  // Under gradient accumulation at stages 0-1 the running mean is rounded at each reduction.
  DType reduce_dtype = DType::f32;
  // Buckets being reduced at once (at least 1) before the next one waits for the oldest.
  size_t max_pending_reductions = 2;
  PlacementConfig placement;
  // Offload resources, used when a placement needs them: the pinned host pool's budget (bytes),
  // the NVMe engine (directories, block size, queue depth), and how many host staging buffers
  // NVMe parameter reads may fill ahead (offload_param.buffer_count).
  size_t host_budget_bytes = size_t{8} << 30;
  offload::NvmeOptions nvme;
  size_t nvme_read_buffers = 5;
  // Slots of the NVMe optimizer pipeline (offload_optimizer.buffer_count, at least 2): each holds
  // one chunk's fp32 master, Adam m and v. The slots stay allocated; after a step they are filled
  // with the next step's first chunks, which load while the next forward and backward run.
  size_t optimizer_swap_buffers = 4;
  // Whether the CPU optimizer overlaps the backward (PartitionStore::plan_step).
  OptimizerOverlap optimizer_overlap = OptimizerOverlap::plain;
  // The type the parameters are handed out in: fp32 (acquire_params; 16-bit working parameters
  // are widened into an fp32 copy while a unit is in use), or the working type itself when it is
  // 16-bit (acquire_params16, 16-bit compute: the working copy as gathered, never widened, so a
  // unit in use costs 2 bytes per element instead of 2 + 4).
  DType compute = DType::f32;
};

// The groups a store works with besides its partition group (all optional; null: none). Every
// rank of a group must build its store with the same group roles.
struct StoreGroups {
  // Ranks holding other parts of the model (tensor- and pipeline-parallel peers): the gradient
  // norm is summed over each of them too, so that clipping sees the whole model.
  std::vector<comm::Communicator*> model_parallel;
  // The group over which tensors marked TensorSpec::replicated are identical (tensor-parallel):
  // they count in the norm on its rank 0 only.
  comm::Communicator* replica = nullptr;
  // The group sharing the units marked UnitSpec::tied (first and last pipeline stage): their
  // gradient shards are summed over it before the step; they count in the norm on its rank 0.
  comm::Communicator* tie = nullptr;
};

struct StoreStepStats {
  double grad_norm = 0.0;  // global L2 norm of the averaged gradient (unscaled), before clipping
  double clip_scale = 1.0;
  bool skipped = false;  // loss scaling: the gradient overflowed, nothing was updated
};

// What stage 3's fetching did since the last begin_pass(train) (per training step), so a prefetch
// that never runs shows at once.
struct FetchCounters {
  size_t acquires = 0;           // acquire_params calls
  size_t prefetch_hits = 0;      // the unit was already gathered or being gathered by prefetch
  size_t resident_hits = 0;      // still gathered from earlier use (persistent or retained)
  size_t on_demand_fetches = 0;  // nothing was under way: fetched at the call
  size_t out_of_order = 0;       // acquires that did not follow the trace
  size_t nvme_reads = 0;         // parameter shards read from NVMe
  size_t handoffs = 0;           // shards taken from the NVMe optimizer's update instead (no read)
  size_t gathers = 0;            // all-gathers issued
  size_t reductions = 0;         // gradient reductions issued (one per bucket)
  // Gradient reductions finished this step: seconds each was in flight (issued to completed),
  // summed, and the part of that the training thread spent waiting for them (exposed); the rest
  // was hidden under the backward. Without overlap_comm every reduction is waited for as soon as
  // it is issued, so exposed = in flight.
  double reduction_s = 0.0;
  double reduction_exposed_s = 0.0;
  double stall_s = 0.0;  // time acquire_params waited for reads and gathers
  // The optimizer step (set by step()): seconds of update work on the CPU worker during the
  // backward (optimizer_overlap), the part of it that ran before step() was called (hidden under
  // the backward), the seconds step() spent on the update (waiting for the worker, or updating
  // itself), and the units the worker updated.
  double optimizer_worker_s = 0.0;
  double optimizer_overlapped_s = 0.0;
  double optimizer_exposed_s = 0.0;
  size_t optimizer_overlapped_units = 0;
  // optimizer_overlap speculative: units updated during the backward whose update the step
  // undid (clipping bound, or fp16 overflowed) and redid (or skipped), and units not updated
  // early because their backup found no room in the host pool (updated at the step instead).
  size_t optimizer_redone_units = 0;
  size_t optimizer_unbacked_units = 0;
};

enum class PassKind { train, eval };

// The bytes the gradient reducer holds at most beyond the model state, per rank: full gradients
// being accumulated or waiting in the open bucket, packed buckets and their reduced shards in
// flight (device, comm), and the pinned staging of reduced shards bound for a host accumulator
// (host, io). One rule for the reducer, which allocates them, and the estimator. Not covered: the
// deferred (no-sync) mode, which keeps every unit's full gradient on the device at stages 2-3
// until it is reduced (the caller that turns it on pays 4 bytes per padded element).
struct ReductionBuffers {
  size_t device_comm = 0;
  size_t host_io = 0;
  // With a 16-bit reduce_dtype, the fp32 elements of the largest bucket and of its result (its
  // shard at stages 2-3): what MPI on host memory widens them into (the comm layer's staging).
  size_t widened_in_elems = 0;
  size_t widened_out_elems = 0;
};
// A 16-bit reduce_dtype (communication_data_type) adds, at stages 0-1, the buckets' 16-bit copies.
ReductionBuffers reduction_buffer_bound(const PartitionPlan& plan, int stage,
                                        const std::vector<UnitPlacement>& placement,
                                        size_t reduce_bucket_elems, bool overlap_comm,
                                        DType reduce_dtype = DType::f32);
// The elements at which the reducer sends a bucket: reduce_bucket_elems, or with overlap_comm at
// most the largest unit's padded elements (at least 1).
size_t bucket_capacity(const PartitionPlan& plan, size_t reduce_bucket_elems, bool overlap_comm);

// Elements of the plan's rank's gradient shards that belong to replicated tensors
// (TensorSpec::replicated): what the store broadcasts over the replica group before each step,
// packed into one device comm buffer of this many fp32 (allocated after the reductions finish).
size_t replicated_shard_elems(const PartitionPlan& plan);
// The most of them any rank of the plan's partition group holds (the estimator's bound).
size_t max_replicated_shard_elems(const PartitionPlan& plan);

}  // namespace tierzero::zero
