// GradientReducer: where backward accumulates each unit's gradient, and how the gradients are
// averaged over the partition group into what each rank owns. Stages 0-1 all-reduce the full
// gradients in place; stages 2-3 reduce-scatter each unit's full local gradient into its fp32
// shard accumulator (on the device, or through pinned staging into host memory). One rank at
// stage 2-3 with device gradients accumulates straight into the shard: there is nothing to average.
//
// Buckets (reduce_bucket_size): units finished one after another join an open bucket, reduced by
// one collective once it holds reduce_bucket_elems elements. Several units' full gradients are
// packed rank-major ([rank 0's shards of every unit][rank 1's]...) so that one reduce-scatter
// leaves each rank its shard of every unit; a single unit is already in that shape. Stages 0-1
// reduce a run of adjacent units as one span of the full-gradient arena. As DeepSpeed does, a
// unit that would overflow the open bucket sends the bucket off first, so a bucket of several
// units holds at most its capacity — reduce_bucket_elems, or with overlap_comm the largest unit,
// so the reductions overlap the backward — and a bucket of one unit is that unit. In flight,
// overlapping the rest of the backward: at most max_pending_reductions buckets and at most one
// bucket's worth of elements (always at least one bucket). Without overlap_comm each bucket is
// waited for as soon as it is issued. Each reduction's time in flight and the part the training
// thread waited for it go to FetchCounters (reduction_s, reduction_exposed_s).
//
// communication_data_type (StoreConfig::reduce_dtype): a bucket is rounded to bf16 or fp16 right
// before its collective and the mean widened back to fp32 when it lands; accumulation stays fp32.
//
// Deferred (no-sync) mode: with sync off, a unit's finished gradient stays local (stages 2-3 keep
// its full gradient) and the next micro-batch accumulates into it; the first finish with sync on,
// or the step, reduces the sum — one reduction per unit per step instead of one per micro-batch,
// for the memory of the full gradients (the mode pipelining and gradient accumulation want).
// Internal to the zero layer.
#pragma once

#include <cstddef>
#include <deque>
#include <functional>
#include <memory>
#include <vector>

#include "background_update.hpp"
#include "shard_storage.hpp"
#include "tierzero/comm/communicator.hpp"
#include "tierzero/device/device_timeline.hpp"
#include "tierzero/zero/store_config.hpp"

namespace tierzero::zero {

class GradientReducer {
 public:
  // `flush_collectives` issues whatever the caller holds back on `group` (stage 3's queued
  // gathers), so that every rank issues collectives in the same order.
  // `on_reduced(unit)` (may be empty) runs on the training thread each time a reduction of the
  // unit's gradient has landed in what this rank owns: its shard (stages 2-3) or the full
  // gradient (stages 0-1).
  GradientReducer(const StoreConfig& config, ShardStorage& storage, BackgroundUpdate& background,
                  comm::Communicator& group, FetchCounters& counters,
                  std::function<void()> flush_collectives,
                  std::function<void(size_t)> on_reduced = {});
  ~GradientReducer();  // waits quietly for reductions in flight
  GradientReducer(const GradientReducer&) = delete;
  GradientReducer& operator=(const GradientReducer&) = delete;

  float* acquire(size_t unit);  // (padded_numel) fp32: backward accumulates (+=) here
  // The unit's local gradient is complete (for this micro-batch); it was open.
  void done(size_t unit);
  bool open(size_t unit) const { return units_[unit].open; }
  void discard(size_t unit);  // closes an open unit without reducing its gradient
  void set_sync(bool sync) { sync_ = sync; }
  bool sync() const { return sync_; }
  // While profiling: reductions on a device stream and the copies of their results to the host
  // are timed on `timeline` where they run (device_span.hpp, timed_collective.hpp); null: on the
  // host's clock.
  void set_device_timeline(DeviceTimeline* timeline) { timeline_ = timeline; }
  // Reduces everything still local or in the open bucket and waits for every reduction: the
  // owned gradients are complete.
  void finish_all();
  // Zeroes every gradient for the next step (what is deferred is dropped, not reduced).
  void zero();
  // Below stage 2 with the optimizer on the host: this rank's slice of the averaged full gradient
  // goes to its host gradient shard (every unit not marked in `copied`, per unit; or one unit).
  void copy_slices_to_host(const std::vector<char>& copied = {});
  void copy_slice_to_host(size_t unit);

