// PartitionStore: owns a model's parameters, gradients and AdamW states for one data-parallel
// rank and partitions them across the group with ZeRO's stages (DeepSpeed's meaning):
//   stage 0  everything replicated; gradients all-reduced (mean) per unit after backward;
//   stage 1  + AdamW states (and the fp32 master copy) sharded: each rank updates its shard of
//            every unit, then the updated parameters are all-gathered;
//   stage 2  + gradients sharded: each unit's full gradient lives only between acquire_grads and
//            grads_done, which reduce-scatters it (mean) into an fp32 shard accumulator;
//   stage 3  + parameters sharded: acquire_params all-gathers a unit into a working buffer,
//            release_params frees it (units below the persistence threshold stay gathered).
// Its unit-at-a-time calls mirror nn::ParamProvider so that a thin adapter in the layer above
// (train, tests) lets the GPT run on it unchanged; the store itself knows nothing of GPT.
//
// This slice keeps every state on the device tier and computes in fp32, so the fp32 master copy
// of a rank's shard is the rank's slice of the working parameters (stages 1-2) or its parameter
// shard (stage 3); a separate master buffer arrives with bf16 working parameters. Every byte is
// allocated from the DeviceAllocator with its category (param, grad, optimizer; comm for
// reduce-scatter scratch), so the MemoryTracker shows each rank's model-state bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <vector>

#include "tierzero/comm/communicator.hpp"
#include "tierzero/core/train_config.hpp"
#include "tierzero/device/device_allocator.hpp"
#include "tierzero/zero/partition.hpp"

namespace tierzero::zero {

struct StoreConfig {
  int stage = 3;  // 0, 1, 2 or 3 (zero_optimization.stage)
  // Units with fewer elements than this stay gathered at stage 3 once gathered (DeepSpeed's
  // stage3_param_persistence_threshold): re-gathering tiny units costs latency for no memory.
  size_t param_persistence_threshold = 100000;
  size_t shard_align_elems = kShardAlignElems;
  // Gradient reductions in flight (at least 1) before grads_done waits for the oldest: overlap
  // with the next unit's backward without letting temporary full gradients pile up.
  size_t max_pending_reductions = 2;
};

struct StoreStepStats {
  double grad_norm = 0.0;  // global L2 norm of the averaged gradient, before clipping
  double clip_scale = 1.0;
};

// Not thread-safe: one thread (the training loop) makes every call, which also keeps the group's
// collectives in the same order on every rank.
class PartitionStore {
 public:
  // Collective over `group` (the data-parallel partition group): every rank passes the same
  // units and configs. `allocator` and `group` must outlive the store. Parameters start at zero;
  // fill them with load_unit.
  PartitionStore(std::vector<UnitSpec> units, const StoreConfig& config,
                 const OptimizerConfig& optimizer, comm::Communicator& group,
                 DeviceAllocator& allocator);
  ~PartitionStore();
  PartitionStore(const PartitionStore&) = delete;
  PartitionStore& operator=(const PartitionStore&) = delete;

  // Full parameters of `unit` on the device, valid until the matching release_params. Calls
  // nest. At stage 3 the first acquire all-gathers (collective: every rank must acquire units in
  // the same order).
  const float* acquire_params(size_t unit);  // (units[unit].numel)
  void release_params(size_t unit);
  // Where backward accumulates (+=) the unit's full local gradient, valid until grads_done(unit);
  // acquiring again before grads_done returns the same buffer.
  float* acquire_grads(size_t unit);  // (units[unit].numel)
  // The unit's local gradient is complete: starts its mean over the group (all-reduce at stages
  // 0-1, reduce-scatter into the shard accumulator at stages 2-3). Collective, same order on
  // every rank. Gradients accumulate across micro-batches until zero_grads().
  void grads_done(size_t unit);
  void zero_grads();

  // Clips by the global gradient norm (PyTorch's rule: scale clip / (norm + 1e-6) when below 1;
  // clip <= 0 disables), runs AdamW on this rank's shard (decay per tensor), and makes the
  // updated parameters visible to every rank. Collective. Throws Error, updating nothing, when
  // the norm is not finite. Gradients are left as they are.
  StoreStepStats step(double lr, double clip);

  // Sets / reads the full values of a unit (host arrays of units[unit].numel). load_unit is not
  // collective (every rank passes the same values and keeps what it owns); read_unit is
  // collective at stage 3 (it gathers).
  void load_unit(size_t unit, const float* host_values);
  void read_unit(size_t unit, float* host_values);

  int stage() const { return config_.stage; }
  const PartitionPlan& plan() const { return plan_; }
  int64_t steps_taken() const { return t_; }
  // Whether `unit` stays gathered at stage 3 (below the persistence threshold).
  bool persistent(size_t unit) const;

 private:
  struct UnitState {
    size_t param_refs = 0;    // acquire_params nesting count
    bool grads_open = false;  // between acquire_grads and grads_done
    bool gathered_fresh = false;
    DeviceBuffer gathered;   // (padded_numel) fp32, stage 3: the unit's working parameters
    DeviceBuffer full_grad;  // (padded_numel) fp32, stages 2-3: the local full gradient
  };
  // A gradient reduction in flight. Declared buffers first: the request (destroyed first) waits
  // for the operation before the buffers it uses are freed.
  struct PendingReduction {
    size_t unit = 0;
    DeviceBuffer full_grad;   // (padded_numel) fp32, stages 2-3: reduce-scatter input
    DeviceBuffer shard_mean;  // (shard_numel) fp32, stages 2-3: reduce-scatter output
    comm::CommRequest request;
  };

  void check_unit(const char* op, size_t unit) const;
  void finish_oldest_reduction();
  void finish_reductions_through(size_t unit);  // until no reduction of `unit` is pending
  void finish_all_reductions();
  void gather_unit(size_t unit, float* full);  // full (padded_numel), stage 3
  float* param_shard_ptr(size_t unit);         // (shard_numel) of `unit`
  float* grad_shard_ptr(size_t unit);          // (shard_numel) of `unit`
  double global_sum_squares(double local);

  StoreConfig config_;
  OptimizerConfig optimizer_;
  comm::Communicator& group_;
  DeviceAllocator& allocator_;
  Device& device_;
  // Stage 0 replicates the optimizer too: its plan is a group of one, so the "shard" of every
  // unit is the whole unit and the same code path runs the update.
  PartitionPlan plan_;
  std::vector<UnitState> units_;
  std::deque<PendingReduction> pending_;
  int64_t t_ = 0;

  DeviceBuffer params_full_;  // (plan.full_numel) fp32, stages 0-2: all units, gathered layout
  DeviceBuffer grads_full_;   // (plan.full_numel) fp32, stages 0-1: averaged full gradients
  DeviceBuffer param_shard_;  // (plan.shard_numel) fp32, stage 3: this rank's parameter shards
  DeviceBuffer grad_shard_;   // (plan.shard_numel) fp32, stages 2-3: averaged gradient shards
  DeviceBuffer adam_m_;       // (plan.shard_numel) fp32: first moment of this rank's shards
  DeviceBuffer adam_v_;       // (plan.shard_numel) fp32: second moment
};

}  // namespace tierzero::zero
