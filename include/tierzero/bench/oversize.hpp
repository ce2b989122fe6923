// `tierzero bench oversize` (issue 18): one `tierzero train` run of a model whose training state
// is larger than the machine's memory (default GPT-2 XL: 1.56 B parameters, about 25 GB of fp32
// state), all of it on NVMe (parameters, optimizer states and gradient shards), under a host
// budget. Its step time is set against the step's floor on this machine, measured in the same
// run: the NVMe bytes the step must move at fio's sequential rates (`tierzero bench io`) plus its
// GEMM work at the sgemm rate (`tierzero bench train`'s baseline). Also reported: the process's
// peak RSS against the budgets, and the bytes the run actually moved per step (the block I/O of a
// longer run minus a shorter one, from getrusage of the children). Table on stderr, one JSON
// object on stdout (oversize).
#pragma once

#include <cstdint>
#include <string>

#include "tierzero/bench/results.hpp"

namespace tierzero::bench {

struct BenchOversizeOptions {
  std::string model = "gpt2-xl";          // a preset or layers,heads,channels (train --model)
  int64_t seq = 128;                      // tokens per sequence
  int64_t batch = 1;                      // micro-batch
  int64_t steps = 3;                      // steps of the long run (the short run takes 1 fewer)
  int64_t host_mem = int64_t{6} << 30;    // pinned host budget (train --host-mem)
  int64_t device_mem = int64_t{2} << 30;  // device budget (on the CPU backend: its arena)
  std::string grads = "nvme";             // offload_gradients
  int64_t threads = 2;                    // OpenMP threads of the run
  std::string dir;                        // NVMe directory (default /var/tmp or .)
  std::string device = "cpu";             // cpu or cuda
  int64_t timeout_s = 3600;               // per child run
};

// The benchmark itself (its child runs are this program's `train`: call it from the tierzero
// binary); returns its result line and throws tierzero::Error on failure.
BenchReport bench_oversize(const BenchOversizeOptions& options);

}  // namespace tierzero::bench
