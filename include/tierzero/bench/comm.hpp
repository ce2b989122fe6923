// `tierzero bench comm`: bandwidth of every collective against raw MPI in the same run.
#pragma once

#include <cstddef>
#include <string>

#include "tierzero/bench/results.hpp"

namespace tierzero::bench {

struct BenchCommOptions {
  int ranks = 2;                       // ranks to launch when not already inside an MPI job
  size_t min_bytes = size_t{1} << 10;  // smallest message (1 KiB)
  size_t max_bytes = size_t{1} << 28;  // largest message (256 MiB)
  int iters = 11;  // timed iterations per size (median; at least 20 below 1 MiB), after a warm-up
  std::string ops = "all";     // comma list: all_gather,reduce_scatter,all_reduce,broadcast,...
  std::string dtype = "fp32";  // fp32, bf16 or fp16
};

// Runs the benchmark: started outside MPI it re-executes this program as `tierzero bench comm`
// with the options under `mpiexec -n <ranks>` (so only the tierzero binary may call it there);
// inside an MPI job (mpiexec/srun) it runs directly. Initialises MPI itself. Table on stderr
// (rank 0), one JSON object per result on stdout (rank 0, which alone keeps them in the report);
// passed: every result passed its check, on every rank.
BenchReport bench_comm(const BenchCommOptions& options);

}  // namespace tierzero::bench
