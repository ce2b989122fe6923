// Checkpoint placement: connects the model's nn::CheckpointStore to the tier the config names
// (tierzero.activation_checkpoints), a zero::CheckpointTier sharing the partition store's pinned
// pool when there is one, so one host budget covers both. Private to src/train.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "tierzero/device/device_allocator.hpp"
#include "tierzero/nn/checkpoint_store.hpp"
#include "tierzero/nn/gpt.hpp"
#include "tierzero/offload/host_pool.hpp"
#include "tierzero/train/train_config.hpp"
#include "tierzero/zero/checkpoint_tier.hpp"

namespace tierzero::train {

class TierCheckpointStore final : public nn::CheckpointStore {
 public:
  explicit TierCheckpointStore(zero::CheckpointTier& tier) : tier_(tier) {}
  float* begin_write(uint64_t mb, size_t position, size_t bytes) override {
    return tier_.begin_write(mb, position, bytes);
  }
  void end_write(uint64_t mb, size_t position, bool discard) override {
    tier_.end_write(mb, position, discard);
  }
  const float* begin_read(uint64_t mb, size_t position) override {
    return tier_.begin_read(mb, position);
  }
  void end_read(uint64_t mb, size_t position) override { tier_.end_read(mb, position); }
  void drop(uint64_t mb) override { tier_.drop(mb); }
  size_t device_slots() const override { return tier_.device_slots(); }

 private:
  zero::CheckpointTier& tier_;
};

// The tier and the store the chunks write to; destroy before the chunks' next micro-batch and
// before the pool it shares.
struct CheckpointPlacement {
  std::unique_ptr<zero::CheckpointTier> tier;
  std::unique_ptr<TierCheckpointStore> store;
};

// The tier named by c.activation_checkpoints.device ("cpu" or "nvme") with checkpointing on;
// null for "device" or with checkpointing off. shared_pool: the store's (may be null; then an own
// pool of host_budget_bytes). Points every chunk at it.
std::unique_ptr<CheckpointPlacement> place_checkpoints(const TrainConfig& c,
                                                       DeviceAllocator& allocator,
                                                       offload::HostPool* shared_pool,
                                                       size_t host_budget_bytes,
                                                       const std::vector<nn::GPT*>& chunks);

// The CheckpointTierConfig for the config (also the estimator's view of it).
zero::CheckpointTierConfig checkpoint_tier_config(const TrainConfig& c, size_t host_budget_bytes);

}  // namespace tierzero::train
