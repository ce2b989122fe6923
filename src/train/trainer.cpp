// The training loop. Two parameter states share it (param_state.hpp): the one-rank fp32
// reference (LocalParams + AdamW, used when not under MPI and at stage 0; every other mode is
// compared with it), and the ZeRO path (stages 0-3, one rank or many under mpiexec), where the
// GPT runs on the partition store and the store runs the optimizer. The run is built once
// (run_setup.hpp), the step schedule is chosen once (step_schedule.hpp), and what happens around
// each step is an observer of its record (step_observers.hpp); the loop itself is a screenful.
#include "tierzero/train/trainer.hpp"

#include <cerrno>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "run_report.hpp"
#include "step_observers.hpp"
#include "step_schedule.hpp"
#include "tierzero/core/error.hpp"
#include "tierzero/core/error_report.hpp"
#include "tierzero/core/log.hpp"
#include "tierzero/core/timer.hpp"
#include "tierzero/device/host_waits.hpp"
#include "tierzero/nn/gpt_modules.hpp"
#include "tierzero/profile/rank_profiles.hpp"
#include "tierzero/train/checkpoint_save_dir.hpp"
#include "tierzero/train/config_bridges.hpp"
#include "tierzero/train/global_batch.hpp"
#include "tierzero/train/lr_schedule.hpp"
#include "tierzero/train/profiling_provider.hpp"
#include "tierzero/train/rank_agreement.hpp"
#include "tierzero/train/run_identity.hpp"
#include "tierzero/train/run_outputs.hpp"
#include "trainer_state.hpp"

namespace tierzero::train {

namespace {

// Gives the models, the parameter state and the activation checkpoints' tier (may be null) a
// device timeline for one run_loop, and takes it back however the loop ends (the timeline dies
// with it).
struct TimelineBinding {
  TimelineBinding(std::vector<nn::GPT*> models, ParamState& params,
                  zero::CheckpointTier* checkpoints, DeviceTimeline* timeline)
      : models_(std::move(models)), params_(params), checkpoints_(checkpoints) {
    for (nn::GPT* m : models_) m->set_device_timeline(timeline);
    params_.set_device_timeline(timeline);
    if (checkpoints_) checkpoints_->set_device_timeline(timeline);
  }
  ~TimelineBinding() {
    for (nn::GPT* m : models_) m->set_device_timeline(nullptr);
    params_.set_device_timeline(nullptr);
    if (checkpoints_) checkpoints_->set_device_timeline(nullptr);
  }
  TimelineBinding(const TimelineBinding&) = delete;
  TimelineBinding& operator=(const TimelineBinding&) = delete;

