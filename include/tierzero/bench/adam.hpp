// `tierzero bench adam`: the CPU AdamW (with its bf16 working copy) against the machine's memory
// bandwidth, measured in the same run with the same threads as a STREAM triad.
#pragma once

#include <cstddef>
#include <string>

#include "tierzero/bench/results.hpp"

namespace tierzero::bench {

struct BenchAdamOptions {
  size_t params = size_t{1} << 28;  // parameters updated per step (256M: 4.5 GiB of state)
  int threads = 2;                  // OpenMP threads, for AdamW and triad alike
  int repeats = 5;                  // timed steps (and triads), after one warm-up each; median
};

struct BenchAdamResult {
  size_t params = 0;            // updated per step
  int threads = 0;              // OpenMP threads that ran both loops
  std::string isa;              // the AdamW kernel's instruction set
  double step_s = 0.0;          // median AdamW step
  double triad_s = 0.0;         // median triad, the ceiling
  double adam_gbps = 0.0;       // 30 bytes per parameter over step_s
  double triad_gbps = 0.0;      // 12 bytes per element over triad_s
  size_t checked_elements = 0;  // recomputed by the scalar path after the run
  BenchReport report;           // the adam.cpu line; passed: every checked element matched bitwise
};

// Runs the benchmark: table on stderr, one JSON object (adam.cpu) on stdout.
BenchAdamResult bench_adam(const BenchAdamOptions& options);

}  // namespace tierzero::bench
