// ParamProvider: how the GPT gets at its parameters and where it puts its gradients, one unit at
// a time. The model never knows where bytes live: LocalParams keeps everything resident (the
// fp32 one-rank reference); the ZeRO partition store implements the same calls with gathers,
// prefetch and reduce-scatter.
#pragma once

#include <cstddef>

#include "tierzero/core/dtype.hpp"
#include "tierzero/device/device_allocator.hpp"
#include "tierzero/nn/param_layout.hpp"

namespace tierzero::nn {

class ParamProvider {
 public:
  virtual ~ParamProvider() = default;
  // Full parameters of `unit` on the compute device, valid until release_params(unit).
  // Calls nest: a unit may be acquired again before it is released (the tied head uses wte).
  virtual const float* acquire_params(size_t unit) = 0;  // (units[unit].numel)
  // The same in 16 bits, for 16-bit compute: a provider holding a 16-bit working copy hands it
  // out as it is, of params16_type(); released by release_params. A provider that hands out fp32
  // only (params16_type() fp32: LocalParams without a working copy, the fp32 reference) throws
  // an Error.
  virtual const void* acquire_params16(size_t unit);  // (units[unit].numel) params16_type()
  virtual DType params16_type() const { return DType::f32; }
  virtual void release_params(size_t unit) = 0;
  // Where backward accumulates the full gradient of `unit` (+=), valid until grads_done(unit).
  virtual float* acquire_grads(size_t unit) = 0;  // (units[unit].numel)
  virtual void grads_done(size_t unit) = 0;
};

// Another provider's units from `first` on, as units 0, 1, ...: one model chunk's view of a rank
// that holds several (the interleaved pipeline schedule), whose layout concatenates the chunks'.
class UnitOffsetProvider final : public ParamProvider {
 public:
  UnitOffsetProvider(ParamProvider& base, size_t first) : base_(base), first_(first) {}
  const float* acquire_params(size_t unit) override { return base_.acquire_params(first_ + unit); }
  const void* acquire_params16(size_t unit) override {
    return base_.acquire_params16(first_ + unit);
  }
  DType params16_type() const override { return base_.params16_type(); }
  void release_params(size_t unit) override { base_.release_params(first_ + unit); }
  float* acquire_grads(size_t unit) override { return base_.acquire_grads(first_ + unit); }
  void grads_done(size_t unit) override { base_.grads_done(first_ + unit); }

 private:
  ParamProvider& base_;
  size_t first_;
};

// Everything resident on the device in two flat buffers (params, grads); with a 16-bit working
// type a third, the parameters rounded to it, which acquire_params16 hands out for 16-bit
// compute on one rank (a benchmark's step, a test), as the partition store's working copy.
class LocalParams final : public ParamProvider {
 public:
  // working: fp32 (no copy: the reference), bf16 or fp16.
  LocalParams(const ParamLayout& layout, DeviceAllocator& allocator, DType working = DType::f32);

  const float* acquire_params(size_t unit) override;
  const void* acquire_params16(size_t unit) override;  // the copy; an Error without one
  DType params16_type() const override { return working_; }
  void release_params(size_t) override {}
  float* acquire_grads(size_t unit) override;
  void grads_done(size_t) override {}

  float* params() { return params_.f32(); }  // (total_numel)
  float* grads() { return grads_.f32(); }    // (total_numel)
  // (total_numel) of params16_type(): the working copy, null without one. Whoever changes
  // params() rewrites it: round_working(), or an update that writes it in its own pass
  // (Kernels::adamw_update_segments' copy, as train::AdamWOptimizer does).
  void* working() { return working_copy_.data(); }
  void round_working();
  size_t numel() const { return layout_.total_numel(); }
  void zero_grads();

 private:
  const ParamLayout& layout_;
  Device& device_;
  DeviceBuffer params_;  // (total_numel) fp32
  DeviceBuffer grads_;   // (total_numel) fp32
  DType working_;
  DeviceBuffer working_copy_;  // (total_numel) working_, empty at fp32
};

}  // namespace tierzero::nn
