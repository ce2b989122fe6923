// Figures over a whole profile that the report shows and the recommendations reason from:
// peaks over all steps (with the step, phase and unit), per-step means over the steady steps
// (all but the first when there are several: the first step records the prefetch trace and
// warms up), and the bytes nobody accounted for.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "tierzero/profile/profile.hpp"

namespace tierzero::profile {

struct PeakInStep {
  PeakAt at;
  int64_t step = -1;  // -1: no step recorded
};

struct ProfileSummary {
  size_t steps = 0;
  size_t steady_steps = 0;  // the steps the means below are over
  double mean_step_s = 0.0;
  double mean_stall_s = 0.0;  // the trainer's stall counter, else the stall track
  size_t prefetch_hits = 0;   // summed over the steady steps
  size_t on_demand_fetches = 0;
  // Gradient reductions, means per steady step: buckets, seconds in flight, and the part the
  // training thread waited for (exposed); in flight - exposed was hidden under the backward.
  double reductions = 0.0;
  double reduction_s = 0.0;
  double reduction_exposed_s = 0.0;
  std::array<std::array<PeakInStep, kNumCategories>, kNumTiers> peak{};  // max over all steps
  std::array<PeakInStep, kNumTiers> tier_peak{};
  std::array<TrackStep, kNumTracks> track_per_step{};  // mean per steady step (count rounded)
  // Compute per steady step: the compute track's busy time where compute activities were
  // recorded (pipeline stages), else the forward and backward phases' time less the training
  // thread's waits (it computes whenever it does not wait) with compute_from_phases set.
  double compute_s = 0.0;
  bool compute_from_phases = false;

  // Bytes nobody accounted for, at the step end where the gap was largest; -1 when unknown.
  int64_t unaccounted_device = -1;  // driver-reported in use - tracked device bytes
  size_t driver_device_used = 0;
  size_t tracked_device = 0;
  int64_t unaccounted_process = -1;  // RSS - tracked host (+ device on the CPU backend)
  size_t process_rss = 0;
  size_t tracked_process = 0;

  // Host memory free while the run held its states: the least MemAvailable seen at a step end,
  // else the figure read when recording began (0: unknown).
  size_t host_available = 0;
};

bool device_is_host_memory(const RunInfo& run);  // the CPU backend: "device" bytes are in RAM
ProfileSummary summarize(const Profile& p);

// The engines a step keeps busy, with their busy time per steady step: the compute device, the
// copy link each way, the CPU optimizer, the NVMe drive (reads and writes share it: their busy
// times add) and the network (left out on one rank, whose collectives are local copies). On the
// CPU backend compute, copies and the optimizer run on the same cores and memory, so they are one
// engine, "cpu", whose busy time is theirs added. Engines that did nothing are left out; the
// busiest comes first (it bounds the step when its busy time is near the step's).
struct EngineBusy {
  std::string name;
  double busy_s = 0.0;
};
std::vector<EngineBusy> engine_busy(const Profile& p, const ProfileSummary& s);

}  // namespace tierzero::profile
