// Activation estimate: one rank's activation bytes and its block checkpoints' placement as the
// estimator takes them (profile::EstimateInput::activation_bytes and ::checkpoints), from the
// model, its pipeline chunks and where tierzero.activation_checkpoints puts the checkpoints. With
// the checkpoints on the host or NVMe the micro-batches hold only their stage's input and output
// of the residual stream, and zero::CheckpointTier the rest (its device slots, its tier copies).
#pragma once

#include <cstddef>
#include <vector>

#include "tierzero/core/memory_tracker.hpp"
#include "tierzero/nn/gpt.hpp"
#include "tierzero/nn/pp/pipeline_schedule.hpp"
#include "tierzero/nn/recompute.hpp"
#include "tierzero/profile/estimator.hpp"
#include "tierzero/train/train_config.hpp"

namespace tierzero::train {

struct ActivationEstimate {
  size_t activation_bytes = 0;  // Category::activation on the device
  profile::CheckpointPlacementInput checkpoints;
};

// The tier tierzero.activation_checkpoints.device names (device, cpu = host, nvme).
Tier checkpoint_tier_of(const ActivationCheckpointPlacement& p);

// chunks: the rank's pipeline chunks (empty or one whole-model stage: no pipeline, one
// micro-batch in flight). tier: where the checkpoints live (device: in the micro-batches).
ActivationEstimate activation_estimate(const nn::GPTConfig& config, const nn::ActivationDims& dims,
                                       const std::vector<nn::PipelineStage>& chunks,
                                       nn::PipelineSchedule schedule, size_t micro_batches,
                                       nn::Recompute recompute, Tier tier, size_t device_slots);

}  // namespace tierzero::train
