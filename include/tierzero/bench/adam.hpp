// `tierzero bench adam`: the CPU AdamW (with its bf16 working copy) against the machine's memory
// bandwidth, measured in the same run with the same threads as a STREAM triad.
#pragma once

#include <CLI/CLI.hpp>
#include <cstddef>

namespace tierzero::bench {

struct BenchAdamOptions {
  size_t params = size_t{1} << 28;  // parameters updated per step (256M: 4.5 GiB of state)
  int threads = 2;                  // OpenMP threads, for AdamW and triad alike
  int repeats = 5;                  // timed steps (and triads), after one warm-up each; median
};

// Adds the options above to the `bench adam` subcommand.
void add_bench_adam_options(CLI::App& command, BenchAdamOptions& options);

// Runs the benchmark: table on stderr, one JSON object (adam.cpu) on stdout. Returns 0, or 1 when
// the spot check of the results failed.
int bench_adam(const BenchAdamOptions& options);

}  // namespace tierzero::bench
