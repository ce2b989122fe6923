// StepSchedule: how one optimizer step's micro-batches run through the rank's model, chosen once
// for the run, as Megatron's get_forward_backward_func chooses: one after another on the whole
// model (gradient accumulation), or through the pipeline's stages in the schedule's order
// (PipelineExecutor). The loop calls forward_backward once a step; the model's forward and
// backward know nothing of it. Private to src/train.
#pragma once

#include <cstdint>
#include <memory>

#include "run_setup.hpp"
#include "tierzero/comm/communicator.hpp"
#include "tierzero/nn/param_provider.hpp"
#include "tierzero/train/data_loader.hpp"
#include "tierzero/train/pipeline_executor.hpp"
#include "tierzero/train/profiling_provider.hpp"

namespace tierzero::train {

class StepSchedule {
 public:
  virtual ~StepSchedule() = default;
  // Reads the step's micro-batches (gradient_accumulation_steps of them) from `loader` and runs
  // their forward and backward passes; the gradients accumulate grad_scale * d(mean loss of each
  // micro-batch) into `params`. Returns this rank's loss: the mean over the micro-batches (under
  // pipeline parallelism the last stage's, 0 elsewhere).
  virtual double forward_backward(nn::ParamProvider& params, DataLoader& loader,
                                  float grad_scale) = 0;
  // The forward of one (B, T) batch; the mean loss where holds_loss().
  virtual double evaluate(nn::ParamProvider& params, const int32_t* tokens,
                          const int32_t* targets) = 0;
  // Whether this rank computes the loss (every rank but the pipeline's non-last stages).
  virtual bool holds_loss() const = 0;
  // The pipeline (null without one) and its last step's span, start to the last stage's end
  // (measured only with a span barrier).
  virtual const PipelineExecutor* pipeline() const { return nullptr; }
  virtual double span_s() const { return 0.0; }
};

// pipeline_group: the pipeline's (NCCL on CUDA); span_barrier: the group whose barrier ends a
// pipeline step when its span is measured (null: not measured); profiled: told where each forward
// begins (null: no profile). Every chunk's tensor-parallel and Ulysses traffic counters restart
// at each step.
std::unique_ptr<StepSchedule> make_step_schedule(const TrainConfig& c, const ModelChunks& chunks,
                                                 comm::Communicator* pipeline_group,
                                                 comm::Communicator* span_barrier,
                                                 ProfilingProvider* profiled);

}  // namespace tierzero::train
