// Fetcher: hands out a unit's full parameters on the device and takes them back. Below stage 3
// the full parameters are resident (converted to fp32 while in use when they are 16-bit). At
// stage 3 it gets them there: an NVMe read into pinned staging (or the optimizer's handoff), a
// copy to the device, an all-gather; and it records the order of units in the first training
// pass (the trace), checks it is the same on every rank, and prefetches along it in later passes.
//
// Collectives must be issued in the same order on every rank, so every decision that issues a
// gather depends only on the trace, the position in it and the budgets — never on how fast an
// NVMe read or a gather happened to finish on this rank. NVMe reads (local, not collective) are
// started further ahead, as far as the staging buffers allow. A gather whose shard is not ready
// (its NVMe read, or its update behind the previous step, still running) is queued rather than
// waited for; the queue is issued in order at later calls, and flushed (flush()) before anyone
// issues another collective on the group, so the order of collectives stays the same everywhere.
// Internal to the zero layer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

#include "background_update.hpp"
#include "shard_storage.hpp"
#include "tierzero/comm/communicator.hpp"
#include "tierzero/device/device_timeline.hpp"
#include "tierzero/zero/store_config.hpp"

namespace tierzero::zero {

class Fetcher {
 public:
  Fetcher(const StoreConfig& config, ShardStorage& storage, BackgroundUpdate& background,
          comm::Communicator& group, FetchCounters& counters);
  ~Fetcher();  // waits quietly for reads and gathers still in flight
  Fetcher(const Fetcher&) = delete;
  Fetcher& operator=(const Fetcher&) = delete;

  // Starts a forward(/backward) pass: a training pass follows (or records) the trace, an
  // evaluation pass fetches on demand.
  void begin_pass(PassKind kind);
  // (padded_numel) on the device, of StoreConfig::compute's type: fp32, or the 16-bit working
  // copy as it is.
  const void* acquire(size_t unit);
  void release(size_t unit);
  // Issues every gather held back so far (waiting for their shards as needed).
  void flush();
  // Stage 3: the unit's values into host memory (gathers; not counted as a use).
  void read(size_t unit, float* host_values);
  // Stage 3, at the optimizer step: the pass's trace is finished (verified across ranks when it
  // was recorded) and every gathered copy is dropped (stale after the update; gathers still in
  // flight read the shards the update writes).
  void end_training_pass();
  // Stage 3: drops what was fetched of the unit (its values are about to change).
  void drop(size_t unit);
  // While the trace is recorded, a gradient reduction is checked like an acquire, so a rank
  // reducing another unit than the others fails with an Error instead of mismatched collectives.
  void check_reduction(size_t unit);

  // While profiling: the copies to the device and the gathers on a device stream are timed on
  // `timeline` where they run (device_span.hpp, timed_collective.hpp); null: on the host's clock.
  void set_device_timeline(DeviceTimeline* timeline) { timeline_ = timeline; }

  size_t references(size_t unit) const { return units_[unit].refs; }
  bool persistent(size_t unit) const;
  const std::vector<size_t>& trace() const { return trace_; }
  size_t live_elems() const { return live_elems_; }

 private:
  enum class Fetch : uint8_t { none, reading, gathering, ready };
  struct UnitFetch {
    size_t refs = 0;  // acquire nesting count
    Fetch fetch = Fetch::none;
    bool prefetched = false;  // the fetch was started by the prefetcher
    bool deferred = false;    // in deferred_: counted as gathered, not issued yet
    bool direct = false;      // one rank, fp32 on the device: the shard is the unit, no copy
    DeviceBuffer gathered;    // (padded_numel) working type, stage 3: the unit's working params
    DeviceBuffer compute;     // (padded_numel) fp32: widened from 16-bit working parameters
                              // (compute fp32 only)
    offload::PinnedBuffer staging;  // (shard_numel) working type: the shard read from NVMe
    bool staging_counted = false;   // staging counts in the budget (read or handoff not copied)
    std::vector<offload::IoHandle> reads;
    // Recorded once the shard the gather sends is in place: after its copy to the device on the
    // copy stream, or after the default stream's work that wrote it. The gather starts after it.
    std::unique_ptr<Event> ready;
    double gather_issued_s = 0.0;
    bool gather_timed = false;  // on the device timeline: no host record of it
    comm::CommRequest gather;
  };

  const void* unit_params(size_t unit);  // what acquire hands out (StoreConfig::compute)
  bool widens() const;                   // 16-bit working parameters handed out in fp32
  bool is_direct(size_t unit) const;     // one rank, fp32, shard on the device
  void start_read(size_t unit);  // NVMe -> host staging (params on NVMe only), or the handoff
  // Gathers are issued strictly in the order start_gather is called (the same on every rank); a
  // unit whose shard is not ready yet is queued instead and issued in order later.
  void start_gather(size_t unit);
  void issue_gather(size_t unit);  // shard -> device slot, all-gather issued
  bool gather_ready(size_t unit);  // issue_gather would not wait (never blocks)
  // Issues queued gathers in order: those that are ready, and when `through` is queued, every one
  // up to and including it, waiting as needed.
  void issue_deferred(size_t through = static_cast<size_t>(-1));
  bool read_startable(size_t unit) { return background_.read_startable(unit); }
  // Waits for the gather; the unit is ready. The wait counts as stall time when `stall`.
  void finish_fetch(size_t unit, bool stall = true);
  void drop_unused();  // frees what was fetched and is not in use
  // Waits until the unit's copy to the device has landed, then frees its staging (and gives a
  // read never copied back to the staging budget).
  void finish_copy(UnitFetch& s);
  // Frees the staging of every copy that has landed (never blocks), so that gathered units
  // waiting for their use hold no pinned memory.
  void release_landed_copies();

  // The trace and the prefetcher (fetch_trace.cpp).
  void note_use(size_t unit);  // an acquire in a training pass: record or follow the trace
  void exchange_trace_word(float kind, float value, const char* what);
  void pump_prefetch();
  bool keep_after_release(size_t unit) const;
  size_t next_use_distance(size_t unit) const;  // elements until `unit`'s next use in the trace

  const StoreConfig& config_;
  ShardStorage& storage_;
  BackgroundUpdate& background_;
  comm::Communicator& group_;
  FetchCounters& counters_;
  const PartitionPlan& plan_;
  Device& device_;
  DeviceTimeline* timeline_ = nullptr;  // set_device_timeline
  std::vector<UnitFetch> units_;

  PassKind pass_ = PassKind::train;
  bool recording_ = true;      // this training pass records the trace
  bool trace_valid_ = false;   // a verified trace exists
  bool off_trace_ = false;     // this pass left the trace: no more prefetching
  std::vector<size_t> trace_;  // unit per acquire, in order
  std::vector<size_t> recording_trace_;
  size_t cursor_ = 0;  // acquires so far in this pass
  size_t live_elems_ = 0;
  std::deque<size_t> deferred_;  // units whose gather waits to be issued, in order
};

}  // namespace tierzero::zero
