// Control-value exchanges over a group (see group_exchange.hpp).
#include "group_exchange.hpp"

namespace tierzero::zero {

std::vector<float> all_gather_pair(comm::Communicator& group, DeviceAllocator& allocator, float a,
                                   float b, const char* label) {
  Device& device = allocator.device();
  const auto n = static_cast<size_t>(group.size());
  DeviceBuffer buf = allocator.allocate(2 * n * sizeof(float), Category::comm,
                                        label);  // (ranks, 2) fp32
  Stream& s = device.default_stream();
  const float mine[2] = {a, b};
  float* slot = buf.f32() + 2 * static_cast<size_t>(group.rank());
  device.copy(slot, mine, sizeof(mine), CopyKind::host_to_device, s);
  s.synchronize();
  group.all_gather(slot, buf.f32(), 2, DType::f32);
  std::vector<float> all(2 * n);  // (ranks, 2)
  device.copy(all.data(), buf.data(), all.size() * sizeof(float), CopyKind::device_to_host, s);
  s.synchronize();
  return all;
}

double exact_group_sum(comm::Communicator& group, DeviceAllocator& allocator, double local,
                       const char* label) {
  const float hi = static_cast<float>(local);
  const float lo = static_cast<float>(local - static_cast<double>(hi));
  // One rank: the same total without the trip through the device (two host waits).
  if (group.size() == 1) return static_cast<double>(hi) + static_cast<double>(lo);
  const std::vector<float> all = all_gather_pair(group, allocator, hi, lo, label);
  double total = 0.0;
  for (size_t r = 0; r < all.size() / 2; ++r)
    total += static_cast<double>(all[2 * r]) + static_cast<double>(all[2 * r + 1]);
  return total;
}

}  // namespace tierzero::zero
