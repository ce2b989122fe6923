// `tierzero bench adam`: the CPU AdamW (with its bf16 working copy) against the machine's memory
// bandwidth, measured in the same run with the same threads as a STREAM triad; and the fp32
// update alone against PyTorch's fused CPU AdamW, the fastest peer, at equal bytes moved.
#pragma once

#include <cstddef>
#include <string>

#include "tierzero/bench/results.hpp"

namespace tierzero::bench {

struct BenchAdamOptions {
  size_t params = size_t{1} << 28;  // parameters updated per step (256M: 4.5 GiB of state)
  int threads = 2;                  // OpenMP threads, for AdamW and triad alike
  int repeats = 5;                  // timed steps (and triads), after one warm-up each; median
  // The peer: "auto" measures PyTorch's fused CPU AdamW when `python` imports torch and says why
  // not otherwise; "torch" requires it (its absence is an error); "none" leaves it out.
  std::string peer = "auto";
  std::string python = "python3";
};

struct BenchAdamResult {
  size_t params = 0;            // updated per step
  int threads = 0;              // OpenMP threads that ran both loops
  std::string isa;              // the AdamW kernel's instruction set
  double step_s = 0.0;          // median AdamW step
  double triad_s = 0.0;         // median triad, the ceiling
  double adam_gbps = 0.0;       // 30 bytes per parameter over step_s
  double triad_gbps = 0.0;      // 12 bytes per element over triad_s
  double fp32_step_s = 0.0;     // median AdamW step without the bf16 copy (28 B/param)
  double peer_step_s = 0.0;     // median step of the peer (28 B/param); 0 when not measured
  std::string peer;             // e.g. "torch 2.15.0 fused AdamW"; empty when not measured
  size_t checked_elements = 0;  // recomputed by the scalar path after the run
  BenchReport report;  // adam.cpu and adam.cpu_vs_torch; passed: every check held (ours bitwise)
};

// Runs the benchmark: table on stderr, one JSON object (adam.cpu) on stdout.
BenchAdamResult bench_adam(const BenchAdamOptions& options);

}  // namespace tierzero::bench
