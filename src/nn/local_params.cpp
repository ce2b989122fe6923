// LocalParams: the resident, unsharded parameter provider (the reference path), and what every
// provider without a 16-bit working copy says when asked for one.
#include "tierzero/nn/param_provider.hpp"

#include "tierzero/core/error.hpp"

namespace tierzero::nn {

const void* ParamProvider::acquire_params16(size_t unit) {
  TZ_THROW("the parameter provider was asked for unit " + std::to_string(unit) +
               " in 16 bits, and it holds fp32 parameters only",
           "16-bit compute needs bf16 or fp16 working parameters in the partition store");
}

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
