// `tierzero bench comm`: bandwidth of every collective against raw MPI in the same run.
#pragma once

#include <CLI/CLI.hpp>
#include <cstddef>
#include <string>

namespace tierzero::bench {

struct BenchCommOptions {
  int ranks = 2;                       // ranks to launch when not already inside an MPI job
  size_t min_bytes = size_t{1} << 10;  // smallest message (1 KiB)
  size_t max_bytes = size_t{1} << 28;  // largest message (256 MiB)
  int iters = 11;  // timed iterations per size (median; at least 20 below 1 MiB), after a warm-up
  std::string ops = "all";     // comma list: all_gather,reduce_scatter,all_reduce,broadcast,...
  std::string dtype = "fp32";  // fp32, bf16 or fp16
};

// Adds the options above to the `bench comm` subcommand.
void add_bench_comm_options(CLI::App& command, BenchCommOptions& options);

// Runs the benchmark: started outside MPI it re-executes itself under
// `mpiexec -n <ranks>`; inside an MPI job (mpiexec/srun) it runs directly. Initialises MPI
// itself. Table on stderr (rank 0), one JSON object per result on stdout (rank 0). Returns 0,
// or 1 when a result failed its check.
int bench_comm(const BenchCommOptions& options);

}  // namespace tierzero::bench
