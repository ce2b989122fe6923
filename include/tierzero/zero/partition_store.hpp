// PartitionStore: owns a model's parameters, gradients and AdamW states for one data-parallel
// rank, partitions them across the group with ZeRO's stages (DeepSpeed's meaning) and places each
// unit's states on a tier (device, pinned host memory, NVMe):
//   stage 0  everything replicated; gradients all-reduced (mean) per unit after backward;
//   stage 1  + AdamW states (and the fp32 master copy) sharded: each rank updates its shard of
//            every unit, then the updated parameters are all-gathered;
//   stage 2  + gradients sharded: each unit's full gradient lives only between acquire_grads and
//            grads_done, which reduce-scatters it (mean) into an fp32 shard accumulator;
//   stage 3  + parameters sharded: acquire_params gathers a unit into a working buffer (reading
//            it from host or NVMe first when it lives there), release_params frees it; units
//            below the persistence threshold stay gathered. The first training pass records the
//            order of units (the trace) and checks it is the same on every rank; later passes
//            prefetch along it within the prefetch and live-parameter budgets, and start NVMe
//            reads further ahead than the gathers.
// Placement (placement.hpp) follows offload_param / offload_optimizer: the optimizer step runs
// where each unit's states live — the device's kernel, the CPU kernel on host shards, or a
// read -> update -> write pipeline over chunks of NVMe-resident shards.
// Its unit-at-a-time calls mirror nn::ParamProvider so that a thin adapter in the layer above
// (train, tests) lets the GPT run on it unchanged; the store itself knows nothing of GPT.
// Working parameters are fp32 (the CPU backend computes in fp32). Every byte is allocated through
// the device allocator, the host pool or the swap space with its category, so the MemoryTracker
// shows each rank's model-state bytes per tier exactly as placement.hpp predicts them.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "tierzero/comm/communicator.hpp"
#include "tierzero/device/device_allocator.hpp"
#include "tierzero/offload/host_pool.hpp"
#include "tierzero/offload/nvme_engine.hpp"
#include "tierzero/zero/partition.hpp"
#include "tierzero/zero/placement.hpp"

namespace tierzero::offload {
class SwapSpace;
}

namespace tierzero::zero {

// AdamW's constants (the learning rate comes with each step).
struct AdamWConfig {
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.1;  // applied to tensors marked decay (matrices), not biases or norms
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
  // Gradient reductions in flight (at least 1) before grads_done waits for the oldest: overlap
  // with the next unit's backward without letting temporary full gradients pile up.
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
};

// Gradient reductions the store keeps in flight for a reduce_bucket_size (elements): as many whole
// units (the largest of `units`) as the bucket holds, at least one, at most two — more buys no
// overlap. What the trainer configures and the estimator assumes.
size_t reductions_in_flight(int64_t reduce_bucket_elems, const std::vector<UnitSpec>& units);

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
  double stall_s = 0.0;          // time acquire_params waited for reads and gathers
};

enum class PassKind { train, eval };

// Not thread-safe: one thread (the training loop) makes every call, which also keeps the group's
// collectives in the same order on every rank. At stage 3 the store may hold back gathers it has
// decided on until their shards are ready, issuing them in order at its later calls (and always
// before its own reductions and the step): a caller that issues collectives of its own on `group`
// during a training pass (between zero_grads/begin_pass and step) calls flush_collectives() first.
class PartitionStore {
 public:
  // Collective over `group` (the data-parallel partition group): every rank passes the same
  // units and configs. `allocator` and `group` must outlive the store. Parameters start at zero;
  // fill them with load_unit. Throws Error when a placement is not possible (see place_units) or
  // a tier cannot hold its share.
  PartitionStore(std::vector<UnitSpec> units, const StoreConfig& config,
                 const AdamWConfig& optimizer, comm::Communicator& group,
                 DeviceAllocator& allocator);
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
  // clip <= 0 disables), runs AdamW where each shard's optimizer states live (decay per tensor),
  // and makes the updated parameters visible to every rank. Collective. The gradients may carry
  // a loss scale (fp16's dynamic loss scaling): they are divided by it. When the norm is not
  // finite nothing is updated: with a loss scale other than 1 the step reports skipped (the
  // scale was too large), otherwise it throws Error. Gradients are left as they are.
  StoreStepStats step(double lr, double clip, double loss_scale = 1.0);

  // Issues every gather held back so far (waiting for their shards as needed), so the caller may
  // issue its own collective on the group. Collective only in that it may issue gathers.
  void flush_collectives() { flush_deferred_gathers(); }

  // Sets / reads the full values of a unit (host arrays of units[unit].numel). load_unit is not
  // collective (every rank passes the same values and keeps what it owns); read_unit is
  // collective at stage 3 (it gathers).
  void load_unit(size_t unit, const float* host_values);
  void read_unit(size_t unit, float* host_values);

