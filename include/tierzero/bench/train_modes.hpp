// `tierzero bench train-nvme`, `train-stage3`, `profile` and `train-modes` (all three): real
// `tierzero train` runs, spawned as child processes of this same binary, timed from their
// --metrics files (median step ms after the warm-up steps) against a peer run in the same
// benchmark: NVMe offload vs host offload, stage 3 vs the stage 0 reference, --profile vs none.
// Table on stderr, one JSON object per result on stdout (train.nvme_vs_host,
// train.stage3_vs_stage0, profile.overhead).
#pragma once

#include <cstdint>
#include <string>

#include "tierzero/bench/results.hpp"
#include "tierzero/bench/train_run_options.hpp"

namespace tierzero::bench {

struct BenchTrainModesOptions : TrainRunOptions {
  // train-nvme: offload_optimizer.buffer_count of the NVMe run (slots of the optimizer pipeline,
  // each one chunk of master, m and v); 0: the config default.
  int64_t swap_buffers = 0;
};

// The benchmarks themselves; each returns its result lines and throws tierzero::Error on failure.
BenchReport bench_train_nvme(const BenchTrainModesOptions& options);
BenchReport bench_train_stage3(const BenchTrainModesOptions& options);
BenchReport bench_profile_overhead(const BenchTrainModesOptions& options);
BenchReport bench_train_modes(const BenchTrainModesOptions& options);

}  // namespace tierzero::bench
