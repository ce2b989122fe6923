// The two step schedules (step_schedule.hpp): gradient accumulation over micro-batches on the
// whole model, and the pipeline's.
#include "step_schedule.hpp"

#include <utility>
#include <vector>

#include "tierzero/core/timer.hpp"

namespace tierzero::train {

namespace {

void reset_traffic(const std::vector<nn::GPT*>& chunks) {
  for (nn::GPT* m : chunks) {
    m->reset_tensor_parallel_traffic();
    m->reset_ulysses_traffic();
  }
}

// Micro-batch after micro-batch through the whole model, the gradients accumulating.
class MicroBatchSchedule final : public StepSchedule {
 public:
  MicroBatchSchedule(nn::GPT& model, size_t micro_batches, size_t B, size_t T,
                     ProfilingProvider* profiled)
      : model_(model),
        micro_batches_(micro_batches),
        B_(B),
        T_(T),
        profiled_(profiled),
        x_(B * T),
        y_(B * T) {}

  double forward_backward(nn::ParamProvider& params, DataLoader& loader,
                          float grad_scale) override {
    reset_traffic({&model_});
    double loss = 0.0;
    for (size_t micro = 0; micro < micro_batches_; ++micro) {
      loader.next_batch(x_.data(), y_.data());
      if (profiled_) profiled_->begin_pass(profile::Phase::forward);
      loss += static_cast<double>(
          model_.forward_backward(params, x_.data(), y_.data(), B_, T_, grad_scale));
    }
    return loss / static_cast<double>(micro_batches_);
  }
  double evaluate(nn::ParamProvider& params, const int32_t* tokens,
                  const int32_t* targets) override {
    return static_cast<double>(model_.evaluate(params, tokens, targets, B_, T_));
  }
  bool holds_loss() const override { return model_.stage().last(); }

 private:
  nn::GPT& model_;
  size_t micro_batches_, B_, T_;
  ProfilingProvider* profiled_;
  std::vector<int32_t> x_, y_;  // (B, T) inputs and targets
};

// The stage's micro-batches in the pipeline schedule's order, with the transfers between stages.
class PipelineStepSchedule final : public StepSchedule {
 public:
  PipelineStepSchedule(const TrainConfig& c, const ModelChunks& chunks,
                       comm::Communicator* pipeline_group, comm::Communicator* span_barrier,
                       ProfilingProvider* profiled)
      : chunks_(chunks.all()),
        pipe_(chunks_, chunks.chunk_units, pipeline_group,
              nn::pipeline_schedule_from_name(c.pipeline_schedule),
              static_cast<size_t>(c.gradient_accumulation_steps),
              static_cast<size_t>(c.micro_batch_size), static_cast<size_t>(c.seq_len)),
        span_barrier_(span_barrier),
        profiled_(profiled),
        xs_(static_cast<size_t>(c.gradient_accumulation_steps),
            std::vector<int32_t>(static_cast<size_t>(c.micro_batch_size * c.seq_len))),
        ys_(xs_) {
    pipe_.set_receive_ahead(c.pipeline_receive_ahead);
    if (profiled_)
      pipe_.on_action([profiled](const nn::PipelineAction& a) {
        profiled->begin_pass(a.kind == nn::PipelineAction::Kind::forward
                                 ? profile::Phase::forward
                                 : profile::Phase::backward);
      });
  }

  double forward_backward(nn::ParamProvider& params, DataLoader& loader,
                          float grad_scale) override {
    reset_traffic(chunks_);
    for (size_t micro = 0; micro < xs_.size(); ++micro)
      loader.next_batch(xs_[micro].data(), ys_[micro].data());
    if (profiled_) profiled_->begin_pass(profile::Phase::forward);
    const double start = monotonic_seconds();
    const double loss = pipe_.train(params, xs_, ys_, grad_scale);  // the last stage's
    if (span_barrier_) {
      // The pipeline's step ends when its last stage is done (the first stage's drain ends
      // it, not this stage's last send): a barrier, only when the bubble is measured.
      span_barrier_->barrier();
      span_s_ = monotonic_seconds() - start;
    }
    return loss;
  }
  double evaluate(nn::ParamProvider& params, const int32_t* tokens,
                  const int32_t* targets) override {
    return pipe_.evaluate(params, tokens, targets);
  }
  bool holds_loss() const override { return pipe_.holds_loss(); }
  const PipelineExecutor* pipeline() const override { return &pipe_; }
  double span_s() const override { return span_s_; }

 private:
  std::vector<nn::GPT*> chunks_;
  PipelineExecutor pipe_;
  comm::Communicator* span_barrier_;
  ProfilingProvider* profiled_;
  std::vector<std::vector<int32_t>> xs_, ys_;  // (micro-batches, B, T) inputs and targets
  double span_s_ = 0.0;
};

}  // namespace

std::unique_ptr<StepSchedule> make_step_schedule(const TrainConfig& c, const ModelChunks& chunks,
                                                 comm::Communicator* pipeline_group,
                                                 comm::Communicator* span_barrier,
                                                 ProfilingProvider* profiled) {
  if (c.pipeline_parallel > 1)
    return std::make_unique<PipelineStepSchedule>(c, chunks, pipeline_group, span_barrier,
                                                  profiled);
  return std::make_unique<MicroBatchSchedule>(
      *chunks.model, static_cast<size_t>(c.gradient_accumulation_steps),
      static_cast<size_t>(c.micro_batch_size), static_cast<size_t>(c.seq_len), profiled);
}

}  // namespace tierzero::train
