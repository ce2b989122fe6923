// The largest micro-batch whose `bench train` step fits a device budget (`--batch 0`). The step's
// tracked peak is measured at one sequence, and it grows with the micro-batch only by the model's
// activations, which GPT::activation_bytes_for counts exactly (the parameters, gradients, AdamW
// moments and the kernels' workspace do not depend on it): peak(B) = peak(1) - act(1) + act(B).
// The budget is the one given, or on a GPU its memory less what nothing of ours allocated (the
// CUDA context, cuBLASLt's and the device's own workspaces) and a margin for the driver's
// rounding. Internal to tz_bench.
#pragma once

#include <cstddef>

#include "tierzero/device/device.hpp"
#include "tierzero/nn/gpt_config.hpp"

namespace tierzero::bench {

struct BatchFit {
  size_t budget = 0;          // bytes the step's allocator may hold
  size_t peak_at_one = 0;     // the tracked peak of a step at one sequence
  size_t batch = 0;           // the largest micro-batch predicted to fit (0: not even one)
  size_t predicted_peak = 0;  // peak(batch)
  size_t next_peak = 0;       // peak(batch + 1), over the budget (0 at the search's cap)
};

// The budget for the step: `requested` when non-zero; else, on a GPU, its total memory less the
// bytes the driver reports in use that `tracked_reserved` (our allocators' reservations at the
// time) does not explain, less max(512 MiB, 3%); on the CPU its memory as the device reports it.
size_t step_budget(Device& device, size_t requested, size_t tracked_reserved);

// The largest B in [1, max_batch] with peak_at_one - act(1) + act(B) <= budget, act(B) =
// GPT::activation_bytes_for(cfg, B, T, no recompute, in `compute`), and the peaks either side.
BatchFit largest_fitting_batch(const nn::GPTConfig& cfg, size_t T, size_t peak_at_one,
                               size_t budget, size_t max_batch = size_t{1} << 16,
                               DType compute = DType::f32);

}  // namespace tierzero::bench
