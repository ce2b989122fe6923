// Step observers: what happens around each training step besides the step itself, one topic
// each, every one taking the step's record: the profile's step bounds and phases, the progress
// line, the --metrics line, validation every val_every steps, and training checkpoints with the
// stop signals. The loop calls them in the order given; collectives among them (the pipeline's
// bubble, validation, the stop vote, checkpoints) run on every rank in that order. Private to
// src/train.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "param_state.hpp"
#include "step_schedule.hpp"
#include "tierzero/profile/profile_recorder.hpp"
#include "tierzero/train/step_record.hpp"
#include "tierzero/train/training_checkpoint.hpp"

namespace tierzero::train {

class StepObserver {
 public:
  virtual ~StepObserver() = default;
  virtual void before_step(int64_t /*step, 1-based*/) {}
  virtual void before_optimizer() {}
  // After the step's record is complete; false: the run stops after this step.
  virtual bool after_step(const StepRecord& r) = 0;
};

// The sum over the group of a few per-rank values (the group reduces f32).
void group_sum(comm::Communicator& group, float* values, size_t count);

// Mean loss over `batches` validation batches. With a group, data-parallel replica r of w
// evaluates the batches r, r + w, ... (its loader's stride) and the mean is all-reduced over the
// whole world (a tensor-parallel group's ranks count their common batches alike, which the mean
// divides out); every rank runs the same number of evaluations (surplus ones are not counted)
// because each one gathers parameters at stage 3 and runs the tensor-parallel collectives.
// At most the batches the data holds are evaluated (past them the loader wraps, and the mean
// would count batches twice): *evaluated, if given, receives how many were.
double validate(StepSchedule& schedule, ParamState& params, DataLoader& loader, size_t batches,
                size_t B, size_t T, int rank, int world_size, comm::Communicator* group,
                size_t* evaluated = nullptr);

// The profile's step bounds and the optimizer phase; every rank records its own.
class ProfileObserver final : public StepObserver {
 public:
  ProfileObserver(profile::ProfileRecorder& recorder, size_t tokens_per_step)
      : recorder_(recorder), tokens_(tokens_per_step) {}
  void before_step(int64_t step) override { recorder_.begin_step(step); }
  void before_optimizer() override {
    recorder_.set_phase(profile::Phase::optimizer);
    recorder_.set_unit(-1);
  }
  bool after_step(const StepRecord& r) override {
    recorder_.end_step(profile_step_counters(r, tokens_));
    return true;
  }

 private:
  profile::ProfileRecorder& recorder_;
  size_t tokens_;  // of this rank's replica
};

// One progress line per step (rank 0's `out`; null: silent).
class ProgressObserver final : public StepObserver {
 public:
  ProgressObserver(std::FILE* out, int64_t total_steps) : out_(out), total_(total_steps) {}
  bool after_step(const StepRecord& r) override;

 private:
  std::FILE* out_;
  int64_t total_;
};

// One JSON line per step into the --metrics file (written by rank 0; every rank is given the
// path, so all take part in the pipeline bubble's sum over the stages).
class MetricsObserver final : public StepObserver {
 public:
  using File = std::unique_ptr<std::FILE, int (*)(std::FILE*)>;
  // `file`: opened by the trainer at start-up on rank 0 (null on the other ranks).
  MetricsObserver(std::string path, File file, const StepSchedule& schedule,
                  std::vector<nn::GPT*> chunks, comm::Communicator* pipeline_group);
  bool after_step(const StepRecord& r) override;

 private:
  std::string path_;
  File file_;
  const StepSchedule& schedule_;
  std::vector<nn::GPT*> chunks_;
  comm::Communicator* pipeline_group_;  // the bubble's sum (MPI)
};

// Validation every val_every steps (not after the last: the run's end validates).
class ValidationObserver final : public StepObserver {
 public:
  // validate_now() runs one validation and returns the mean loss.
  ValidationObserver(std::FILE* out, int64_t every, int64_t total_steps,
                     std::function<double()> validate_now)
      : out_(out), every_(every), total_(total_steps), validate_(std::move(validate_now)) {}
  bool after_step(const StepRecord& r) override;

 private:
  std::FILE* out_;
  int64_t every_, total_;
  std::function<double()> validate_;
};

// A caller's listener (a library user's callback, e.g. Python's): sees each record, and returning
// false stops the run after this step. Every rank votes (a stop on any rank stops all), so the
// ranks end after the same step; the run's end then writes the last checkpoint, if any.
class ListenerObserver final : public StepObserver {
 public:
  ListenerObserver(std::function<bool(const StepRecord&)> listener, comm::Communicator* group)
      : listener_(std::move(listener)), group_(group) {}
  bool after_step(const StepRecord& r) override;

 private:
  std::function<bool(const StepRecord&)> listener_;
  comm::Communicator* group_;
};

// Without training checkpoints but with a model to write at the end (--save): SIGTERM / SIGINT
// finish the step and end the run there, so that the model is written instead of lost with the
// process. (A second signal ends the process at once, as without it.)
class StopObserver final : public StepObserver {
 public:
  StopObserver(std::FILE* out, comm::Communicator* group) : out_(out), group_(group) {}
  bool after_step(const StepRecord& r) override;

 private:
  std::FILE* out_;
  comm::Communicator* group_;
  StopSignals signals_{true};
};

// Training checkpoints every save_every steps and on SIGTERM / SIGINT (finish the step, save,
// stop); finish() writes the last one at the end unless it was just written.
class CheckpointObserver final : public StepObserver {
 public:
  // save(steps_done) writes one (collective) and returns its directory; `resumed_at`: the steps
  // of the checkpoint the run resumed from (-1: none), not written again.
  CheckpointObserver(std::FILE* out, int64_t every, comm::Communicator* group,
                     std::function<std::string(int64_t)> save, int64_t resumed_at);
  bool after_step(const StepRecord& r) override;
  void finish(int64_t steps_done);
  bool stopped() const { return stopped_; }

 private:
  std::FILE* out_;
  int64_t every_;
  comm::Communicator* group_;
  std::function<std::string(int64_t)> save_;
  int64_t saved_at_;  // steps done at the last checkpoint written (or resumed from)
  bool stopped_ = false;
  StopSignals signals_{true};
};

}  // namespace tierzero::train
