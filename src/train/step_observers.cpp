// The step observers (step_observers.hpp) and validation.
#include "step_observers.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "tierzero/core/error.hpp"
#include "tierzero/core/memory_tracker.hpp"
#include "tierzero/train/progress.hpp"
#include "tierzero/train/step_metrics.hpp"

namespace tierzero::train {

void group_sum(comm::Communicator& group, float* values, size_t count) {
  std::vector<float> sum(count);  // (count)
  group.all_reduce(values, sum.data(), count, DType::f32, comm::ReduceOp::sum);
  std::copy(sum.begin(), sum.end(), values);
}

double validate(StepSchedule& schedule, ParamState& params, DataLoader& loader, size_t batches,
                size_t B, size_t T, int rank, int world_size, comm::Communicator* group,
                size_t* evaluated) {
  params.begin_eval();                      // not in the training trace
  std::vector<int32_t> x(B * T), y(B * T);  // (B, T) each
  loader.reset();
  const auto w = static_cast<size_t>(world_size);
  batches = std::min(batches, loader.batches_per_epoch() * w);  // alike on every rank
  if (evaluated) *evaluated = batches;
  const size_t rounds = (batches + w - 1) / w;
  // Under pipeline parallelism only the last stage has a loss; the others count nothing.
  const bool has_loss = schedule.holds_loss();
  double sum = 0.0;
  size_t counted = 0;
  for (size_t k = 0; k < rounds; ++k) {
    loader.next_batch(x.data(), y.data());
    const double loss = schedule.evaluate(params.provider(), x.data(), y.data());
    if (has_loss && static_cast<size_t>(rank) + k * w < batches) {
      sum += loss;
      ++counted;
    }
  }
  if (!group) return sum / static_cast<double>(batches);
  float totals[2] = {static_cast<float>(sum), static_cast<float>(counted)};
  group_sum(*group, totals, 2);
  return static_cast<double>(totals[0]) / static_cast<double>(totals[1]);
}

bool ProgressObserver::after_step(const StepRecord& r) {
  print_step_line(out_, r, total_, MemoryTracker::global());
  return true;
}

MetricsObserver::MetricsObserver(std::string path, File file, const StepSchedule& schedule,
                                 std::vector<nn::GPT*> chunks, comm::Communicator* pipeline_group)
    : path_(std::move(path)),
      file_(std::move(file)),
      schedule_(schedule),
      chunks_(std::move(chunks)),
      pipeline_group_(pipeline_group) {}

bool MetricsObserver::after_step(const StepRecord& r) {
  // Pipeline: the stages' bubble this step (the part of the pipeline's span each stage did not
  // compute), averaged over the stages, and stage 0's times.
  const PipelineExecutor* pipe = schedule_.pipeline();
  const double span_s = schedule_.span_s();
  float bubble[2] = {0.0f, 0.0f};  // (sum of the stages' bubble fractions, stages)
  if (pipe) {
    const PipelineExecutor::StepTiming& t = pipe->last_step();
    bubble[0] = span_s > 0.0 ? static_cast<float>(1.0 - t.compute_s / span_s) : 0.0f;
    bubble[1] = 1.0f;
    group_sum(*pipeline_group_, bubble, 2);
  }
  if (!file_) return true;
  // The tensor-parallel collectives' payload this step (rank 0's; every tp rank moves as
  // much), all zero without tensor parallelism.
  nn::TensorParallelTraffic tp{};
  for (const nn::GPT* m : chunks_) {
    const nn::TensorParallelTraffic t = m->tensor_parallel_traffic();
    tp.all_reduce_bytes += t.all_reduce_bytes;
    tp.all_gather_bytes += t.all_gather_bytes;
    tp.reduce_scatter_bytes += t.reduce_scatter_bytes;
    tp.calls += t.calls;
  }
  // Valid JSON whatever the values: a non-finite loss or gradient norm is written as null.
  const nn::GPT& model = *chunks_.front();
  nlohmann::ordered_json line = step_metrics_json(r, tp, model.ulysses_traffic().all_to_all_bytes,
                                                  model.ulysses_traffic().calls);
  if (pipe) {
    // Stage 0's times (this rank's) and the bubble averaged over the stages.
    const PipelineExecutor::StepTiming& t = pipe->last_step();
    line["pp_bubble"] = static_cast<double>(bubble[0] / bubble[1]);
    line["pp_step_ms"] = span_s * 1e3;
    line["pp_compute_ms"] = t.compute_s * 1e3;
    line["pp_wait_ms"] = t.wait_s * 1e3;
    line["pp_receives"] = t.receives;
    line["pp_posted_ahead"] = t.posted_ahead;
  }
  const std::string text = line.dump() + "\n";
  TZ_CHECK(std::fputs(text.c_str(), file_.get()) >= 0 && std::fflush(file_.get()) == 0,
           "writing the metrics file '" + path_ + "' failed: " + std::strerror(errno),
           "check free disk space");
  return true;
}

bool ValidationObserver::after_step(const StepRecord& r) {
  if (every_ <= 0 || r.step % every_ != 0 || r.step >= total_) return true;
  const double v = validate_();
  if (out_) std::fprintf(out_, "val loss %.4f at step %lld\n", v, static_cast<long long>(r.step));
  return true;
}

bool ListenerObserver::after_step(const StepRecord& r) {
  float stop = listener_(r) ? 0.0f : 1.0f;
  if (group_) group_sum(*group_, &stop, 1);
  return stop == 0.0f;
}

namespace {

// Collective: whether a stop signal reached any rank, so that every rank stops after the same
// step.
bool stop_requested_on_any_rank(comm::Communicator* group) {
  float stop = StopSignals::requested() ? 1.0f : 0.0f;
  if (group) group_sum(*group, &stop, 1);
  return stop > 0.0f;
}

}  // namespace

bool StopObserver::after_step(const StepRecord& r) {
  if (!stop_requested_on_any_rank(group_)) return true;
  if (out_)
    std::fprintf(out_, "stopping after step %lld on a stop signal; the model is written (--save)\n",
                 static_cast<long long>(r.step));
  return false;
}

CheckpointObserver::CheckpointObserver(std::FILE* out, int64_t every, comm::Communicator* group,
                                       std::function<std::string(int64_t)> save, int64_t resumed_at)
    : out_(out), every_(every), group_(group), save_(std::move(save)), saved_at_(resumed_at) {}

bool CheckpointObserver::after_step(const StepRecord& r) {
  const int64_t steps_done = r.step;
  const bool stop = stop_requested_on_any_rank(group_);
  if (stop || (every_ > 0 && steps_done % every_ == 0)) {
    const std::string where = save_(steps_done);
    saved_at_ = steps_done;
    if (out_) std::fprintf(out_, "saved training checkpoint '%s'\n", where.c_str());
  }
  if (stop) {
    stopped_ = true;
    if (out_)
      std::fprintf(out_, "stopping after step %lld on a stop signal (the checkpoint resumes it)\n",
                   static_cast<long long>(steps_done));
    return false;
  }
  return true;
}

void CheckpointObserver::finish(int64_t steps_done) {
  if (saved_at_ == steps_done) return;
  const std::string where = save_(steps_done);
  if (out_) std::fprintf(out_, "saved training checkpoint '%s'\n", where.c_str());
}

}  // namespace tierzero::train
