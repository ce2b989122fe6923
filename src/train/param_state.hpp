// ParamState: the parameters, gradients and optimizer states of one rank, behind the verbs the
// training loop uses (zero the gradients, take an optimizer step, hand the model a provider), so
// that the loop holds no branch on where they live. Two implementations: the one-rank fp32
// reference (LocalParams on the device + AdamW), which every other mode is compared with, and the
// ZeRO partition store (stages 0-3, any placement, one rank or many). Chosen once by
// make_param_state. Private to src/train.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "run_setup.hpp"
#include "tierzero/nn/param_provider.hpp"
#include "tierzero/train/step_record.hpp"
#include "tierzero/train/store_provider.hpp"
#include "tierzero/zero/partition_store.hpp"

namespace tierzero::train {

struct StepOutcome {
  double grad_norm = 0.0;
  bool skipped = false;  // fp16: gradients overflowed, the step was not taken
};

class ParamState {
 public:
  virtual ~ParamState() = default;
  // What the model reads its parameters from and writes its gradients to.
  virtual nn::ParamProvider& provider() = 0;
  virtual void zero_grads() = 0;
  // Clips to `clip`, divides the gradients by `loss_scale` (fp16) and takes AdamW's step.
  virtual StepOutcome step(double lr, double clip, double loss_scale) = 0;
  // Optimizer steps taken (an fp16 step skipped on overflow does not count): the LR schedule's.
  virtual int64_t steps_taken() const = 0;
  // The step's fetch and reduction counters into `r` (nothing without a store).
  virtual void record_counters(StepRecord& r) const = 0;
  // An evaluation pass follows (kept out of the store's training trace).
  virtual void begin_eval() = 0;
  // Announces the step that ends this training pass (after zero_grads, before the backward), so
  // the optimizer may start on units whose gradients are final during the backward; step() then
  // takes the same values. Nothing without a store.
  virtual void plan_step(double /*lr*/, double /*clip*/, double /*loss_scale*/,
                         size_t /*micro_batches*/) {}
  // fn(begin, count, values) for consecutive pieces of the rank's flat parameter buffer, every
  // element once, in order: a store unit at a time (a gather at stage 3, so every rank of the
  // store's group must call it) or a chunk of the local buffer. Host memory: one piece.
  using PieceFn = std::function<void(size_t begin, size_t count, const float* values)>;
  virtual void for_each_piece(const PieceFn& fn) = 0;
  // Checkpoint blocks: (unit, kind, element bytes, tier, begin, elements, data), named as the
  // store names its blocks.
  using BlockSink =
      std::function<void(const std::string& unit, const std::string& kind, size_t elem_bytes,
                         const std::string& tier, size_t begin, size_t elems, const void* data)>;
  using BlockSource =
      std::function<void(const std::string& unit, const std::string& kind, size_t elem_bytes,
                         size_t begin, size_t elems, void* data)>;
  virtual void save_blocks(const BlockSink& sink) = 0;
  virtual void load_blocks(const BlockSource& source, int64_t steps_taken) = 0;
  // The store (null on the reference path) and its unit grouping, for reports and the banner.
  virtual const zero::PartitionStore* store() const { return nullptr; }
  virtual const UnitGrouping* grouping() const { return nullptr; }
  // The store's pinned pool (null without one), which activation checkpoints on the host share.
  virtual offload::HostPool* host_pool() { return nullptr; }
  // Times the optimizer's device work on `timeline` (PartitionStore::set_device_timeline);
  // nullptr unbinds. Nothing without a store.
  virtual void set_device_timeline(DeviceTimeline* /*timeline*/) {}
  int zero_stage() const { return store() ? store()->stage() : 0; }
};

// The partition store when the run has an MPI session, else the reference path. Loads the
// initial values into it. compute: the dtype the model computes in (compute_dtype_for), which
// the store hands its parameters out in (StoreConfig::compute); the reference path is fp32.
std::unique_ptr<ParamState> make_param_state(const TrainConfig& c, const RunSession& run,
                                             const ProcessGroups& groups,
                                             const nn::ParamLayout& layout, Device& device,
                                             DeviceAllocator& allocator,
                                             const InitialValues& initial, DType compute);

}  // namespace tierzero::train
