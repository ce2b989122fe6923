// `tierzero bench train-nvme`, `train-stage3`, `profile` and `train-modes` (all three): real
// `tierzero train` runs, spawned as child processes of this same binary, timed from their
// --metrics files (median step ms after the warm-up steps) against a peer run in the same
// benchmark: NVMe offload vs host offload, stage 3 vs the stage 0 reference, --profile vs none.
// Table on stderr, one JSON object per result on stdout (train.nvme_vs_host,
// train.stage3_vs_stage0, profile.overhead).
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <functional>
#include <string>

#include "child_runs.hpp"

namespace tierzero::bench {

struct BenchTrainModesOptions : TrainRunOptions {
  // train-nvme: offload_optimizer.buffer_count of the NVMe run (slots of the optimizer pipeline,
  // each one chunk of master, m and v); 0: the config default.
  int64_t swap_buffers = 0;
};

// Adds the subcommands under `bench`. The returned function runs whichever of them was parsed
// and returns its exit code, or -1 when none of them was.
std::function<int()> add_bench_train_modes_commands(CLI::App& bench);

// The benchmarks themselves; each returns the exit code and throws tierzero::Error on failure.
int bench_train_nvme(const BenchTrainModesOptions& options);
int bench_train_stage3(const BenchTrainModesOptions& options);
int bench_profile_overhead(const BenchTrainModesOptions& options);
int bench_train_modes(const BenchTrainModesOptions& options);

}  // namespace tierzero::bench