 private:
  struct UnitGrad {
    bool open = false;       // between acquire and done
    bool direct = false;     // one rank: backward accumulates straight into the shard
    bool in_bucket = false;  // waits in the open bucket
    bool held = false;       // deferred: finished but not reduced (sync off)
    DeviceBuffer full;       // (padded_numel) fp32, stages 2-3: the local full gradient
  };
  // A bucket in flight. Buffers first: the request (destroyed first) waits for the operation
  // before the buffers it uses are freed.
  struct Pending {
    std::vector<size_t> units;  // in bucket order
    DeviceBuffer input;         // (sum padded_numel) fp32, stages 2-3: reduce-scatter input
    DeviceBuffer shard_mean;    // (sum shard_numel) fp32, stages 2-3: reduce-scatter output
    // reduce_dtype other than fp32: the collective's input and output in it (wire_out only at
    // stages 2-3; stages 0-1 reduce wire_in in place and widen it back into the arena).
    DeviceBuffer wire_in;   // (elems) reduce_dtype
    DeviceBuffer wire_out;  // (sum shard_numel) reduce_dtype, stages 2-3
    // Stages 2-3, 16-bit, no unit's gradient shard on the device: wire_out is widened into
    // shard_mean on the copy stream just before the copies to the host (copy_to_host), not on the
    // compute stream, so the host's wait for them does not queue behind the backward.
    bool widen_for_host = false;
    float* arena = nullptr;  // stages 0-1: the span of the full-gradient arena reduced
    // Recorded after backward's (and the packing's) writes: the reduction starts after it, so
    // the training thread does not wait for them on the host.
    std::unique_ptr<Event> ready;
    size_t elems = 0;        // padded elements of its units
    size_t shard_elems = 0;  // stages 2-3: elements of the reduced shards
    double issued_s = 0.0;   // monotonic_seconds() when handed to the communicator
    bool timed = false;      // on the device timeline: no host record of it
    comm::CommRequest request;
  };

  // A comm buffer of `elems` of `dtype`; an over-budget error also names reduce_bucket_size.
  DeviceBuffer allocate(size_t elems, const char* label, DType dtype = DType::f32);
  void add_to_bucket(size_t unit);
  bool adjacent_to_bucket(size_t unit) const;  // stages 0-1: extends the bucket's span
  void issue_bucket();
  void finish_oldest();
  size_t wire_bytes(const Pending& r) const;  // what the reduction's collective moves per rank
  void finish_through(size_t unit);           // until no reduction of `unit` is pending
  void accumulate(const Pending& r);          // stages 2-3: each unit's mean into its shard
  // A unit's mean (shard_numel fp32, host) added into its gradient shard on NVMe.
  void accumulate_on_nvme(size_t unit, float* mean);
  // Landed reductions' results (device) into host memory, on d2h_stream_; returns once they are
  // all there (one host wait, for these copies alone, not for the compute stream's queue).
  struct HostCopy {
    void* dst;        // (bytes) host
    const void* src;  // (bytes) device
    size_t bytes;
  };
  // after_compute: the sources' last writer may be work on the compute stream (not a reduction
  // that has landed), so the copies follow it (in stream order; the host still waits only once).
  // widen_first: a landed 16-bit reduction (widen_for_host) whose shard_mean the copies read,
  // widened on the copy stream before them.
  void copy_to_host(const std::vector<HostCopy>& copies, size_t unit, bool after_compute = false,
                    const Pending* widen_first = nullptr);

  const StoreConfig& config_;
  ShardStorage& storage_;
  BackgroundUpdate& background_;
  comm::Communicator& group_;
  FetchCounters& counters_;
  std::function<void()> flush_collectives_;
  std::function<void(size_t)> on_reduced_;
  const PartitionPlan& plan_;
  Device& device_;
  DeviceTimeline* timeline_ = nullptr;  // set_device_timeline
  std::vector<UnitGrad> units_;
  // (units) per unit: its host gradient shard is zeros from zero() and nothing has landed in it
  // since, so the first mean is copied straight in (accumulate).
  std::vector<char> host_zero_;
  std::vector<size_t> bucket_;  // units of the open bucket, in finishing order
  size_t bucket_elems_ = 0;     // their padded elements
  std::deque<Pending> pending_;
  size_t pending_elems_ = 0;  // of the buckets in flight
  size_t capacity_;           // elements at which a bucket goes out (bucket_capacity)
  bool sync_ = true;
  // Reduced gradients' copies to host memory (made on first use: only with host gradients).
  std::unique_ptr<Stream> d2h_stream_;
  std::unique_ptr<Event> copied_;  // the last copy on it (or, first, the widening it follows)
};

}  // namespace tierzero::zero