 private:
  std::vector<nn::GPT*> models_;
  ParamState& params_;
  zero::CheckpointTier* checkpoints_;
};

// The schedule a resumed run follows: the checkpoint's length (a different --steps only moves
// where training stops), unless tierzero.checkpoint.reset_lr_schedule; one line says which when
// they differ.
LrSchedule resumed_schedule(const TrainConfig& c, int64_t checkpoint_steps,
                            const LrSchedule& current) {
  if (checkpoint_steps <= 0 || checkpoint_steps == current.total_steps()) return current;
  const std::string theirs = std::to_string(checkpoint_steps);
  const std::string ours = std::to_string(current.total_steps());
  if (c.checkpoint.reset_lr_schedule) {
    log::info("learning-rate schedule: this run's, over " + ours +
              " steps (--reset-lr-schedule; the checkpoint's ran over " + theirs + ")");
    return current;
  }
  log::info("learning-rate schedule: the checkpoint's, over " + theirs + " steps (this run's is " +
            ours + "; training stops after step " + std::to_string(c.steps) +
            "); --reset-lr-schedule follows this run's");
  SchedulerConfig kept = c.scheduler;
  kept.total_num_steps = checkpoint_steps;
  return LrSchedule(kept, c.optimizer.lr, checkpoint_steps);
}

}  // namespace

Trainer::Trainer(TrainConfig config) : config_(std::move(config)), state_(new State) {
  log::set_level(log::level_from_name(config_.log_level));
  try {
    check_supported(config_);
  } catch (const Error& e) {
    throw SameOnEveryRankError(e);  // a function of the config alone
  }
  State& s = *state_;
  s.run = open_session(config_);
  // Before any collective that depends on them; thrown on every rank, so none waits on another.
  if (s.run.world_size > 1) require_ranks_agree(run_settings(config_), s.run.session->world());
  // After the agreement: the same config and rank count on every rank, so all throw alike.
  try {  // the batch's parts from train_batch_size, as DeepSpeed derives them
    const int64_t model_parallel =
        config_.tensor_parallel * config_.pipeline_parallel * config_.ulysses_parallel;
    if (model_parallel > 0 && s.run.world_size % model_parallel == 0)  // (else check_parallel)
      resolve_global_batch(config_, s.run.world_size / model_parallel);
  } catch (const Error& e) {
    throw SameOnEveryRankError(e);  // the config and the rank count: alike on every rank
  }
  if (s.run.rank == 0 && !config_.ignored_keys.empty()) log::warn(config_.ignored_keys_warning());
  // The configured model against the parallel layout, before anything collective: the same
  // values on every rank, so every rank fails alike (the CLI says it once, no abort). A model
  // read from a file is checked in build(): a file one rank cannot read must end the whole job.
  if (config_.load_checkpoint.empty()) {
    try {
      s.shape = plan_run_shape(config_, s.run.rank, s.run.world_size);
    } catch (const Error& e) {
      throw SameOnEveryRankError(e);
    }
  }
  if (s.run.world_size == 1) {
    build();
    return;
  }
  // As in run(): a rank that fails (the store's constructor is collective) ends the whole job.
  try {
    build();
  } catch (const Error& e) {
    comm::abort_job(user_message(e));
  }
}

void Trainer::build() {
  State& s = *state_;
  if (!config_.load_checkpoint.empty())
    s.shape = plan_run_shape(config_, s.run.rank, s.run.world_size);
  s.data = open_data(config_, s.shape);  // a bad path fails before any large allocation
  s.device = open_device(config_, s.run.session.get());
  s.device->kernels().set_matmul_precision(matmul_precision_for(config_));
  if (s.device->kind() == DeviceKind::cuda)
    log::info(std::string("products on ") + s.device->name() + ": " +
              kernels::matmul_precision_name(s.device->kernels().matmul_precision()));
  else if (config_.tf32)
    log::info("tierzero.tf32 has no effect on the CPU backend: its products are fp32");
  const auto budget = static_cast<size_t>(config_.device_memory_budget_gb * 1073741824.0);
  s.allocator = std::make_unique<DeviceAllocator>(*s.device, budget);
  s.groups = open_groups(s.shape, s.run, *s.device);
  const DType compute = compute_dtype_for(config_, s.device->kind());
  if (compute != DType::f32)
    log::info(std::string("16-bit compute: products and their activations in ") +
              dtype_name(compute) + " (tierzero.compute_dtype)");
  s.chunks = build_model_chunks(config_, s.shape, s.groups, *s.allocator, compute);
  const InitialValues initial(config_, s.shape.model, s.chunks.layout(),
                              s.shape.chunk_stages.front());
  s.params = make_param_state(config_, s.run, s.groups, s.chunks.layout(), *s.device, *s.allocator,
                              initial, compute);
  // The host budget is the node's: its ranks share it (as the store's pool does).
  const size_t local_ranks =
      s.run.session ? static_cast<size_t>(comm::node_local_size(s.run.session->world())) : 1;
  s.checkpoints = place_checkpoints(
      config_, *s.allocator, s.params->host_pool(),
      store_config_from(config_).host_budget_bytes / std::max<size_t>(local_ranks, 1),
      s.chunks.all());
}

Trainer::~Trainer() = default;

void Trainer::set_profile(const std::string& path, bool timeline) {
  profile_path_ = path;
  profile_timeline_ = timeline;
}

void Trainer::set_step_listener(std::function<bool(const StepRecord&)> listener) {
  step_listener_ = std::move(listener);
}

TrainResult Trainer::run(std::FILE* out, const std::string& metrics_path,
                         const std::string& memory_json_path) {
  // Every output is checked before the first step, on every rank, agreed (SameOnEveryRankError).
  check_run_outputs({config_.save_checkpoint, metrics_path, memory_json_path, profile_path_,
                     config_.checkpoint.save_dir},
                    run_inputs(config_), state_->run.rank, state_->run.world());
  // Under mpiexec a rank that throws must not leave the others waiting in a collective until
  // their timeout: end the whole job with the message.
  TrainResult result;
  // A --save that failed (its model rescued elsewhere, or lost) is said with any error of the
  // outputs written after it, rather than replaced by it.
  const auto after_save = [this](const Error& e) {
    return save_failure_.empty() ? user_message(e)
                                 : save_failure_ + "; after that: " + user_message(e);
  };
  if (!state_->run.session || state_->run.world_size == 1) {
    try {
      result = run_loop(out, metrics_path, memory_json_path);
    } catch (const Error& e) {
      if (save_failure_.empty()) throw;
      throw Error(after_save(e), "");
    }
  } else {
    try {
      result = run_loop(out, metrics_path, memory_json_path);
    } catch (const SameOnEveryRankError&) {
      throw;  // every rank throws it together (none is left in a collective): said once
    } catch (const Error& e) {
      comm::abort_job(after_save(e));
    }
  }
  // --save failed at the end and the model went elsewhere (or nowhere): after every other output.
  if (!save_failure_.empty())
    throw SameOnEveryRankError(Error(save_failure_, ""), state_->run.rank == 0);
  return result;
}

Trainer::MetricsFile Trainer::begin_run(std::FILE* out, const std::string& metrics_path) {
  const State& s = *state_;
  MetricsFile metrics(nullptr, &std::fclose);
  if (!metrics_path.empty() && s.run.rank == 0) {
    metrics.reset(std::fopen(metrics_path.c_str(), "w"));
    TZ_CHECK(metrics != nullptr,
             "cannot open the metrics file '" + metrics_path + "': " + std::strerror(errno),
             "check that the directory exists and is writable");
  }
  print_run_banner(out, config_, s.shape, s.chunks, *s.params, s.run.world_size,
                   nn::gpt_param_layout(s.shape.model).parameter_count(), s.device->name());
  return metrics;
}

TrainResult Trainer::run_loop(std::FILE* all_ranks_out, const std::string& metrics_path,
                              const std::string& memory_json_path) {
  State& s = *state_;
  // Progress, validation and checkpoint messages come from rank 0 only; they are global values.
  std::FILE* out = s.run.rank == 0 ? all_ranks_out : nullptr;
  comm::Communicator* world = s.run.world();
  MetricsFile metrics = begin_run(out, metrics_path);
  TrainResult result;
  result.unigram_entropy = s.data.unigram_entropy;
  result.parameter_count = nn::gpt_param_layout(s.shape.model).parameter_count();  // whole model
  result.device_name = s.device->name();
  result.rank = s.run.rank;
  result.val_loss = std::numeric_limits<double>::quiet_NaN();

  // The profile recorder, told each unit and phase through a provider wrapped around the state's.
  std::unique_ptr<profile::ProfileRecorder> recorder;
  std::unique_ptr<ProfilingProvider> profiled;
  if (!profile_path_.empty()) {
    recorder = make_recorder(config_, profile_timeline_, s.chunks.all(), s.chunks.layout(),
                             s.params->store(), s.params->grouping(), s.run.rank, s.run.world_size,
                             s.allocator->stats().budget, *s.device);
    profiled = std::make_unique<ProfilingProvider>(s.params->provider(), *recorder);
  }
  // The profile's compute as the device ran it (device_timeline.hpp). A pipeline's executor
  // times its own actions instead.
  std::unique_ptr<DeviceTimeline> timeline;
  if (recorder && config_.pipeline_parallel == 1)
    timeline = std::make_unique<DeviceTimeline>(*s.device);
  const TimelineBinding timeline_binding(s.chunks.all(), *s.params,
                                         s.checkpoints ? s.checkpoints->tier.get() : nullptr,
                                         timeline.get());
  nn::ParamProvider& step_params =
      profiled ? static_cast<nn::ParamProvider&>(*profiled) : s.params->provider();
  comm::Communicator* pp_mpi = s.groups.mesh ? &s.groups.mesh->group(comm::MeshDim::pp) : nullptr;
  const std::unique_ptr<StepSchedule> schedule =
      make_step_schedule(config_, s.chunks, s.groups.pipeline,
                         metrics_path.empty() ? nullptr : pp_mpi, profiled.get());

  LossScaler scaler(config_.fp16_scaling, config_.fp16);
  // One run saves into a directory at a time: a second one is refused here, before any step.
  const SaveDirLock save_dir_lock(config_.checkpoint.save_dir, s.run.rank, world);
  const int64_t first_step = config_.checkpoint.resume.empty() ? 0 : resume_training(scaler);
  // A --steps at or below the checkpoint's takes no step (--steps 0 exports its model): said, so
  // that a mistyped count is not mistaken for a finished run.
  if (out && first_step > 0 && first_step >= config_.steps)
    std::fprintf(out,
                 "no step to take: the checkpoint was saved after step %lld and this run stops "
                 "after step %lld (--steps, tierzero.steps)\n",
                 static_cast<long long>(first_step), static_cast<long long>(config_.steps));
  if (s.run.rank == 0 && !config_.checkpoint.save_dir.empty())
    warn_abandoned_checkpoints(config_.checkpoint.save_dir, first_step,
                               static_cast<size_t>(config_.checkpoint.keep_last));
  if (out && first_step > 0)
    std::fprintf(out, "resumed after step %lld from '%s'\n", static_cast<long long>(first_step),
                 config_.checkpoint.resume.c_str());
  // What happens around each step, in this order on every rank; checkpoints (and the stop
  // signals) last, once the step is reported.
  std::vector<std::unique_ptr<StepObserver>> observers =
      make_observers(out, std::move(metrics), metrics_path, *schedule, recorder.get());
  if (step_listener_)
    observers.push_back(std::make_unique<ListenerObserver>(step_listener_, world));
  CheckpointObserver* checkpoints = nullptr;
  if (!config_.checkpoint.save_dir.empty()) {
    auto saver = std::make_unique<CheckpointObserver>(
        out, config_.checkpoint.save_every, world,
        [this, &scaler](int64_t steps) { return save_training_checkpoint(steps, scaler); },
        config_.checkpoint.resume.empty() ? -1 : first_step);
    checkpoints = saver.get();
    observers.push_back(std::move(saver));
  } else if (!config_.save_checkpoint.empty()) {
    observers.push_back(std::make_unique<StopObserver>(out, world));
  }

  LrSchedule lr_schedule(config_.scheduler, config_.optimizer.lr, config_.steps);
  if (first_step > 0)
    lr_schedule = resumed_schedule(config_, s.resumed_lr_schedule_steps, lr_schedule);
  s.lr_schedule_steps = lr_schedule.total_steps();
  const auto accum = static_cast<double>(config_.gradient_accumulation_steps);
  int64_t steps_done = first_step;
  bool stopped = false;  // by an observer: a stop signal
  for (int64_t step = first_step; step < config_.steps && !stopped; ++step) {
    Timer timer;
    const double cpu_at_start = process_cpu_seconds();
    const size_t waits_at_start = host_waits_on_this_thread();
    if (timeline) timeline->begin_step(s.device->default_stream());  // idle since the last step
    for (const auto& o : observers) o->before_step(step + 1);
    s.params->zero_grads();
    // The schedule follows the optimizer's steps, which an fp16 step skipped on overflow does
    // not advance (as DeepSpeed skips its scheduler step); a checkpoint saves that count.
    const double lr = lr_schedule.lr(s.params->steps_taken());
    s.params->plan_step(lr, config_.gradient_clipping, scaler.scale(),
                        static_cast<size_t>(config_.gradient_accumulation_steps));
    // fp16: the gradients carry the loss scale; the parameter state divides it out.
    const auto grad_scale = static_cast<float>(scaler.scale() / accum);
    const double local_loss = schedule->forward_backward(step_params, *s.data.train, grad_scale);
    for (const auto& o : observers) o->before_optimizer();
    const StepOutcome taken = s.params->step(lr, config_.gradient_clipping, scaler.scale());
    if (taken.skipped && out)
      std::fprintf(out, "step %lld: gradient overflow at loss scale %g, step skipped\n",
                   static_cast<long long>(step + 1), scaler.scale());
    scaler.update(taken.skipped);
    const double loss = mean_over_ranks(local_loss);
    s.device->default_stream().synchronize();  // the step's end for its timer, not counted
    const size_t host_waits = host_waits_on_this_thread() - waits_at_start - 1;
    if (timeline) timeline->flush();  // may wait for its spans on other streams: not counted
    StepRecord r = step_record(step + 1, loss, lr, taken.grad_norm, timer, cpu_at_start);
    r.host_waits = host_waits;
    result.steps.push_back(r);
    for (const auto& o : observers) stopped = !o->after_step(r) || stopped;
    steps_done = step + 1;
  }
  if (checkpoints) checkpoints->finish(steps_done);
  end_run(all_ranks_out, *schedule, recorder.get(), stopped, memory_json_path, result);
  return result;
}

std::vector<std::unique_ptr<StepObserver>> Trainer::make_observers(
    std::FILE* out, MetricsFile metrics, const std::string& metrics_path, StepSchedule& schedule,
    profile::ProfileRecorder* recorder) {
  State& s = *state_;
  const auto B = static_cast<size_t>(config_.micro_batch_size);
  const auto T = static_cast<size_t>(config_.seq_len);
  std::vector<std::unique_ptr<StepObserver>> observers;
  if (recorder)
    observers.push_back(std::make_unique<ProfileObserver>(
        *recorder, B * T * static_cast<size_t>(config_.gradient_accumulation_steps)));
  observers.push_back(std::make_unique<ProgressObserver>(out, config_.steps));
  // Every rank is given the path: all take part in the pipeline bubble's sum.
  if (!metrics_path.empty())
    observers.push_back(std::make_unique<MetricsObserver>(
        metrics_path, std::move(metrics), schedule, s.chunks.all(),
        s.groups.mesh ? &s.groups.mesh->group(comm::MeshDim::pp) : nullptr));
  if (s.data.val && config_.val_batches > 0)
    observers.push_back(
        std::make_unique<ValidationObserver>(out, config_.val_every, config_.steps,
                                             [this, &schedule] { return validate_now(schedule); }));
  return observers;
}

double Trainer::validate_now(StepSchedule& schedule, size_t* evaluated) {
  State& s = *state_;
  return validate(schedule, *s.params, *s.data.val, static_cast<size_t>(config_.val_batches),
                  static_cast<size_t>(config_.micro_batch_size),
                  static_cast<size_t>(config_.seq_len), s.shape.dp_rank, s.shape.dp_size,
                  s.run.world(), evaluated);
}

double Trainer::mean_over_ranks(double loss) const {
  const State& s = *state_;
  comm::Communicator* world = s.run.world();
  if (!world) return loss;
  // Every rank's loss is the mean over its own tokens, and every rank has as many: the global
  // loss is the mean over ranks (a tensor-parallel group's ranks hold the same one; only the
  // last pipeline stage has one, the others add 0).
  float sum = static_cast<float>(loss);
  group_sum(*world, &sum, 1);
  return static_cast<double>(sum) /
         static_cast<double>(s.run.world_size / static_cast<int>(config_.pipeline_parallel));
}

StepRecord Trainer::step_record(int64_t step, double loss, double lr, double grad_norm,
                                const Timer& timer, double cpu_at_start) const {
  const State& s = *state_;
  StepRecord r;
  r.step = step;
  r.loss = loss;
  r.lr = lr;
  r.grad_norm = grad_norm;
  r.seconds = timer.seconds();
  r.cpu_seconds = std::max(0.0, process_cpu_seconds() - cpu_at_start);
  const auto tokens = static_cast<size_t>(config_.micro_batch_size * config_.seq_len *
                                          config_.gradient_accumulation_steps) *
                      static_cast<size_t>(s.shape.dp_size);
  r.tokens_per_second = static_cast<double>(tokens) / r.seconds;
  s.params->record_counters(r);
  return r;
}

void Trainer::end_run(std::FILE* all_ranks_out, StepSchedule& schedule,
                      profile::ProfileRecorder* recorder, bool stopped,
                      const std::string& memory_json_path, TrainResult& result) {
  State& s = *state_;
  std::FILE* out = s.run.rank == 0 ? all_ranks_out : nullptr;
  if (s.data.val && config_.val_batches > 0 && !stopped) {
    result.val_loss = validate_now(schedule, &result.val_batches);
    // One write for the whole line: other ranks' output may share the terminal.
    char line[160];
    if (std::isfinite(s.data.unigram_entropy))
      std::snprintf(line, sizeof line, "val loss %.4f (unigram entropy of the corpus: %.4f nats)\n",
                    result.val_loss, s.data.unigram_entropy);
    else
      std::snprintf(line, sizeof line, "val loss %.4f\n", result.val_loss);
    if (out) std::fputs(line, out);
  }
  if (!config_.save_checkpoint.empty()) {
    save_failure_ = save_or_rescue(
        config_.save_checkpoint, config_.checkpoint.save_dir, s.run.rank, s.run.world(),
        [&](const std::string& path) { return save_model_streamed(path); });
    // A failure is reported once, as the run's error when it ends (run()).
    if (out && save_failure_.empty())
      std::fprintf(out, "saved checkpoint '%s'\n", config_.save_checkpoint.c_str());
  }
  if (!memory_json_path.empty())
    write_memory_json(memory_json_path, config_, schedule, s.chunks, s.run.rank, s.run.world_size);
  if (recorder) {
    // Every rank has a recorder (each is given the path), so all take part in the broadcast.
    profile::RunInfo identity = recorder->profile().run;
    identity.run_id = shared_run_id(s.run.world());
    identity.host = host_name();
    recorder->set_run_info(std::move(identity));
    const std::string file = profile::rank_profile_path(profile_path_, s.run.rank);
    recorder->write_json(file);
    if (out) std::fprintf(out, "wrote profile '%s'\n", file.c_str());
  }
  print_memory_summaries(all_ranks_out, out, s.run.rank, s.run.world_size, s.run.world());
}

}  // namespace tierzero::train
