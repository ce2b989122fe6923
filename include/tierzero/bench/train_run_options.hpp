// The options every benchmark of real `tierzero train` runs takes (the model, the run length, the
// launcher): bench train-nvme, train-stage3, profile, train-modes, tp, pp and ulysses derive their
// own options from it.
#pragma once

#include <cstdint>
#include <string>

namespace tierzero::bench {

// The options of every benchmark of real `tierzero train` runs; each benchmark's own options
// derive from it (and may change the defaults in their constructor).
struct TrainRunOptions {
  int64_t layers = 6;       // transformer blocks
  int64_t channels = 512;   // n_embd
  int64_t heads = 8;        // n_head
  int64_t seq = 128;        // tokens per sequence (also the context length)
  int64_t batch = 2;        // micro-batch (per rank, or as the benchmark says)
  int64_t steps = 8;        // steps per run, warm-up included
  int64_t warmup = 2;       // first steps of each run that are not counted
  int64_t repeats = 0;      // runs of each mode, alternating; 0: the benchmark's default
  int64_t timeout_s = 600;  // per run; a run past it is killed and the benchmark fails
  std::string dir;          // where the private temp directory goes (default /var/tmp or .)
  std::string mpiexec;      // launcher (default: mpiexec on PATH)
};

// Throws Error unless steps > warmup >= 0 and heads divides channels.
void validate_train_run_options(const TrainRunOptions& o);

}  // namespace tierzero::bench
