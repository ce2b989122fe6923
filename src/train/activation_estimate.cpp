// Activation estimate: the estimator's view of one rank's activations (activation_estimate.hpp).
#include "tierzero/train/activation_estimate.hpp"

#include "tierzero/train/pipeline_executor.hpp"

namespace tierzero::train {

Tier checkpoint_tier_of(const ActivationCheckpointPlacement& p) {
  return p.device == "nvme" ? Tier::nvme : p.device == "cpu" ? Tier::host : Tier::device;
}

ActivationEstimate activation_estimate(const nn::GPTConfig& config, const nn::ActivationDims& dims,
                                       const std::vector<nn::PipelineStage>& chunks,
                                       nn::PipelineSchedule schedule, size_t micro_batches,
                                       nn::Recompute recompute, Tier tier, size_t device_slots) {
  const bool external = recompute.is_full() && tier != Tier::device;
  const bool pipeline = !chunks.empty() && chunks.front().stages > 1;
  ActivationEstimate a;
  if (pipeline) {
    a.activation_bytes = PipelineExecutor::activation_bytes_for(config, dims, chunks, schedule,
                                                                micro_batches, recompute, external);
  } else {
    a.activation_bytes = nn::GPT::micro_batch_bytes_for(
                             config, dims, nn::PipelineStage::whole(config), recompute, external) +
                         nn::ModelScratch::bytes_for(dims, recompute);
  }
  if (!external) return a;
  a.checkpoints.tier = tier;
  a.checkpoints.bytes = nn::GPT::checkpoint_bytes_for(dims);
  a.checkpoints.device_slots = device_slots;
  a.checkpoints.stored = pipeline
                             ? PipelineExecutor::stored_checkpoints(chunks, schedule, micro_batches)
                             : config.num_layers;
  return a;
}

}  // namespace tierzero::train