  int stage() const { return config_.stage; }
  const PartitionPlan& plan() const { return plan_; }
  const std::vector<UnitPlacement>& placement() const { return placement_; }
  int64_t steps_taken() const { return t_; }
  // Whether `unit` stays gathered at stage 3 (below the persistence threshold).
  bool persistent(size_t unit) const;
  // The recorded unit order (empty until the first training pass has finished with a step).
  const std::vector<size_t>& trace() const { return trace_; }
  const FetchCounters& fetch_counters() const { return counters_; }
  // Elements of gathered units alive now (stage 3; persistent units not counted).
  size_t live_elems() const { return live_elems_; }

  struct Arenas;  // the persistent state buffers per tier (internal: src/zero/state_arenas.hpp)

 private:
  enum class Fetch : uint8_t { none, reading, gathering, ready };
  struct UnitState {
    size_t param_refs = 0;  // acquire_params nesting count
    bool grads_open = false;
    Fetch fetch = Fetch::none;
    bool prefetched = false;    // the fetch was started by the prefetcher
    bool deferred = false;      // in deferred_gathers_: counted as gathered, not issued yet
    bool direct = false;        // one rank, fp32 on the device: the shard is the unit, no copy
    bool grads_direct = false;  // one rank: backward accumulates straight into the shard
    DeviceBuffer gathered;      // (padded_numel) working type, stage 3: the unit's working params
    DeviceBuffer compute;       // (padded_numel) fp32: converted from 16-bit working parameters
    DeviceBuffer full_grad;     // (padded_numel) fp32, stages 2-3: the local full gradient
    offload::PinnedBuffer staging;  // (shard_numel) fp32: the shard read from NVMe
    std::vector<offload::IoHandle> reads;
    double gather_issued_s = 0.0;
    comm::CommRequest gather;
  };
  // A gradient reduction in flight. Declared buffers first: the request (destroyed first) waits
  // for the operation before the buffers it uses are freed.
  struct PendingReduction {
    size_t unit = 0;
    DeviceBuffer full_grad;   // (padded_numel) fp32, stages 2-3: reduce-scatter input
    DeviceBuffer shard_mean;  // (shard_numel) fp32, stages 2-3: reduce-scatter output
    double issued_s = 0.0;
    comm::CommRequest request;
  };

  void check_unit(const char* op, size_t unit) const;
  // This rank's shard of `unit` for the kinds that may live on any tier: a device or host pointer,
  // null when it is on NVMe. Below stage 3 the parameter and (device) gradient shards are slices
  // of the full buffers.
  float* param_shard_ptr(size_t unit);    // fp32 working parameters only
  void* param_shard_raw(size_t unit);     // any working type
  const float* unit_params(size_t unit);  // the fp32 values acquire_params hands out
  float* grad_shard_ptr(size_t unit);
  float* master_ptr(size_t unit);  // the fp32 master shard (the parameter shard when shared)
  StateBuffer master_kind(size_t unit) const;
  // Writes this rank's shard (shard_numel fp32, host memory) of a shard-shaped kind
  // (param_shard, master) wherever it lives, rounded to the kind's element type.
  void write_shard(StateBuffer kind, size_t unit, const float* host_shard);
  void finish_oldest_reduction();
  void finish_reductions_through(size_t unit);  // until no reduction of `unit` is pending
  void finish_all_reductions();
  double global_sum_squares(double local);
  // Every rank's pair of floats, in rank order (ranks, 2): a tiny all-gather through the device.
  std::vector<float> all_gather_pair(float a, float b, const char* label);

  // Stage 3 fetching (store_fetch.cpp).
  void start_read(size_t unit);  // NVMe -> host staging (params on NVMe only), or the handoff
  // Gathers are issued strictly in the order start_gather is called (the same on every rank).
  // A unit whose shard is not ready yet (its background update or NVMe read still running) is
  // queued instead, and the queue is issued in order as shards become ready, so the training
  // thread does not wait for one unit while it could compute another.
  void start_gather(size_t unit);
  void issue_gather(size_t unit);  // shard -> device slot, all-gather issued
  bool gather_ready(size_t unit);  // issue_gather would not wait (never blocks)
  // Issues queued gathers in order: those that are ready, and when `through` is queued, every one
  // up to and including it, waiting as needed.
  void issue_deferred_gathers(size_t through = static_cast<size_t>(-1));
  void flush_deferred_gathers();  // every queued gather, waiting as needed
  // start_read would neither wait nor exceed the staging budget (never blocks).
  bool read_startable(size_t unit);
  // Waits for the gather; the unit is ready. The wait counts as stall time when `stall`.
  void finish_fetch(size_t unit, bool stall = true);
  void drop_gathered(size_t unit);
  void drop_unused_fetches();  // end of a pass: frees what was fetched and not in use
  void check_trace_position(size_t unit);
  void check_trace_end();
  void exchange_trace_word(float kind, float value, const char* what);
  void pump_prefetch();
  bool keep_after_release(size_t unit) const;
  size_t next_use_distance(size_t unit) const;  // elements until `unit`'s next use in the trace

