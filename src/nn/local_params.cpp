// LocalParams: the resident, unsharded parameter provider (the reference path), and what every
// provider without a 16-bit working copy says when asked for one.
#include "tierzero/nn/param_provider.hpp"

#include <string>

#include "tierzero/core/error.hpp"

namespace tierzero::nn {

const void* ParamProvider::acquire_params16(size_t unit) {
  TZ_THROW("the parameter provider was asked for unit " + std::to_string(unit) +
               " in 16 bits, and it holds fp32 parameters only",
           "16-bit compute needs bf16 or fp16 working parameters: the partition store's with "
           "bf16 or fp16 training, or LocalParams built with a working type");
}

LocalParams::LocalParams(const ParamLayout& layout, DeviceAllocator& allocator, DType working)
    : layout_(layout), device_(allocator.device()), working_(working) {
  const size_t bytes = layout.total_numel() * sizeof(float);
  params_ = allocator.allocate(bytes, Category::param, "params");
  grads_ = allocator.allocate(bytes, Category::grad, "grads");
  device_.fill_zero(params_.data(), bytes, device_.default_stream());
  device_.fill_zero(grads_.data(), bytes, device_.default_stream());
  if (working_ == DType::f32) return;
  TZ_CHECK(working_ == DType::bf16 || working_ == DType::f16,
           std::string("LocalParams: a working copy in ") + dtype_name(working_),
           "a working copy is bf16 or fp16");
  working_copy_ = allocator.allocate(layout.total_numel() * dtype_size(working_), Category::param,
                                     "params (working copy)");
  round_working();
}

const float* LocalParams::acquire_params(size_t unit) {
  return params_.f32() + layout_.units()[unit].offset;
}

const void* LocalParams::acquire_params16(size_t unit) {
  if (working_ == DType::f32) return ParamProvider::acquire_params16(unit);  // the Error
  return static_cast<const char*>(working_copy_.data()) +
         layout_.units()[unit].offset * dtype_size(working_);
}

void LocalParams::round_working() {
  if (working_ == DType::f32) return;
  device_.kernels().convert_from_f32(working_copy_.data(), working_, params_.f32(),
                                     layout_.total_numel());
}

float* LocalParams::acquire_grads(size_t unit) {
  return grads_.f32() + layout_.units()[unit].offset;
}

void LocalParams::zero_grads() {
  device_.fill_zero(grads_.data(), layout_.total_numel() * sizeof(float), device_.default_stream());
}

}  // namespace tierzero::nn
