// `tierzero bench ulysses` (issue 16): real `tierzero train` runs with Ulysses sequence
// parallelism. Part one: at each Ulysses size (one rank each, ZeRO over them) every step's
// all-to-all bytes are checked against the analytic volume (nn::expected_ulysses_traffic; any
// difference is an error), with the bytes a rank puts on the wire and the step time. Part two:
// for each size, the longest sequence the estimator predicts to fit a device budget, next to the
// longest that measured runs under that budget fit (a run at the prediction, then one sequence
// step above it and so on until one is refused, or below it until one fits). Table on stderr, one
// JSON object per result on stdout (ulysses.spN.bytes, ulysses.spN.longest_seq).
#pragma once

#include <cstdint>
#include <vector>

#include "tierzero/bench/results.hpp"
#include "tierzero/bench/train_run_options.hpp"

namespace tierzero::bench {

// The model, run length and launcher flags as the other train benchmarks (--seq: the sequence of
// the bytes runs; --batch: sequences per micro-batch, on every rank), a small default model.
struct BenchUlyssesOptions : TrainRunOptions {
  BenchUlyssesOptions() {
    layers = 2;
    channels = 128;
    heads = 8;
    seq = 256;
    batch = 1;
    steps = 4;
    warmup = 1;
    repeats = 1;
  }
  std::vector<int64_t> sizes = {2, 4};         // Ulysses sizes of the bytes runs
  std::vector<int64_t> fit_sizes = {1, 2, 4};  // and of the longest-sequence search
  int64_t budget = int64_t{40} << 20;          // device memory budget of the fit runs, bytes
  int64_t seq_step = 64;                       // the fit search's sequence granularity
  int64_t max_seq = 4096;                      // its upper end (and the fit runs' context)
  int64_t fit_steps = 2;                       // steps of each fit run
  int64_t probes = 6;                          // fit runs beyond the prediction, at most
  int64_t stage = 3;                           // ZeRO stage of every run
  int64_t threads = 1;                         // OpenMP threads per rank
  bool checkpointing = false;                  // tierzero.activation_checkpointing
  // Every run's tierzero.compute_dtype (fp32, bf16, fp16: a 16-bit one with that working type);
  // the all-to-alls move it, the estimator's prediction counts it.
  std::string compute_dtype = "fp32";
};

// The benchmark itself; returns its result lines and throws tierzero::Error on failure (a bytes run
// that fails, all-to-all bytes that differ from the analytic volume, a fit run that fails for
// another reason than the device budget).
BenchReport bench_ulysses(const BenchUlyssesOptions& options);

}  // namespace tierzero::bench
