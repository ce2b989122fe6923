// PipelineExecutor: a stage's schedule actions with their point-to-point transfers.
#include "tierzero/train/pipeline_executor.hpp"

#include <algorithm>
#include <string>

#include "tierzero/core/activity_log.hpp"
#include "tierzero/core/error.hpp"
#include "tierzero/core/timer.hpp"

namespace tierzero::train {

struct PipelineExecutor::Slot {
  nn::MicroBatch mb;
  size_t micro_batch = SIZE_MAX;           // the one it holds now
  std::vector<comm::CommRequest> pending;  // sends from its buffers
  void wait_sends() {
    for (comm::CommRequest& r : pending) r.wait();
    pending.clear();
  }
};

namespace {

nn::PipelineShape shape_of(const nn::PipelineStage& stage, nn::PipelineSchedule schedule,
                           size_t micro_batches) {
  nn::PipelineShape s;
  s.stages = stage.stages;
  s.stage = stage.stage;
  s.micro_batches = micro_batches;
  s.schedule = schedule;
  nn::validate(s);
  return s;
}

}  // namespace

PipelineExecutor::PipelineExecutor(nn::GPT& model, comm::Communicator* pipeline,
                                   nn::PipelineSchedule schedule, size_t micro_batches, size_t B,
                                   size_t T)
    : model_(model),
      pipeline_(pipeline),
      shape_(shape_of(model.stage(), schedule, micro_batches)),
      B_(B),
      T_(T) {
  TZ_CHECK(shape_.stages == 1 ||
               (pipeline_ != nullptr && static_cast<size_t>(pipeline_->size()) == shape_.stages &&
                static_cast<size_t>(pipeline_->rank()) == shape_.stage),
           "the pipeline group does not match " + model.stage().str(),
           "internal error: the group's ranks are the stages in order");
  const nn::ActivationDims d = model.dims(B, T);
  stream_elems_ = d.stream_tokens * d.channels;
  const size_t n = std::min(nn::max_in_flight(shape_), micro_batches);
  for (size_t i = 0; i < n; ++i)
    slots_.push_back(std::make_unique<Slot>(Slot{model.make_micro_batch(B, T), SIZE_MAX, {}}));
}

PipelineExecutor::~PipelineExecutor() {
  for (auto& s : slots_) s->pending.clear();  // a CommRequest waits (quietly) when destroyed
}

size_t PipelineExecutor::activation_bytes_for(const nn::GPTConfig& config,
                                              const nn::ActivationDims& dims,
                                              const nn::PipelineStage& stage,
                                              nn::PipelineSchedule schedule, size_t micro_batches,
                                              bool checkpointing) {
  const size_t n =
      std::min(nn::max_in_flight(shape_of(stage, schedule, micro_batches)), micro_batches);
  return n * nn::GPT::micro_batch_bytes_for(config, dims, stage, checkpointing) +
         nn::ModelScratch::bytes_for(dims, checkpointing);
}

PipelineExecutor::Slot& PipelineExecutor::slot_of(size_t micro_batch) {
  return *slots_[micro_batch % slots_.size()];
}

int PipelineExecutor::tag(size_t micro_batch, bool gradient) const {
  // Activations and gradients between the same two ranks, told apart by micro-batch and kind.
  return static_cast<int>((micro_batch % 16384) * 2 + (gradient ? 1 : 0));
}

void PipelineExecutor::receive(float* buffer, int peer, int tag, bool gradient) {
  const double t0 = monotonic_seconds();
  pipeline_->recv(buffer, stream_elems_, DType::f32, peer, tag);
  const double t1 = monotonic_seconds();
  timing_.wait_s += t1 - t0;
  ActivityLog::global().record(Track::stall,
                               gradient ? "wait pipeline gradient" : "wait pipeline activation", t0,
                               t1, stream_elems_ * sizeof(float));
}

void PipelineExecutor::send(Slot& slot, const float* buffer, int peer, int tag) {
  // The model's work that produced the buffer is finished: the CPU kernels return done, and on
  // CUDA the stream is synchronized first (the send reads the buffer on the group's stream).
  model_.sync();
  slot.pending.push_back(pipeline_->send_async(buffer, stream_elems_, DType::f32, peer, tag));
}

double PipelineExecutor::train(nn::ParamProvider& params,
                               const std::vector<std::vector<int32_t>>& tokens,
                               const std::vector<std::vector<int32_t>>& targets, float grad_scale) {
  TZ_CHECK(tokens.size() == shape_.micro_batches && targets.size() == shape_.micro_batches,
           "pipeline step got " + std::to_string(tokens.size()) + " micro-batches, expected " +
               std::to_string(shape_.micro_batches),
           "internal error");
  const bool first = shape_.stage == 0, last = shape_.stage + 1 == shape_.stages;
  const int prev = static_cast<int>(shape_.stage) - 1, next = static_cast<int>(shape_.stage) + 1;
  timing_ = {};
  const double step_start = monotonic_seconds();
  // The compute of an action: from after its receive to before its send (the model's work
  // synchronized, so on CUDA the kernels are inside).
  double compute_start = 0.0;
  const auto begin_compute = [&](const nn::PipelineAction& a) {
    if (observer_) observer_(a);
    compute_start = monotonic_seconds();
  };
  const auto end_compute = [&](const char* name) {
    model_.sync();
    const double t = monotonic_seconds();
    timing_.compute_s += t - compute_start;
    ActivityLog::global().record(Track::compute, name, compute_start, t);
  };
  double loss = 0.0;
  for (const nn::PipelineAction& a : nn::pipeline_actions(shape_)) {
    Slot& slot = slot_of(a.micro_batch);
    nn::MicroBatch& mb = slot.mb;
    if (a.kind == nn::PipelineAction::Kind::forward) {
      slot.wait_sends();  // its buffers are about to be overwritten
      slot.micro_batch = a.micro_batch;
      if (!first) receive(mb.stage_input(), prev, tag(a.micro_batch, false), false);
      begin_compute(a);
      model_.forward(mb, params, tokens[a.micro_batch].data(), targets[a.micro_batch].data());
      end_compute("pipeline forward");
      if (!last) send(slot, mb.stage_output(), next, tag(a.micro_batch, false));
    } else {
      TZ_CHECK(slot.micro_batch == a.micro_batch,
               "pipeline micro-batch " + std::to_string(a.micro_batch) +
                   "'s activations were overwritten before its backward",
               "internal error: the schedule keeps more micro-batches in flight than its bound");
      if (!last) {
        slot.wait_sends();  // the output went out; its gradient comes into dresidual
        receive(mb.dresidual(), next, tag(a.micro_batch, true), true);
      }
      begin_compute(a);
      model_.backward(mb, params, grad_scale);
      if (last) loss += static_cast<double>(model_.loss(mb));
      end_compute("pipeline backward");
      if (!first) send(slot, mb.dresidual(), prev, tag(a.micro_batch, true));
    }
  }
  for (auto& s : slots_) s->wait_sends();
  timing_.step_s = monotonic_seconds() - step_start;
  return last ? loss / static_cast<double>(shape_.micro_batches) : 0.0;
}

double PipelineExecutor::evaluate(nn::ParamProvider& params, const int32_t* tokens,
                                  const int32_t* targets) {
  const bool first = shape_.stage == 0, last = shape_.stage + 1 == shape_.stages;
  Slot& slot = *slots_[0];
  slot.wait_sends();
  slot.micro_batch = SIZE_MAX;
  nn::MicroBatch& mb = slot.mb;
  if (!first) receive(mb.stage_input(), static_cast<int>(shape_.stage) - 1, tag(0, false), false);
  model_.forward(mb, params, tokens, targets);
  if (!last) {
    send(slot, mb.stage_output(), static_cast<int>(shape_.stage) + 1, tag(0, false));
    slot.wait_sends();
    return 0.0;
  }
  return targets ? static_cast<double>(model_.loss(mb)) : 0.0;
}

}  // namespace tierzero::train
