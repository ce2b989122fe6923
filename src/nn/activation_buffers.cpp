// Allocating and counting a holder's activation buffers from its one list.
#include "tierzero/nn/activation_buffers.hpp"

namespace tierzero::nn {

size_t allocate_buffers(const std::function<void(const BufferVisitor&)>& visit,
                        DeviceAllocator& allocator) {
  size_t total = 0;
  visit([&](DeviceBuffer& buffer, size_t bytes, const char* label) {
    buffer = allocator.allocate(bytes, Category::activation, label);
    total += DeviceAllocator::round_size(bytes);
  });
  return total;
}

size_t rounded_bytes(const std::function<void(const BufferVisitor&)>& visit) {
  size_t total = 0;
  visit([&](DeviceBuffer&, size_t bytes, const char*) {
    total += DeviceAllocator::round_size(bytes);
  });
  return total;
}

}  // namespace tierzero::nn
