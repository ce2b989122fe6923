// Where a run's state lives, read from its config: the one translation of the offload device
// names (DeepSpeed's "none", "cpu", "nvme"; TierZero's "device" and "host"), the host budget and
// its split among the ranks of a node, and the NVMe staging (buffer counts and the engine's bounce
// buffers) into what the partition store takes. The trainer (store_config_from) and the estimator
// and planner (estimate_input_from, `tierzero estimate` and `plan`) all come through here, so a
// prediction cannot place or stage a byte differently from the run it predicts.
#pragma once

#include <cstddef>
#include <string>

#include "tierzero/core/memory_tracker.hpp"
#include "tierzero/train/train_config.hpp"
#include "tierzero/zero/placement.hpp"

namespace tierzero::train {

// "none" or "device": the device; "cpu" or "host": pinned host memory; "nvme": the NVMe swap.
// Throws Error naming `key` (the config key or flag the name came from) and the names accepted.
Tier tier_from_name(const std::string& name, const std::string& key);

// The offload device name a config writes for a tier: "none", "cpu" or "nvme".
const char* offload_device_name(Tier tier);

// The placement the config asks for: offload_param's and offload_optimizer's tiers and ratios,
// the NVMe chunk (offload_optimizer.buffer_size elements, as DeepSpeed's swapper uses it), the
// working parameters' type and where gradient shards go when the optimizer is on NVMe
// (tierzero.offload_gradients: cpu or nvme).
zero::PlacementConfig placement_from_config(const TrainConfig& config);

// Throws Error when tierzero.offload_gradients = nvme cannot apply: it needs the optimizer on
// NVMe and stage 2 or 3 (the trainer's start-up check, in the config's words; zero's
// check_placement holds the store and the estimator to the same rule).
void check_offload_gradients(const TrainConfig& config);

// The host staging that NVMe offload needs beside the states themselves.
struct NvmeStaging {
  size_t param_buffers = 0;      // parameter shards staged ahead (offload_param.buffer_count)
  size_t optimizer_buffers = 0;  // the optimizer pipeline's slots (offload_optimizer.buffer_count)
  size_t bounce_bytes = 0;       // the NVMe engine's pinned bounce buffers (nvme_bounce_bytes)
};
NvmeStaging nvme_staging_from(const TrainConfig& config);

// The NVMe engine's pinned bounce buffers: aio.queue_depth buffers of aio.block_size bytes, each
// rounded to the host pool's size class, as the engine allocates them.
size_t nvme_bounce_bytes(const AioConfig& aio);

// The machine's physical memory in bytes (8e9 where the system does not say).
size_t physical_memory_bytes();

// The pinned host memory a node gives the partition store: tierzero.host_memory_budget_gb, or
// 80% of the machine's physical memory when that is 0.
size_t node_host_budget_bytes(const TrainConfig& config);

// One rank's share of a node's budget: the node's ranks share it equally (0 ranks count as 1).
size_t host_budget_per_rank(size_t node_budget_bytes, size_t ranks_on_node);

}  // namespace tierzero::train
