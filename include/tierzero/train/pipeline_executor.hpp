// PipelineExecutor: runs one pipeline stage's part of a training step (or of an evaluation) in
// the order a PipelineSchedule gives, with the activations and their gradients sent point to
// point to the neighbouring stages: a receive blocks right before the action that needs it, a
// send goes out asynchronously right after the action that produced it and is waited for only
// before its buffer is reused. Each micro-batch in flight has its own MicroBatch (as many as the
// schedule keeps in flight, so the activation memory is the schedule's bound), so its output
// and its input gradient are the send buffers: no copies.
// Each action is reported to the activity log (compute: "pipeline forward" / "pipeline
// backward"; stall: the wait in a receive), so a profile shows the stage's timeline, and the
// step's compute and wait times are kept for the bubble (tierzero bench pp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "tierzero/comm/communicator.hpp"
#include "tierzero/nn/gpt.hpp"
#include "tierzero/nn/pipeline_schedule.hpp"

namespace tierzero::train {

class PipelineExecutor {
 public:
  // model: this rank's stage (v = 1; model.stage() places it). pipeline: the pipeline group,
  // ranks in stage order, on the model's buffers (NCCL on CUDA, MPI on the CPU); null for one
  // stage. Micro-batches of (B, T), `micro_batches` per step.
  PipelineExecutor(nn::GPT& model, comm::Communicator* pipeline, nn::PipelineSchedule schedule,
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
  };

  const nn::PipelineShape& shape() const { return shape_; }
  const StepTiming& last_step() const { return timing_; }
  // Called before each compute action of train() (e.g. to set the profile's phase).
  void on_action(std::function<void(const nn::PipelineAction&)> observer) {
    observer_ = std::move(observer);
  }
  size_t slots() const { return slots_.size(); }  // micro-batches' activations held
  // Activation bytes this executor holds (its MicroBatches) plus the model's scratch, for (B, T)
  // of this stage with the schedule's in-flight bound; what the memory tracker sees.
  static size_t activation_bytes_for(const nn::GPTConfig& config, const nn::ActivationDims& dims,
                                     const nn::PipelineStage& stage, nn::PipelineSchedule schedule,
                                     size_t micro_batches, bool checkpointing);

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
  Slot& slot_of(size_t micro_batch);
  void receive(float* buffer, int peer, int tag, bool gradient);
  void send(Slot& slot, const float* buffer, int peer, int tag);
  int tag(size_t micro_batch, bool gradient) const;

  nn::GPT& model_;
  comm::Communicator* pipeline_;
  nn::PipelineShape shape_;
  size_t B_, T_;
  size_t stream_elems_;  // (S, C): one boundary tensor
  std::vector<std::unique_ptr<Slot>> slots_;
  StepTiming timing_;
  std::function<void(const nn::PipelineAction&)> observer_;
};

}  // namespace tierzero::train
