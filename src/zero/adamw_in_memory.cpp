// AdamW over device- or host-resident optimizer states (see adamw_in_memory.hpp).
#include "adamw_in_memory.hpp"

#include <cstddef>
#include <vector>

#include "segment_update.hpp"

namespace tierzero::zero {

void InMemoryAdamW::update(size_t unit, const kernels::AdamWParams& base) {
  const bool on_device = storage_.placement(unit).optimizer == Tier::device;
  kernels::Kernels& k = storage_.kernels_for(on_device ? Tier::device : Tier::host);
  float* param = storage_.master_ptr(unit);
  const float* grad = storage_.grad_shard_ptr(unit);
  float* m = storage_.arenas().ptr(StateBuffer::adam_m, unit);
  float* v = storage_.arenas().ptr(StateBuffer::adam_v, unit);
  const size_t n = storage_.plan().partition(unit).shard_numel;
  // (n) the 16-bit working parameters where the update may write them in its own pass: on the
  // device beside a device master, or bf16 in host memory (stage 3); else null, and they are
  // published after the update.
  void* working = on_device ? storage_.device_working_params(unit)
                            : static_cast<void*>(storage_.host_bf16_params(unit));
  // The whole unit in one call: each tensor's piece with its own weight decay.
  std::vector<kernels::AdamWSegment> segments;
  for_segments(storage_.plan().segments(unit), 0, n, base, static_cast<float>(config_.weight_decay),
               [&](size_t o, size_t count, const kernels::AdamWParams& p) {
                 segments.push_back({o, count, p.weight_decay});
               });
  k.adamw_update_segments(param, m, v, grad, working, storage_.working(), segments.data(),
                          segments.size(), base);
  if (!storage_.placement(unit).master_is_param && working == nullptr)
    storage_.publish_params(unit, param, 0, n, on_device);
}

}  // namespace tierzero::zero
