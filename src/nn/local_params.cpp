// LocalParams: the resident, unsharded parameter provider (the reference path).
#include "tierzero/nn/param_provider.hpp"

namespace tierzero::nn {

LocalParams::LocalParams(const ParamLayout& layout, DeviceAllocator& allocator)
    : layout_(layout), device_(allocator.device()) {
  const size_t bytes = layout.total_numel() * sizeof(float);
  params_ = allocator.allocate(bytes, Category::param, "params");
  grads_ = allocator.allocate(bytes, Category::grad, "grads");
  device_.fill_zero(params_.data(), bytes, device_.default_stream());
  device_.fill_zero(grads_.data(), bytes, device_.default_stream());
}

const float* LocalParams::acquire_params(size_t unit) {
  return params_.f32() + layout_.units()[unit].offset;
}

float* LocalParams::acquire_grads(size_t unit) {
  return grads_.f32() + layout_.units()[unit].offset;
}

void LocalParams::zero_grads() {
  device_.fill_zero(grads_.data(), layout_.total_numel() * sizeof(float), device_.default_stream());
}

}  // namespace tierzero::nn
