// Trainer: the training loop of one rank (or of each data-parallel rank under ZeRO): data,
// forward/backward with gradient accumulation, clipping, AdamW with a schedule, validation,
// checkpoints, and a progress line per step.
#pragma once

#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tierzero/train/loss_scaler.hpp"
#include "tierzero/train/step_record.hpp"
#include "tierzero/train/train_config.hpp"

namespace tierzero {
class Timer;
}
namespace tierzero::profile {
class ProfileRecorder;
}

namespace tierzero::train {

class StepSchedule;  // src/train/step_schedule.hpp
class StepObserver;  // src/train/step_observers.hpp

class Trainer {
 public:
  explicit Trainer(TrainConfig config);
  ~Trainer();
  // Runs config.steps steps, printing progress to `out` (null: silent) and, when `metrics_path`
  // is not empty, one JSON line per step to that file ({"step", "loss", "lr", "grad_norm", "ms",
  // "tokens_per_s"}, full precision). Under MPI only rank 0 prints progress and writes metrics;
  // losses are means over the ranks. Throws Error on failure; under mpiexec with more than one
  // rank it ends the whole job instead (comm::abort_job), so no rank waits on a failed one.
  // When `memory_json_path` is not empty, every rank writes its MemoryTracker's current and peak
  // bytes per tier and category at the end of the run there (rank r > 0 to "<path>.rank<r>"):
  // {"rank", "ranks", "tiers": {"device": {"param": {"current", "peak"}, ...}, ...}}.
  // Records a run profile (memory per step, phase, unit, tier and category; fetch counters; time
  // and bytes per link) and writes it to `path` at the end (rank r > 0: "<path>.rank<r>"); with
  // `timeline`, every memory event and activity too (what `tierzero report --trace` needs).
  // Every rank of a multi-rank run must call it: at the end the ranks agree on a run id.
  void set_profile(const std::string& path, bool timeline);
  // Called on every rank with each step's record, after the progress, metrics and validation
  // and before the checkpoints; returning false on any rank stops the run after that step on all
  // (the last checkpoint is written as at the end). For callers embedding the trainer (Python).
  void set_step_listener(std::function<bool(const StepRecord&)> listener);
  TrainResult run(std::FILE* out, const std::string& metrics_path = "",
                  const std::string& memory_json_path = "");

 private:
  // Everything after the MPI session: shape, data, device, groups, model, parameter state.
  void build();
  // Start-up checks before any step, on every rank in the same order (a failure stops the run
  // before its first collective of training), then the opening line on `out`. Returns the
  // metrics file (rank 0, when a path is given; else null).
  using MetricsFile = std::unique_ptr<std::FILE, int (*)(std::FILE*)>;
  MetricsFile begin_run(std::FILE* out, const std::string& metrics_path);
  TrainResult run_loop(std::FILE* out, const std::string& metrics_path,
                       const std::string& memory_json_path);
  // End-of-run outputs after the last step, on every rank (collective): the final validation
  // (unless a stop signal ended the run), the model file, --memory-json, the profile and the
  // memory summaries.
  void end_run(std::FILE* all_ranks_out, StepSchedule& schedule, profile::ProfileRecorder* recorder,
               bool stopped, const std::string& memory_json_path, TrainResult& result);
  // The observers of each step but the checkpoints, in the order they see it.
  std::vector<std::unique_ptr<StepObserver>> make_observers(std::FILE* out, MetricsFile metrics,
                                                            const std::string& metrics_path,
                                                            StepSchedule& schedule,
                                                            profile::ProfileRecorder* recorder);
  // Collective: the mean validation loss; *evaluated (if given) the batches it averaged.
  double validate_now(StepSchedule& schedule, size_t* evaluated = nullptr);
  // The global loss from this rank's (collective with an MPI session).
  double mean_over_ranks(double loss) const;
  StepRecord step_record(int64_t step, double loss, double lr, double grad_norm, const Timer& timer,
                         double cpu_at_start) const;
  // The model written by rank 0 piece by piece at its tensors' places in the file (collective:
  // every rank reads). Under tensor or pipeline parallelism data-parallel replica 0's other ranks
  // send their pieces in chunks, which rank 0 takes in step with its own, so no rank holds more
  // than a piece and a chunk, and no group waits on another for long.
  // Returns rank 0's failure to write `path` ("" on success and on the other ranks): the caller
  // saves elsewhere then (save_or_rescue).
  std::string save_model_streamed(const std::string& path);
  // Training checkpoints (training_checkpoint.hpp): what must match to resume, writing one after
  // `steps_done` steps (collective), and restoring one; resume returns the steps done.
  nlohmann::ordered_json checkpoint_identity() const;
  std::string save_training_checkpoint(int64_t steps_done, const LossScaler& scaler);
  int64_t resume_training(LossScaler& scaler);
  struct State;
  TrainConfig config_;
  std::string profile_path_;
  bool profile_timeline_ = false;
  std::function<bool(const StepRecord&)> step_listener_;
  std::string save_failure_;  // where the model went when --save could not be written
  std::unique_ptr<State> state_;
};

}  // namespace tierzero::train
