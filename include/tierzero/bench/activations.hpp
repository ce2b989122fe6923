// `tierzero bench activations` (issue 31): real `tierzero train` runs with activation
// checkpointing and the block checkpoints on the device, in pinned host memory and on NVMe.
// Part one: for each placement, the longest sequence the estimator predicts to fit a device
// budget, beside the longest that measured runs under that budget fit (from the prediction up
// until one is refused, or down until one fits). Part two: the step time at --seq (where all
// three fit) with the checkpoints on the host and on NVMe against the device (ratio: device /
// tier, higher is better). Table on stderr, one JSON object per result on stdout
// (activations.<tier>.longest_seq, activations.<tier>_vs_device).
#pragma once

#include <cstdint>

#include "tierzero/bench/train_run_options.hpp"

namespace tierzero::bench {

struct BenchActivationsOptions : TrainRunOptions {
  BenchActivationsOptions() {
    layers = 12;
    channels = 128;
    heads = 4;
    seq = 256;
    batch = 2;
    steps = 6;
    warmup = 2;
    repeats = 2;
  }
  int64_t budget = int64_t{48} << 20;  // device memory budget of the fit runs, bytes
  int64_t seq_step = 64;               // the fit search's sequence granularity
  int64_t max_seq = 2048;              // its upper end (and the fit runs' context)
  int64_t fit_steps = 1;               // steps of each fit run
  int64_t probes = 4;                  // fit runs beyond the prediction, at most
  int64_t stage = 0;                   // ZeRO stage of every run
  int64_t threads = 1;                 // OpenMP threads
  int64_t buffer_count = 2;            // tierzero.activation_checkpoints.buffer_count
};

// Runs the benchmark; its exit code (0: every run as expected).
int bench_activations(const BenchActivationsOptions& options);

}  // namespace tierzero::bench
