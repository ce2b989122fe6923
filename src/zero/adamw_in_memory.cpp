// AdamW over device- or host-resident optimizer states (see adamw_in_memory.hpp).
#include "adamw_in_memory.hpp"

#include <cstddef>

#include "segment_update.hpp"
#include "tierzero/kernels/cpu_ops.hpp"

namespace tierzero::zero {

void InMemoryAdamW::update(size_t unit, const kernels::AdamWParams& base) {
  const bool on_device = storage_.placement(unit).optimizer == Tier::device;
  kernels::Kernels& k = storage_.kernels_for(on_device ? Tier::device : Tier::host);
  float* param = storage_.master_ptr(unit);
  const float* grad = storage_.grad_shard_ptr(unit);
  float* m = storage_.arenas().ptr(StateBuffer::adam_m, unit);
  float* v = storage_.arenas().ptr(StateBuffer::adam_v, unit);
  const size_t n = storage_.plan().partition(unit).shard_numel;
  // (n) bf16 working parameters in host memory, rounded in the update's own pass; or null.
  uint16_t* working = on_device ? nullptr : storage_.host_bf16_params(unit);
  // (n) 16-bit working parameters on the device, written by the update kernel itself; or null.
  void* device_working = on_device ? storage_.device_working_params(unit) : nullptr;
  const DType type = storage_.working();
  for_segments(storage_.plan().segments(unit), 0, n, base, static_cast<float>(config_.weight_decay),
               [&](size_t o, size_t count, const kernels::AdamWParams& p) {
                 if (working != nullptr)
                   kernels::cpu::adamw_update_with_copy(param + o, m + o, v + o, grad + o,
                                                        working + o, count, p);
                 else if (device_working != nullptr)
                   k.adamw_update_with_copy(
                       param + o, m + o, v + o, grad + o,
                       static_cast<std::byte*>(device_working) + o * dtype_size(type), type, count,
                       p);
                 else
                   k.adamw_update(param + o, m + o, v + o, grad + o, count, p);
               });
  if (!storage_.placement(unit).master_is_param && working == nullptr && device_working == nullptr)
    storage_.publish_params(unit, param, 0, n, on_device);
}

}  // namespace tierzero::zero
