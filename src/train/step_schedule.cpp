// The two step schedules (step_schedule.hpp): gradient accumulation over micro-batches on the
// whole model, and the pipeline's.
#include "step_schedule.hpp"

#include <algorithm>
#include <cstdlib>
#include <exception>
#include <string>
#include <utility>
#include <vector>

#include "tierzero/core/error.hpp"
#include "tierzero/core/log.hpp"
#include "tierzero/core/timer.hpp"

namespace tierzero::train {

namespace {

// Page-aligned host memory the device copies from and into without the host waiting, page-locked
// while it lives: from pageable memory CUDA may first synchronize the stream, and into it the copy
// returns only once it has landed. Whole pages, so no other registration shares one.
template <typename T>
class PageLocked {
 public:
  PageLocked(Device& device, size_t n) : device_(device) {
    constexpr size_t kPage = 4096;
    const size_t bytes = (std::max<size_t>(n, 1) * sizeof(T) + kPage - 1) / kPage * kPage;
    data_ = static_cast<T*>(std::aligned_alloc(kPage, bytes));
    TZ_CHECK(data_ != nullptr,
             "out of host memory for " + std::to_string(bytes) + " bytes of micro-batch buffers",
             "lower gradient_accumulation_steps or the micro-batch");
    try {
      device_.register_host(data_, bytes);
    } catch (...) {
      std::free(data_);
      throw;
    }
  }
  ~PageLocked() {
    try {
      device_.unregister_host(data_);
    } catch (const std::exception& e) {
      log::warn(std::string("micro-batch buffer: ") + e.what());
    }
    std::free(data_);
  }
  PageLocked(const PageLocked&) = delete;
  PageLocked& operator=(const PageLocked&) = delete;
  T* data() { return data_; }

 private:
  Device& device_;
  T* data_ = nullptr;
};

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
        x_(model.device(), micro_batches * B * T),
        y_(model.device(), micro_batches * B * T),
        losses_(model.device(), micro_batches * B * T) {}

  // The losses are read once, after the last micro-batch: one host wait per step, not one per
  // micro-batch (each drained the device's queue before the next forward was issued). The same
  // means, summed in the same order. Each micro-batch has its own slot of inputs and losses, so
  // none is overwritten before its copy has run; the step's wait covers them all.
  double forward_backward(nn::ParamProvider& params, DataLoader& loader,
                          float grad_scale) override {
    reset_traffic({&model_});
    const size_t n = B_ * T_;  // a slot; under Ulysses this rank's losses fill part of it
    std::vector<size_t> counts(micro_batches_);
    for (size_t micro = 0; micro < micro_batches_; ++micro) {
      int32_t* x = x_.data() + micro * n;
      int32_t* y = y_.data() + micro * n;
      loader.next_batch(x, y);
      if (profiled_) profiled_->begin_pass(profile::Phase::forward);
      counts[micro] = model_.forward_backward_queued(params, x, y, B_, T_, grad_scale,
                                                     losses_.data() + micro * n);
    }
    model_.device().default_stream().synchronize();
    double loss = 0.0;
    for (size_t micro = 0; micro < micro_batches_; ++micro)
      loss += static_cast<double>(nn::GPT::mean_loss(losses_.data() + micro * n, counts[micro]));
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
  PageLocked<int32_t> x_, y_;  // (micro_batches, B, T) inputs and targets
  PageLocked<float> losses_;   // (micro_batches, B, T) per-token losses
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
