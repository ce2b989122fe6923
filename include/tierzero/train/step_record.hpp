// The record of one training step and the result of a run: what the trainer's observers
// (progress, metrics, profile, validation, checkpoints) and the CLI read. The step's counters are
// filled from the partition store's once (record_fetch_counters) and converted once for the
// profile (profile_step_counters).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "tierzero/profile/profile.hpp"
#include "tierzero/zero/store_config.hpp"

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
  // The optimizer step (FetchCounters): seconds of update work on the CPU worker during the
  // backward (tierzero.optimizer_overlap), the part hidden under the backward, the seconds the
  // step itself spent on the update (waiting for the worker, or updating), and the units the
  // worker updated.
  double optimizer_worker_s = 0.0;
  double optimizer_overlapped_s = 0.0;
  double optimizer_exposed_s = 0.0;
  size_t optimizer_overlapped_units = 0;
  // optimizer_overlap speculative: units updated during the backward that the step undid and
  // redid (clipping bound) or skipped (fp16 overflow), and units whose backup found no room in
  // the host pool (updated at the step instead).
  size_t optimizer_redone_units = 0;
  size_t optimizer_unbacked_units = 0;
  // Times the training thread blocked on device work during the step (host_waits.hpp): stream
  // and event synchronizations, each a point where a GPU's queue runs dry.
  size_t host_waits = 0;
};

struct TrainResult {
  std::vector<StepRecord> steps;
  double val_loss = 0.0;         // mean validation loss at the end (NaN if no validation ran)
  size_t val_batches = 0;        // the batches it averaged: val_batches, or what the data holds
  double unigram_entropy = 0.0;  // of the training data's tokens (built-in corpus), nats; or NaN
  size_t parameter_count = 0;
  std::string device_name;
  int rank = 0;  // this process's data-parallel rank (0 on the one-rank path)
};

// The store's counters of the step into `r`: fetching (stage 3 only) and gradient reductions.
void record_fetch_counters(StepRecord& r, const zero::FetchCounters& fc, bool stage3);

// The step as the profile recorder counts it; `tokens`: the tokens the step processed.
profile::StepCounters profile_step_counters(const StepRecord& r, size_t tokens);

}  // namespace tierzero::train
