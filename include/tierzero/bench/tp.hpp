// `tierzero bench tp` (issue 14): real `tierzero train` runs on the same ranks with tensor
// parallelism, with tensor + sequence parallelism, and data parallelism only at the same global
// batch. Checks each run's per-step tensor-parallel collective bytes against the analytic volume
// (nn::expected_tensor_parallel_traffic; any difference is an error, as in nccl-tests) and times
// the steps against the data-parallel run. Table on stderr, one JSON object per result on stdout
// (tp.bytes, tp_sp.bytes, tp.step_vs_dp, tp_sp.step_vs_dp, tp_sp.activation_bytes).
#pragma once

#include <cstdint>
#include <string>

#include "tierzero/bench/results.hpp"
#include "tierzero/bench/train_run_options.hpp"

namespace tierzero::bench {

// The model, run length and launcher flags as the other train benchmarks (--batch is per
// tensor-parallel replica; the dp-only run takes batch / tp per rank), with a smaller default
// model and 2 runs per mode.
struct BenchTpOptions : TrainRunOptions {
  BenchTpOptions() {
    layers = 4;
    repeats = 2;
  }
  int64_t ranks = 2;           // world size of every run
  int64_t tp = 2;              // tensor-parallel size of the tp runs (dp = ranks / tp)
  int64_t stage = 0;           // ZeRO stage of every run
  int64_t threads = 1;         // OpenMP threads per rank
  bool checkpointing = false;  // tierzero.activation_checkpointing in every run
  // Every run's tierzero.compute_dtype (fp32, bf16, fp16: a 16-bit one with that working type);
  // the analytic volume counts the 16-bit all-gathers in it.
  std::string compute_dtype = "fp32";
};

// The benchmark itself; returns its result lines and throws tierzero::Error on failure (a run that
// fails, or collective bytes that differ from the analytic volume).
BenchReport bench_tp(const BenchTpOptions& options);

}  // namespace tierzero::bench
