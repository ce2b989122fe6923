// The planner: enumerates ZeRO stage x placement x recompute mode (and the checkpoints' tier) x
// micro-batch, keeps
// the configurations whose estimated bytes fit every tier's budget (with a safety margin), predicts
// each one's step time from measured rates, and picks the fastest per token. It also keeps the
// best rejected candidates with the tier that overflowed, so it can say what would not fit.
// The time model and the margin are written out in docs/estimator.md.
#pragma once

#include <array>
#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "tierzero/profile/calibration.hpp"
#include "tierzero/profile/estimator.hpp"

namespace tierzero::profile {

// What a transformer block's backward recomputes, nn::Recompute's modes (the profile layer knows
// no GPT): none; selective, the attention's core; full, the whole block from its checkpoint
// (activation checkpointing, whose checkpoints may live off the device).
enum class RecomputeMode { none, selective, full };
constexpr size_t kNumRecomputeModes = 3;
const char* recompute_mode_name(RecomputeMode mode);  // "none", "selective", "full"

struct PlanRequest {
  EstimateInput base;  // units, world, knobs; stage, placement and activations are varied
  size_t seq_len = 1024;
  size_t target_global_batch = 32;  // sequences per optimizer step across the data-parallel ranks
  std::array<size_t, kNumTiers> budget{};  // bytes per tier (device, host, nvme); 0: tier unusable
  double margin = 0.10;  // a candidate fits when every tier's estimate <= budget * (1 - margin)
  // Activation bytes per rank for (micro-batch, recompute mode); supplied by the caller, who knows
  // the model (the profile layer does not).
  std::function<size_t(size_t micro_batch, RecomputeMode recompute)> activation_bytes;
  // Optional: block checkpoints placed on the host or NVMe (a dimension the planner then
  // searches with checkpointing on): the activation bytes without the stored checkpoints and
  // the checkpoints' placement, per micro-batch. None: checkpoints only on the device.
  struct PlacedActivations {
    size_t activation_bytes = 0;
    CheckpointPlacementInput checkpoints;
  };
  std::function<PlacedActivations(size_t micro_batch, Tier tier)> placed_checkpoints;
  // Search only this checkpoint tier (with full recompute); kNumTiers: every tier offered.
  size_t only_checkpoint_tier = kNumTiers;
  // Search only this recompute mode (a RecomputeMode); kNumRecomputeModes: every mode.
  size_t only_recompute = kNumRecomputeModes;
  // Bytes one rank sends over the wire in its tensor-parallel collectives per micro-step (ring
  // algorithms; the model's analytic volume); optional, none without tensor parallelism.
  std::function<double(size_t micro_batch, RecomputeMode recompute)> tensor_parallel_wire_bytes;
  // The same for the Ulysses all-to-alls; optional, none without Ulysses (world.sp 1).
  std::function<double(size_t micro_batch, RecomputeMode recompute)> ulysses_wire_bytes;
  // Seconds per micro-step per rank of the kernels outside the GEMMs (attention, the activation
  // function, with what the recompute mode runs again: the attention's forward under selective,
  // both forwards under full), which the caller measures at the model's shapes; optional (none:
  // the GEMMs alone count as compute).
  std::function<double(size_t micro_batch, RecomputeMode recompute)> other_kernel_seconds;
  Rates rates;
};

// Predicted seconds of one optimizer step, by part (the overlap model is in docs/estimator.md).
struct StepTime {
  double compute_s = 0;        // gemm_s + other_kernels_s
  double gemm_s = 0;           // GEMM FLOPs / GEMM rate, all micro-steps
  double other_kernels_s = 0;  // the request's other_kernel_seconds, all micro-steps
  double transfer_s = 0;       // gathers, reduce-scatters, parameter fetches, all micro-steps
  double exposed_s = 0;        // the part of transfer_s that compute does not hide
  double optimizer_s = 0;      // optimizer step incl. its own I/O; not overlapped
  // Tensor-parallel collectives, all micro-steps: on the critical path (each layer waits for
  // its all-reduce or reduce-scatter), so not overlapped.
  double tensor_parallel_s = 0;
  // Ulysses' all-to-alls, all micro-steps: each attention waits for them, so not overlapped.
  double ulysses_s = 0;
  // Pipeline parallelism (pp > 1, the 1F1B / GPipe order the plan's config runs): the stages
  // idle while the pipeline fills and drains, (pp - 1) of its m micro-steps' compute.
  double pipeline_bubble_s = 0;
  double total_s =
      0;  // compute_s + exposed_s + optimizer_s + tensor_parallel_s + ulysses_s + bubble
  double per_token_s = 0;  // total_s / tokens per step (all ranks)
};

// The NVMe optimizer chunk (offload_optimizer.buffer_size, elements) the planner also tries when
// the request's is larger: the pipeline's host slots shrink with it, so an oversize model fits a
// small host budget.
constexpr size_t kSmallNvmeChunk = size_t{1} << 24;

struct Candidate {
  int stage = 0;
  zero::PlacementConfig placement;
  RecomputeMode recompute = RecomputeMode::none;
  bool checkpointing() const { return recompute == RecomputeMode::full; }
  Tier checkpoint_tier = Tier::device;  // where the block checkpoints live (full recompute only)
  size_t micro_batch = 1;
  size_t accumulation = 1;  // gradient accumulation steps to reach the target global batch
  // stage3_max_live_parameters: the request's, or 0 (only the two largest units live at once)
  // when that is what makes stage 3 fit; the time model does not see the lost prefetch depth.
  size_t max_live_parameters = 0;
  Estimate estimate;
  CheckpointPlacementInput
      estimate_checkpoints;  // the checkpoints' placement it was estimated with
  StepTime time;
  bool fits = false;
  Tier overflow = Tier::device;  // the first tier that did not fit (when !fits)
  size_t overflow_bytes = 0;     // estimate of that tier
  std::string describe() const;  // "stage 3, param cpu 1, optimizer nvme 0.5, ckpt, micro 4 x 8"
  // The gradient shards of the NVMe optimizer's units on NVMe too (tierzero.offload_gradients).
  bool grads_on_nvme() const {
    return stage >= 2 && placement.optimizer.tier == Tier::nvme &&
           placement.nvme_grads == Tier::nvme;
  }
};

struct PlanResult {
  bool found = false;
  Candidate best;
  std::vector<Candidate> rejected;  // the fastest that did not fit, one per setting, fastest first
  size_t considered = 0;
  size_t fitting = 0;
};

StepTime predict_step_time(const PlanRequest& request, const Candidate& c);

// Throws Error when the request is malformed (no activation function, a zero target batch).
PlanResult plan(const PlanRequest& request, size_t keep_rejected = 5);

}  // namespace tierzero::profile
