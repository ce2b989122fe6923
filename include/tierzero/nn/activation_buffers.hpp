// BufferVisitor: how the activation holders (MicroBatch, ModelScratch, BlockActivations) list
// their buffers once, in allocation order, for both allocating them and counting their bytes,
// so that the byte count the estimator uses cannot drift from what is allocated.
#pragma once

#include <cstddef>
#include <functional>

#include "tierzero/device/device_allocator.hpp"

namespace tierzero::nn {

// Called once per buffer with its size in bytes (before rounding) and its label.
using BufferVisitor = std::function<void(DeviceBuffer& buffer, size_t bytes, const char* label)>;

// Allocates every visited buffer as Category::activation; returns the sum of the rounded sizes,
// which is what the MemoryTracker records when the allocator serves them fresh.
size_t allocate_buffers(const std::function<void(const BufferVisitor&)>& visit,
                        DeviceAllocator& allocator);
// The same sum without allocating.
size_t rounded_bytes(const std::function<void(const BufferVisitor&)>& visit);

}  // namespace tierzero::nn
