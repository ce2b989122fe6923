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
#include "tierzero/train/train_config.hpp"

namespace tierzero::train {

struct StepRecord {
  int64_t step = 0;  // 1-based
  double loss = 0.0;
  double lr = 0.0;
  double grad_norm = 0.0;
  double seconds = 0.0;
  // CPU time of the process during the step (every thread, the MPI engine's polling included):
  // with one kernel thread and one rank, the step's time on an otherwise idle machine.
  double cpu_seconds = 0.0;
  double tokens_per_second = 0.0;
  // Stage 3 fetching during the step (the partition store's FetchCounters); 0 elsewhere.
  bool fetch_counted = false;
  size_t prefetch_hits = 0;
  size_t on_demand_fetches = 0;
  double stall_s = 0.0;
  size_t nvme_reads = 0;  // parameter shards read from NVMe
  size_t handoffs = 0;    // parameter shards the NVMe optimizer handed over instead
  // Gradient reductions of the partition store (any stage; 0 without one): buckets reduced,
  // seconds in flight and the part the step waited for (FetchCounters).
  size_t reductions = 0;
  double reduction_s = 0.0;
  double reduction_exposed_s = 0.0;
};

struct TrainResult {
  std::vector<StepRecord> steps;
  double val_loss = 0.0;         // mean validation loss at the end (NaN if no validation ran)
  double unigram_entropy = 0.0;  // of the training data's tokens (built-in corpus), nats; or NaN
  size_t parameter_count = 0;
  std::string device_name;
  int rank = 0;  // this process's data-parallel rank (0 on the one-rank path)
};

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
  TrainResult run(std::FILE* out, const std::string& metrics_path = "",
                  const std::string& memory_json_path = "");

 private:
  void build();  // everything after the MPI session: data, model, parameters, optimizer
  // fn(begin, count, values) for consecutive pieces of this rank's flat parameter buffer, every
  // element once, in order: a store unit at a time (a gather at stage 3, so every rank of the
  // store's group must call it) or a chunk of a local model. Host memory: one piece.
  void for_each_param_piece(const std::function<void(size_t, size_t, const float*)>& fn);
  // The model written by rank 0 piece by piece at its tensors' places in the file (collective:
  // every rank reads). Under tensor or pipeline parallelism data-parallel replica 0's other ranks
  // send their pieces in chunks, which rank 0 takes in step with its own, so no rank holds more
  // than a piece and a chunk, and no group waits on another for long.
  // Returns rank 0's failure to write `path` ("" on success and on the other ranks): the caller
  // saves elsewhere then (save_or_rescue).
  std::string save_model_streamed(const std::string& path);
  TrainResult run_loop(std::FILE* out, const std::string& metrics_path,
                       const std::string& memory_json_path);
  // Training checkpoints (training_checkpoint.hpp): what must match to resume, writing one after
  // `steps_done` steps (collective), and restoring one; resume returns the steps done.
  nlohmann::ordered_json checkpoint_identity() const;
  std::string save_training_checkpoint(int64_t steps_done, const LossScaler& scaler);
  int64_t resume_training(LossScaler& scaler);
  struct State;
  TrainConfig config_;
  std::string profile_path_;
  bool profile_timeline_ = false;
  std::string save_failure_;  // where the model went when --save could not be written
  std::unique_ptr<State> state_;
};

}  // namespace tierzero::train
