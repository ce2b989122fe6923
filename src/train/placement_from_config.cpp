// The config's placement, host budget and NVMe staging (see placement_from_config.hpp).
#include "tierzero/train/placement_from_config.hpp"

#include <algorithm>

#include <unistd.h>

#include "tierzero/core/error.hpp"
#include "tierzero/offload/host_pool.hpp"
#include "tierzero/train/config_bridges.hpp"

namespace tierzero::train {

Tier tier_from_name(const std::string& name, const std::string& key) {
  if (name == "none" || name == "device") return Tier::device;
  if (name == "cpu" || name == "host") return Tier::host;
  if (name == "nvme") return Tier::nvme;
  TZ_THROW(key + " = \"" + name + "\" is not a place for state",
           "use none (the device), cpu (pinned host memory) or nvme");
}

const char* offload_device_name(Tier tier) {
  return tier == Tier::device ? "none" : tier == Tier::host ? "cpu" : "nvme";
}

zero::PlacementConfig placement_from_config(const TrainConfig& c) {
  const OffloadConfig& op = c.zero.offload_param;
  const OffloadConfig& oo = c.zero.offload_optimizer;
  zero::PlacementConfig p;
  p.param = {tier_from_name(op.device, "zero_optimization.offload_param.device"), op.ratio};
  p.optimizer = {tier_from_name(oo.device, "zero_optimization.offload_optimizer.device"), oo.ratio};
  p.nvme_chunk_elems = static_cast<size_t>(std::max<int64_t>(oo.buffer_size, 0));
  p.working = working_dtype(c);
  p.nvme_grads = tier_from_name(c.offload_gradients, "tierzero.offload_gradients");
  TZ_CHECK(p.nvme_grads != Tier::device,
           "tierzero.offload_gradients = \"" + c.offload_gradients + "\" is not a place for them",
           "gradient shards of an NVMe optimizer live on cpu or nvme");
  return p;
}

void check_offload_gradients(const TrainConfig& c) {
  // Otherwise the setting would be ignored silently (no store, or no NVMe optimizer to read them).
  if (c.offload_gradients == "nvme")
    TZ_CHECK(c.zero.offload_optimizer.device == "nvme" && c.zero.stage >= 2,
             "tierzero.offload_gradients = nvme needs the optimizer on NVMe and ZeRO stage 2 or 3 "
             "(offload_optimizer.device is " +
                 c.zero.offload_optimizer.device + ", stage " + std::to_string(c.zero.stage) + ")",
             "set zero_optimization.offload_optimizer.device to nvme and stage to 2 or 3, or "
             "offload_gradients to cpu");
}

size_t nvme_bounce_bytes(const AioConfig& aio) {
  return static_cast<size_t>(std::max<int64_t>(aio.queue_depth, 0)) *
         offload::HostPool::round_size(static_cast<size_t>(std::max<int64_t>(aio.block_size, 0)));
}

NvmeStaging nvme_staging_from(const TrainConfig& c) {
  NvmeStaging s;
  s.param_buffers = static_cast<size_t>(std::max<int64_t>(c.zero.offload_param.buffer_count, 0));
  s.optimizer_buffers =
      static_cast<size_t>(std::max<int64_t>(c.zero.offload_optimizer.buffer_count, 0));
  s.bounce_bytes = nvme_bounce_bytes(c.aio);
  return s;
}

size_t physical_memory_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page = sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? static_cast<size_t>(pages) * static_cast<size_t>(page)
                               : size_t{8000000000};
}

size_t node_host_budget_bytes(const TrainConfig& c) {
  if (c.host_memory_budget_gb > 0.0)
    return static_cast<size_t>(c.host_memory_budget_gb * 1073741824.0);
  return static_cast<size_t>(0.8 * static_cast<double>(physical_memory_bytes()));
}

size_t host_budget_per_rank(size_t node_budget_bytes, size_t ranks_on_node) {
  return node_budget_bytes / std::max<size_t>(ranks_on_node, 1);
}

}  // namespace tierzero::train
