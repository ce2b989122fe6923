// `tierzero bench offload` (issue 27): one `tierzero train` run with the model's parameters and
// optimizer states offloaded (ZeRO-3; `--mode host`: pinned host memory, ZeRO-Offload; `--mode
// nvme`: NVMe, ZeRO-Infinity) set against the floor of its step on this machine. The engines'
// ceilings are measured in the same run: the GEMM rate (`tierzero bench train`'s baseline), the
// pinned host->device and device->host copy rates, the CPU AdamW rate (`tierzero bench adam`)
// and fio's NVMe read and write rates (`tierzero bench io`, mode nvme). The step's work per
// engine comes from the run's own profile (bytes per link per step) and the model (FLOPs,
// parameters updated): each engine's time is its work at its ceiling. The floor is the largest
// of them (every engine overlapping the others perfectly), the sum the step with no overlap;
// the step is printed against both and the bottleneck engine named, beside each engine's busy
// time as the profile measured it. On the CPU backend compute, copies and the optimizer share
// the same cores and memory, so they form one engine there. Table on stderr, one JSON object on
// stdout (offload.host or offload.nvme).
#pragma once

#include <cstdint>
#include <string>

#include "tierzero/bench/results.hpp"

namespace tierzero::bench {

struct BenchOffloadOptions {
  std::string mode = "host";              // host (ZeRO-Offload) or nvme (ZeRO-Infinity)
  std::string model = "gpt2";             // a preset or layers,heads,channels (train --model)
  int64_t seq = 256;                      // tokens per sequence
  int64_t batch = 1;                      // micro-batch
  int64_t steps = 4;                      // steps run; all but the first are measured
  int64_t host_mem = int64_t{8} << 30;    // pinned host budget (train --host-mem)
  int64_t device_mem = int64_t{2} << 30;  // device budget (train --device-mem)
  int64_t threads = 2;                    // OpenMP threads of the run and the ceilings
  std::string dir;                        // NVMe directory, logs, profile (default /var/tmp)
  std::string device = "cpu";             // cpu or cuda
  std::string overlap = "plain";          // tierzero.optimizer_overlap of the run
  int64_t timeout_s = 3600;               // per child run
};

// The benchmark (its child runs are this program's `bench` and `train`: call it from the
// tierzero binary); throws tierzero::Error on failure.
BenchReport bench_offload(const BenchOffloadOptions& options);

}  // namespace tierzero::bench
