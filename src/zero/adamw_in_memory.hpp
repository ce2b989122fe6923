// InMemoryAdamW: the optimizer step for units whose optimizer states live in memory — the
// device's AdamW kernel for device-resident states, the CPU kernel for host-resident ones (on the
// CPU backend both are the same function, so the placements agree bitwise). Each shard is updated
// one tensor piece at a time (segment_update.hpp) so weight decay follows the tensor, and a
// separate master's new values are published to the working parameters. Internal to zero.
#pragma once

#include <cstddef>

#include "shard_storage.hpp"
#include "tierzero/kernels/kernels.hpp"
#include "tierzero/zero/store_config.hpp"

namespace tierzero::zero {

class InMemoryAdamW {
 public:
  InMemoryAdamW(ShardStorage& storage, const AdamWConfig& config)
      : storage_(storage), config_(config) {}
  // `base` carries lr, betas, eps, the gradient scale and the step; decay comes per tensor.
  void update(size_t unit, const kernels::AdamWParams& base);

 private:
  ShardStorage& storage_;
  AdamWConfig config_;
};

}  // namespace tierzero::zero
