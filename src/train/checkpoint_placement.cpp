// Checkpoint placement: the config's tier for the block checkpoints (checkpoint_placement.hpp).
#include "checkpoint_placement.hpp"

#include "tierzero/train/activation_estimate.hpp"
#include "tierzero/train/config_bridges.hpp"

namespace tierzero::train {

zero::CheckpointTierConfig checkpoint_tier_config(const TrainConfig& c, size_t host_budget_bytes) {
  zero::CheckpointTierConfig t;
  const ActivationCheckpointPlacement& a = c.activation_checkpoints;
  t.tier = checkpoint_tier_of(a);
  t.device_slots = static_cast<size_t>(a.buffer_count);
  t.host_budget_bytes = host_budget_bytes;
  if (t.tier == Tier::nvme) {
    OffloadConfig o;
    o.device = "nvme";
    o.nvme_path = a.nvme_path;
    t.nvme = nvme_options_from(c.aio, o);
  }
  return t;
}

std::unique_ptr<CheckpointPlacement> place_checkpoints(const TrainConfig& c,
                                                       DeviceAllocator& allocator,
                                                       offload::HostPool* shared_pool,
                                                       size_t host_budget_bytes,
                                                       const std::vector<nn::GPT*>& chunks) {
  const zero::CheckpointTierConfig t = checkpoint_tier_config(c, host_budget_bytes);
  if (!c.activation_checkpointing || t.tier == Tier::device) return nullptr;
  auto p = std::make_unique<CheckpointPlacement>();
  p->tier = std::make_unique<zero::CheckpointTier>(t, allocator, shared_pool);
  p->store = std::make_unique<TierCheckpointStore>(*p->tier);
  for (nn::GPT* chunk : chunks) chunk->set_checkpoint_store(p->store.get());
  return p;
}

}  // namespace tierzero::train
