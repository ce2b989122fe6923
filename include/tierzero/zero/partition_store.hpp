// PartitionStore: owns a model's parameters, gradients and AdamW states for one data-parallel
// rank, partitions them across the group with ZeRO's stages (DeepSpeed's meaning) and places each
// unit's states on a tier (device, pinned host memory, NVMe):
//   stage 0  everything replicated; gradients all-reduced (mean) after backward;
//   stage 1  + AdamW states (and the fp32 master copy) sharded: each rank updates its shard of
//            every unit, then the updated parameters are all-gathered;
//   stage 2  + gradients sharded: each unit's full gradient lives only between acquire_grads and
//            its reduction, which reduce-scatters it (mean) into an fp32 shard accumulator;
//   stage 3  + parameters sharded: acquire_params gathers a unit into a working buffer (reading
//            it from host or NVMe first when it lives there), release_params frees it; units
//            below the persistence threshold stay gathered. The first training pass records the
//            order of units (the trace) and checks it is the same on every rank; later passes
//            prefetch along it within the prefetch and live-parameter budgets, and start NVMe
//            reads further ahead than the gathers.
// Placement (placement.hpp) follows offload_param / offload_optimizer: the optimizer step runs
// where each unit's states live — the device's kernel, the CPU kernel on host shards, or a
// read -> update -> write pipeline over chunks of NVMe-resident shards.
//
// The store is a thin facade over parts with one responsibility each (src/zero): ShardStorage
// (the arenas on every tier and the offload resources), the Fetcher (hand-out, gathers, trace,
// prefetch), the GradientReducer (accumulation, buckets, reductions, the deferred mode),
// GradientNorm (the norm over every group, tied units), InMemoryAdamW and NvmeAdamW (the
// optimizer engines) and BackgroundUpdate (the optimizer thread behind the next forward and its
// handshake with the training thread). See docs/architecture.md.
//
// Its unit-at-a-time calls mirror nn::ParamProvider so that a thin adapter in the layer above
// (train, tests) lets the GPT run on it unchanged; the store itself knows nothing of GPT. Every
// byte is allocated through the device allocator, the host pool or the swap space with its
// category, so the MemoryTracker shows each rank's model-state bytes per tier exactly as
// placement.hpp predicts them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tierzero/comm/communicator.hpp"
#include "tierzero/device/device_allocator.hpp"
#include "tierzero/device/device_timeline.hpp"
#include "tierzero/kernels/kernels.hpp"
#include "tierzero/zero/partition.hpp"
#include "tierzero/zero/placement.hpp"
#include "tierzero/zero/store_config.hpp"

namespace tierzero::offload {
class HostPool;
class SwapSpace;
}  // namespace tierzero::offload

namespace tierzero::zero {

class ShardStorage;
class BackgroundUpdate;
class Fetcher;
class GradientReducer;
class GradientNorm;
class InMemoryAdamW;
class NvmeAdamW;
class BackwardUpdate;
class SpeculativeBackup;

// Not thread-safe: one thread (the training loop) makes every call, which also keeps the group's
// collectives in the same order on every rank. At stage 3 the store may hold back gathers it has
// decided on until their shards are ready, issuing them in order at its later calls (and always
// before its own reductions and the step): a caller that issues collectives of its own on `group`
// during a training pass (between zero_grads/begin_pass and step) calls flush_collectives() first.
class PartitionStore {
 public:
  // Collective over `group` (the partition group: data-parallel, times sequence-parallel): every
  // rank passes the same units and configs. `allocator`, `group` and the groups in `groups` must
  // outlive the store. Parameters start at zero; fill them with load_unit. Throws Error when a
  // placement is not possible (see place_units) or a tier cannot hold its share.
  PartitionStore(std::vector<UnitSpec> units, const StoreConfig& config,
                 const AdamWConfig& optimizer, comm::Communicator& group,
                 DeviceAllocator& allocator, const StoreGroups& groups = {});
  ~PartitionStore();
  PartitionStore(const PartitionStore&) = delete;
  PartitionStore& operator=(const PartitionStore&) = delete;

  // Starts a forward(/backward) pass. A training pass follows (or, the first time, records) the
  // trace; an evaluation pass fetches on demand. zero_grads() starts a training pass too.
  void begin_pass(PassKind kind);