  // Optimizer step (store_optimizer.cpp).
  double local_grad_sum_squares();
  void update_unit_in_memory(size_t unit, const kernels::AdamWParams& base, bool on_device);
  // The read -> update -> write pipeline over NVMe-resident optimizer states
  // (store_nvme_optimizer.cpp). In the background it moves each unit through update_state_ and
  // clears the gradient shards it has read.
  void setup_optimizer_swap();
  void release_optimizer_swap();  // waits for the slots' transfers, unregisters and frees them
  void update_units_on_nvme(const kernels::AdamWParams& base, bool background);
  void issue_swap_read(size_t chunk);
  void wait_swap_io_quietly();       // every slot transfer, errors ignored (error paths)
  void discard_staged_swap_reads();  // the states changed outside the pipeline
  void set_update_state(size_t unit, uint8_t state);
  void wait_optimizer(size_t unit);     // until `unit`'s update has been computed and published
  void wait_unit_on_disk(size_t unit);  // until `unit`'s update is also written to NVMe
  void wait_update(size_t unit, bool on_disk);
  bool update_published(size_t unit);  // wait_optimizer would not wait (never blocks)
  // With optimizer_mutex_ held: the unit's update is published (or, `on_disk`, also written),
  // or the pipeline failed.
  bool update_reached_locked(size_t unit, bool on_disk) const;
  void wait_optimizer_all();  // joins the background update; rethrows its error
  void publish_params(size_t unit, const float* master, size_t begin, size_t count,
                      bool master_on_device);

  StoreConfig config_;
  AdamWConfig optimizer_;
  comm::Communicator& group_;
  DeviceAllocator& allocator_;
  Device& device_;
  // Stage 0 replicates the optimizer too: its plan is a group of one, so the "shard" of every
  // unit is the whole unit and the same code path runs the update.
  PartitionPlan plan_;
  std::vector<UnitPlacement> placement_;
  std::unique_ptr<offload::HostPool> host_pool_;  // when any state or staging is on the host
  std::unique_ptr<offload::NvmeEngine> nvme_;     // when any state is on NVMe
  std::unique_ptr<offload::SwapSpace> swap_;      // extents of nvme_
  std::unique_ptr<Arenas> arenas_;
  std::vector<UnitState> units_;
  std::deque<PendingReduction> pending_;
  int64_t t_ = 0;

  // Trace and prefetch state (stage 3).
  PassKind pass_ = PassKind::train;
  bool recording_ = true;      // this training pass records the trace
  bool trace_valid_ = false;   // a verified trace exists
  bool off_trace_ = false;     // this pass left the trace: no more prefetching
  std::vector<size_t> trace_;  // unit per acquire, in order
  std::vector<size_t> recording_trace_;
  size_t cursor_ = 0;  // acquires so far in this pass
  size_t live_elems_ = 0;
  // Parameter shards in pinned staging (NVMe reads started, handoffs taken) and not yet copied to
  // the device. Atomic: the NVMe optimizer thread counts it against the staging budget too.
  std::atomic<size_t> reads_in_flight_{0};
  std::deque<size_t> deferred_gathers_;  // units whose gather waits to be issued, in order
  FetchCounters counters_;

  // The NVMe optimizer pipeline: chunks of the NVMe-resident units in update order, the slots
  // they stream through, and whether slot i already holds (or is reading) chunk i for the next
  // update.
  struct SwapChunk {
    size_t unit, begin, count;  // elements of the unit's shard
  };
  struct SwapSlot {
    offload::PinnedBuffer master, m, v;  // (largest chunk) fp32 each
    std::vector<offload::IoHandle> reads, writes;
  };
  std::vector<SwapChunk> swap_chunks_;
  std::vector<SwapSlot> swap_slots_;
  bool swap_staged_ = false;

  // The NVMe optimizer pipeline running behind the next forward (stage 3, CPU backend).
  bool background_optimizer_ = false;
  std::thread optimizer_thread_;
  std::mutex optimizer_mutex_;
  std::condition_variable optimizer_cv_;
  // Per unit, kUpdate*: done (on disk), updating (not computed yet), published (new values
  // visible to fetches; NVMe writes may still be in flight).
  static constexpr uint8_t kUpdateDone = 0, kUpdating = 1, kUpdatePublished = 2;
  std::vector<uint8_t> update_state_;
  // Per unit: the updated parameter shard (shard_numel, working type) handed from the NVMe
  // pipeline to the next fetch, which then needs no NVMe read. Handoffs and reads in flight share
  // the nvme_read_buffers staging budget.
  std::vector<offload::PinnedBuffer> handoff_;
  size_t handoffs_held_ = 0;
  // Per unit: the pipeline zeroed its gradient shard and nothing has been added since.
  std::vector<char> grads_cleared_;
  std::exception_ptr optimizer_error_;
};

}  // namespace tierzero::zero
