// Calibration: the machine's measured rates that the planner turns bytes and FLOPs into seconds
// with. They come from a file (the JSON lines `tierzero bench ...` prints, or one object naming
// the rates directly; format in docs/estimator.md) or from a quick built-in measurement taking a
// few seconds. A rate nobody supplied keeps a documented conservative default and says so.
#pragma once

#include <functional>
#include <string>

namespace tierzero {
class Device;
}

namespace tierzero::profile {

struct Rates {
  double gemm_gflops = 50.0;        // sgemm GFLOP/s of the device (bench train.step baseline)
  double copy_gbps = 10.0;          // host<->device copy GB/s (pinned)
  double nvme_read_gbps = 1.0;      // swap read GB/s (bench io.read)
  double nvme_write_gbps = 1.0;     // swap write GB/s (bench io.write)
  double adam_cpu_gbps = 5.0;       // CPU Adam, GB/s at 30 bytes per parameter (bench adam.cpu)
  double adam_device_gbps = 0.0;    // device Adam at 30 bytes per parameter; 0: same as CPU
  double comm_gbps = 10.0;          // collective bus bandwidth GB/s (bench comm.*)
  std::string source = "defaults";  // where the figures came from, for the printout

  double device_adam_gbps() const {
    return adam_device_gbps > 0 ? adam_device_gbps : adam_cpu_gbps;
  }
};

// Parses either JSON lines of bench results ({"bench": "train.step", ...} per line: train.step's
// baseline_value is the GEMM rate, io.read / io.write the NVMe rates, adam.cpu the Adam rate,
// comm.all_gather / comm.reduce_scatter the collective rate (the lower of the two), copy.h2d the
// copy rate) or one object {"gemm_gflops": .., "copy_gbps": .., ...} with Rates' field names.
// Unknown bench names are ignored; a malformed line or a non-positive rate is an Error naming it.
Rates parse_calibration(const std::string& text, const std::string& source);
Rates load_calibration(const std::string& path);  // throws Error if unreadable

// Quick measurement on `device` (a few seconds): a 1024^3 sgemm, a 64 MiB host-to-device copy,
// CPU AdamW over 4M parameters, and a 64 MiB NVMe write and read with offload::NvmeEngine in a
// private directory under `nvme_dir` (skipped, keeping the defaults, when nvme_dir is empty).
// The collective rate keeps its default (one process cannot measure it). Kernels run with the
// calling thread's CPU thread count (kernels::cpu::threads()); CPU-bound parts are timed as on
// an idle machine (see compute_seconds).
Rates measure_rates(Device& device, const std::string& nvme_dir);

// Seconds of one run of `fn`, best of `runs` after a warm-up run. With cpu_threads > 0 (fn is
// work of this process's cpu_threads threads that waits on nothing else: CPU kernels) a run
// counts as the lower of its wall time and its process CPU time per thread, so other processes
// on a shared machine, which stretch the wall time but not the CPU time, do not slow it.
double compute_seconds(int runs, int cpu_threads, const std::function<void()>& fn);

// The rates as one JSON object (the second calibration file form), so a measurement can be saved.
std::string rates_json(const Rates& r);

}  // namespace tierzero::profile