  // Full parameters of `unit` on the device, valid until the matching release_params. Calls
  // nest. At stage 3 the first acquire gathers (collective: every rank must acquire units in the
  // same order; while the trace is recorded a different order is an Error on every rank).
  const float* acquire_params(size_t unit);  // (units[unit].numel)
  // The same in 16 bits, when StoreConfig::compute is the (16-bit) working type: the working copy
  // as the store holds it (gathered at stage 3), not widened. Released by release_params. Each
  // of the two is an Error in the other's mode.
  const void* acquire_params16(size_t unit);  // (units[unit].numel) of placement.working
  void release_params(size_t unit);
  const StoreConfig& config() const { return config_; }
  // Where backward accumulates (+=) the unit's full local gradient, valid until grads_done(unit);
  // acquiring again before grads_done returns the same buffer.
  float* acquire_grads(size_t unit);  // (units[unit].numel)
  // The unit's local gradient is complete: it joins the open gradient bucket, whose mean over the
  // group (all-reduce at stages 0-1, reduce-scatter into the shard accumulators at stages 2-3) is
  // started once the bucket is full. Collective, same order on every rank. Gradients accumulate
  // across micro-batches until zero_grads().
  void grads_done(size_t unit);
  void zero_grads();
  // Deferred (no-sync) mode: with sync off, finished gradients stay local and later micro-batches
  // accumulate into them; they are reduced at the first grads_done with sync on, or at the step.
  // Every rank must switch alike. On by default.
  void set_gradient_sync(bool sync);
  bool gradient_sync() const;
  // Times the store's device work on `timeline` (device_timeline.hpp) while profiling, so the
  // profile shows when the device ran it: the optimizer's update, the copies between host and
  // device, and the collectives on a device stream (NCCL; MPI's run on the host, which times
  // them). nullptr (the default): the host's interval around the issue (and the wait), which on
  // the CPU backend's inline stream is the update itself. No step waits for device work because
  // of it. The caller begins and flushes the timeline's steps.
  void set_device_timeline(DeviceTimeline* timeline);

  // Clips by the global gradient norm (PyTorch's rule: scale clip / (norm + 1e-6) when below 1;
  // clip <= 0 disables), runs AdamW where each shard's optimizer states live (decay per tensor),
  // and makes the updated parameters visible to every rank. Collective. The gradients may carry
  // a loss scale (fp16's dynamic loss scaling): they are divided by it. When the norm is not
  // finite nothing is updated: with a loss scale other than 1 the step reports skipped (the
  // scale was too large), otherwise it throws Error. Gradients are left as they are.
  StoreStepStats step(double lr, double clip, double loss_scale = 1.0);

  // Announces the step that ends this training pass, before its backward (after zero_grads):
  // with StoreConfig::optimizer_overlap, each unit whose optimizer states live on the host or
  // NVMe is handed to a worker thread as soon as its gradient shard is final — its
  // `micro_batches`-th reduction of the pass has landed — while the backward of earlier units
  // goes on. The worker takes the unit's share of the gradient norm (so the step does not read
  // the shard again) and, on a step whose update needs no coefficient from the norm (no
  // clipping, clip <= 0, and no loss scaling, loss_scale 1), updates it. With `speculative` it
  // updates it on the other steps too, as if the clip coefficient were 1 and nothing overflowed,
  // after backing up its states (speculative_backup.hpp); step() keeps those updates when that
  // holds, else restores the backups and updates in the reference order (or skips). Either way
  // the result is bitwise the reference order's. Not with tied or replicated groups across
  // ranks (nothing changes then). Every unit must finish its gradient once per micro-batch
  // (grads_done) and not be acquired again in the pass after its last (an Error says so).
  // step() must follow with the same lr, clip and loss scale. Not collective.
  void plan_step(double lr, double clip, double loss_scale, size_t micro_batches);

  // Issues every gather held back so far (waiting for their shards as needed), so the caller may
  // issue its own collective on the group. Collective only in that it may issue gathers.
  void flush_collectives();

  // Sets / reads the full values of a unit (host arrays of units[unit].numel). load_unit is not
  // collective (every rank passes the same values and keeps what it owns); read_unit is
  // collective at stage 3 (it gathers).
  void load_unit(size_t unit, const float* host_values);
  void read_unit(size_t unit, float* host_values);
  // Writes the unit's fp32 values for its elements [begin, begin + count) (unit-relative) into
  // `out`. The store asks only for what this rank keeps: the whole unit below stage 3 (every rank
  // holds full parameters there), its own shard at stage 3.
  using UnitValues = std::function<void(size_t begin, size_t count, float* out)>;
  // load_unit from a source instead of the whole unit's values, so that a model larger than any
  // rank's memory is created shard by shard, each straight into its tier. Host memory holds one
  // unit's (stage 3: one shard's) values at a time, from the pinned pool where the store has one
  // (so it counts against the host budget). Not collective.
  void load_unit_from(size_t unit, const UnitValues& values);

