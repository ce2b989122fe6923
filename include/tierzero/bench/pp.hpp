// `tierzero bench pp` (issue 15): real `tierzero train` runs of a pipeline of `pp` stages (one
// rank each) for each schedule (gpipe, 1f1b, interleaved with v chunks per rank) and number of
// micro-batches per step, alternating
// over the repeats. Each step the trainer measures, on every stage, the part of the pipeline's
// step (until its last stage is done) the stage did not compute (its forward and backward
// kernels); the mean over the stages is the measured bubble,
// set against the analytic (p - 1) / (m + p - 1) of uniform stages (interleaved:
// (p - 1) / (v m + p - 1)) as a ratio (1 is the theory;
// above, the pipeline idles more than it must: uneven stages, transfers, a busy machine). Table on
// stderr, one JSON object per (schedule, m) on stdout (pp.<schedule>.m<m>.bubble).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tierzero/bench/results.hpp"
#include "tierzero/bench/train_run_options.hpp"

namespace tierzero::bench {

// The model, run length and launcher flags of the other train benchmarks (--batch is the
// micro-batch), with a deeper default model so that the blocks dominate the first and last
// stage's extra work (embeddings, head and loss).
struct BenchPpOptions : TrainRunOptions {
  BenchPpOptions() {
    layers = 8;
    channels = 256;
    heads = 8;
    seq = 64;
    steps = 6;
    warmup = 2;
    repeats = 2;
  }
  int64_t pp = 2;                                  // stages = ranks
  std::vector<int64_t> micro_batches = {2, 4, 8};  // m per step, one mode each
  std::vector<std::string> schedules = {"gpipe", "1f1b", "interleaved"};
  int64_t virtual_stages = 2;  // chunks per rank of the interleaved runs
  bool receive_ahead = false;  // tierzero.pipeline_receive_ahead in every run
  int64_t threads = 1;         // OpenMP threads per rank
};

// The benchmark itself; returns its result lines and throws tierzero::Error on failure.
BenchReport bench_pp(const BenchPpOptions& options);

}  // namespace tierzero::bench
