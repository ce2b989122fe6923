// PipelineExecutor: runs one pipeline rank's part of a training step (or of an evaluation) in
// the order a PipelineSchedule gives (for the interleaved schedule over the rank's model chunks),
// with the activations and their gradients sent point to point to the neighbouring stages: a
// send goes out asynchronously right after the action that produced it and is waited for only
// before its buffer is reused; a receive is issued right before the action that needs it or,
// with set_receive_ahead (MPI only), posted before the action in front of it computes when its
// buffer is free and waited for there (on the 2-core development VM that measured up to 5 %
// slower with shared-memory MPI, so it is off by default; docs/benchmarks.md).
// Each micro-batch in flight has its own MicroBatch (as many as the schedule keeps in flight, so
// the activation memory is the schedule's bound), so its output and its input gradient are the
// send buffers: no copies. Each action is reported to the activity log (compute: "pipeline
// forward" / "pipeline backward"; stall: the wait for a receive), so a profile shows the stage's
// timeline, and the step's compute and wait times are kept for the bubble (tierzero bench pp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "tierzero/comm/communicator.hpp"
#include "tierzero/nn/gpt.hpp"
#include "tierzero/nn/pp/pipeline_schedule.hpp"

namespace tierzero::train {

class PipelineExecutor {
 public:
  // chunks: this rank's model chunks in chunk order, each built for its virtual stage
  // (chunk c of pipeline rank s runs virtual stage c * stages + s: one chunk for gpipe and 1f1b,
  // several for interleaved); chunk_units[c]: the first unit of chunk c in the provider that
  // train() and evaluate() get (the rank's layout concatenates the chunks', see
  // nn::chunks_param_layout; empty: one chunk at 0). pipeline: the pipeline group, ranks in stage
  // order, on the model's buffers (NCCL on CUDA, MPI on the CPU); null for one stage.
  // Micro-batches of (B, T), `micro_batches` per step.
  PipelineExecutor(std::vector<nn::GPT*> chunks, std::vector<size_t> chunk_units,
                   comm::Communicator* pipeline, nn::PipelineSchedule schedule,
                   size_t micro_batches, size_t B, size_t T);
  ~PipelineExecutor();

  // Where the last train() spent its wall time: the stage's forwards and backwards (compute), the
  // receives it waited in (wait), and the rest (sends, bookkeeping). A stage's bubble is the part
  // of the pipeline's step it did not compute, 1 - compute_s / (the span until the last stage is
  // done: the trainer measures it with a barrier, since a stage's own train() returns as soon as
  // its last send is posted).
  struct StepTiming {
    double step_s = 0.0;
    double compute_s = 0.0;
    double wait_s = 0.0;
    size_t receives = 0;      // of activations and gradients
    size_t posted_ahead = 0;  // of them, posted before the action in front of theirs computed
  };

  const nn::PipelineShape& shape() const { return shape_; }
  const StepTiming& last_step() const { return timing_; }
  // Whether this rank runs the last virtual stage (the loss).
  bool holds_loss() const;
  // Micro-batches whose activations chunk c holds at once (its MicroBatches).
  size_t slots(size_t chunk = 0) const { return slots_[chunk].size(); }
  // Post receives ahead (MPI only; see the file comment). Off by default: receive at the action.
  void set_receive_ahead(bool on) { receive_ahead_ = on; }
  // Called before each compute action of train() (e.g. to set the profile's phase).
  void on_action(std::function<void(const nn::PipelineAction&)> observer) {
    observer_ = std::move(observer);
  }

  // The micro-batches each chunk of a rank keeps in flight at once under the schedule: the most
  // forwarded and not yet backwarded at any point of its actions (per chunk: its MicroBatches).
  static std::vector<size_t> in_flight_per_chunk(const nn::PipelineShape& shape);
  // Activation bytes this executor holds (its MicroBatches) plus the chunks' one shared scratch
  // (the trainer has them share it, nn::GPT::share_scratch), for (B, T)
  // of the rank's chunks (virtual stages, chunk order) with the schedule's in-flight counts;
  // what the memory tracker sees.
  static size_t activation_bytes_for(const nn::GPTConfig& config, const nn::ActivationDims& dims,
                                     const std::vector<nn::PipelineStage>& chunks,
                                     nn::PipelineSchedule schedule, size_t micro_batches,
                                     nn::Recompute checkpointing,
                                     bool external_checkpoints = false);
  // Block checkpoints the rank stores at once at most when they live in a CheckpointStore: over
  // the schedule's actions, the chunks' micro-batches in flight times their blocks (each block's
  // input, the chunk's own included).
  static size_t stored_checkpoints(const std::vector<nn::PipelineStage>& chunks,
                                   nn::PipelineSchedule schedule, size_t micro_batches);

  // One step's forward and backward of every micro-batch: tokens[i], targets[i] (host (B, T))
  // for micro-batch i; gradients accumulate grad_scale * d(mean loss of each micro-batch) into
  // the provider. Returns the mean loss over the micro-batches on the last stage, 0 elsewhere.
  double train(nn::ParamProvider& params, const std::vector<std::vector<int32_t>>& tokens,
               const std::vector<std::vector<int32_t>>& targets, float grad_scale);
  // The forward of one (B, T) batch through the pipeline; the mean loss on the last stage, 0
  // elsewhere.
  double evaluate(nn::ParamProvider& params, const int32_t* tokens, const int32_t* targets);

 private:
  struct Slot;
  Slot& slot_of(size_t chunk, size_t micro_batch);
  // Into buffer from peer; waits for `posted` instead when a receive was posted ahead into it.
  // posted: a receive posted ahead into buffer at posted_at (monotonic_seconds()), if any.
  void receive(float* buffer, int peer, int tag, bool gradient, comm::CommRequest* posted = nullptr,
               double posted_at = 0.0);
  void send(Slot& slot, const float* buffer, int peer, int tag);
  // Activations and gradients between the same two ranks, told apart by micro-batch, the
  // virtual stage they go to, and kind.
  int tag(size_t micro_batch, size_t to_virtual_stage, bool gradient) const;
  // The providers of the chunks: `params` itself for one chunk, offset views for several.
  std::vector<std::unique_ptr<nn::ParamProvider>> views(nn::ParamProvider& params) const;

  std::vector<nn::GPT*> chunks_;
  std::vector<size_t> chunk_units_;
  comm::Communicator* pipeline_;
  nn::PipelineShape shape_;
  size_t B_, T_;
  size_t stream_elems_;                                    // (S, C): one boundary tensor
  std::vector<std::vector<std::unique_ptr<Slot>>> slots_;  // per chunk
  StepTiming timing_;
  bool receive_ahead_ = false;
  std::function<void(const nn::PipelineAction&)> observer_;
};

}  // namespace tierzero::train