  // ---- checkpointing: this rank's training state as named blocks, streamed one at a time
  // One block of state this rank keeps between steps: per unit its working parameters (all of
  // them below stage 3, its shard at stage 3) and, where they are separate, its fp32 master, Adam
  // m and v shards. begin: the block's first element within the unit's (padded) extent.
  struct StateBlock {
    size_t unit = 0;
    StateBuffer kind = StateBuffer::param_shard;
    Tier tier = Tier::device;
    size_t begin = 0;
    size_t elems = 0;
    size_t elem_bytes = 4;  // the working type's for working parameters, else 4
    size_t bytes() const { return elems * elem_bytes; }
  };
  // The blocks, in unit and kind order (the same on every call for this store's layout).
  std::vector<StateBlock> state_blocks() const;
  // Reads each block from wherever it lives (device, pinned host, NVMe) into one host buffer of
  // its size and hands it to `sink`; host memory holds one block at a time. Waits for the
  // optimizer's background work first. Not collective.
  void save_state(const std::function<void(const StateBlock&, const void* data)>& sink);
  // The reverse: `source` fills each block's host buffer (exactly bytes()), which is written
  // where the block lives; then the step count is set (AdamW's bias correction continues from
  // it). Before training or between steps; not collective.
  void load_state(const std::function<void(const StateBlock&, void* data)>& source,
                  int64_t steps_taken);

  int stage() const { return config_.stage; }
  const PartitionPlan& plan() const { return plan_; }
  const std::vector<UnitPlacement>& placement() const;
  int64_t steps_taken() const { return t_; }
  // Whether `unit` stays gathered at stage 3 (below the persistence threshold).
  bool persistent(size_t unit) const;
  // The recorded unit order (empty until the first training pass has finished with a step).
  const std::vector<size_t>& trace() const;
  const FetchCounters& fetch_counters() const { return counters_; }
  // Elements of gathered units alive now (stage 3; persistent units not counted).
  size_t live_elems() const;
  // The pinned pool under the host budget (null when no state lives off the device).
  offload::HostPool* host_pool();
  // The swap space on the NVMe engine (null when no state lives on NVMe), for a caller that keeps
  // more state beside the store's on the same drive and bounce buffers (OffloadAdamW).
  offload::SwapSpace* nvme_swap();

 private:
  void check_unit(const char* op, size_t unit) const;
  // A reduction of the unit's gradient landed (the reducer's hook): queues its update when it is
  // the pass's last.
  void on_reduced(size_t unit);
  void update_during_backward(size_t unit);  // on the worker thread
  // Waits for the worker and ends the planned step (any error is rethrown); returns the wait.
  double finish_backward_updates();
  void check_not_updating(const char* op, size_t unit) const;
  kernels::AdamWParams step_params(double lr, double grad_scale, int64_t t) const;

  // The step announced by plan_step, whose units are handed to the worker during the backward.
  struct PlannedStep {
    bool active = false;
    double lr = 0.0, clip = 0.0, loss_scale = 1.0;
    size_t micro_batches = 1;
    // Units are updated on the worker (not only measured); speculatively: the step's clip
    // coefficient and overflow are not known yet, so each update is backed up first.
    bool update = false;
    bool speculative = false;
    std::vector<size_t> reduced;  // per unit: reductions landed in this pass
    std::vector<char> handed;     // per unit: queued on the worker (its shard is final)
    std::vector<char> updated;    // per unit: its update was queued
    // per unit: its share of the gradient norm, taken by the worker (GradientNorm::
    // unit_sum_squares); written on the worker, read by the step after the worker has finished.
    std::vector<std::optional<double>> sum_squares;
    kernels::AdamWParams base;  // the step's AdamW constants (decay comes per tensor)
  };
  // Keeps or undoes the speculative updates of the step (`updated`, cleared for the units
  // undone; `handed`: the units queued on the worker) now that its gradient scale is known:
  // `scale` (clip coefficient / loss scale) or not finite. Returns the units undone.
  size_t settle_speculation(std::vector<char>& updated, const std::vector<char>& handed,
                            const kernels::AdamWParams& speculated, double lr, double scale,
                            bool finite);
  PlannedStep planned_;
  bool tie_or_replica_ = false;  // tied or replicated groups of more than one rank

  StoreConfig config_;
  AdamWConfig optimizer_;
  comm::Communicator& group_;
  // Stage 0 replicates the optimizer too: its plan is a group of one, so the "shard" of every
  // unit is the whole unit and the same code path runs the update.
  PartitionPlan plan_;
  FetchCounters counters_;
  int64_t t_ = 0;
  DeviceTimeline* timeline_ = nullptr;  // set_device_timeline
  // Declaration order is construction order: the parts below use the ones above, and are
  // destroyed first (the background update is joined before the buffers it uses are freed).
  std::unique_ptr<ShardStorage> storage_;
  std::unique_ptr<BackgroundUpdate> background_;
  std::unique_ptr<Fetcher> fetcher_;
  std::unique_ptr<GradientReducer> reducer_;
  std::unique_ptr<GradientNorm> norm_;
  std::unique_ptr<InMemoryAdamW> in_memory_;
  std::unique_ptr<NvmeAdamW> nvme_;
  std::unique_ptr<SpeculativeBackup> backups_;  // optimizer_overlap speculative's undo
  // Last: destroyed first (its worker uses every part above).
  std::unique_ptr<BackwardUpdate> backward_;
};

}  // namespace tierzero::zero
