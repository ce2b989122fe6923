// ProfilingProvider: a ParamProvider that forwards to another one and tells the profile recorder
// where the training thread is — the unit being acquired, and the switch from forward to backward
// (the first gradient a pass asks for) — so that memory peaks are attributed to a phase and a
// unit without the GPT or the store knowing of the profiler.
#pragma once

#include <cstddef>

#include "tierzero/nn/param_provider.hpp"
#include "tierzero/profile/profile_recorder.hpp"

namespace tierzero::train {

class ProfilingProvider final : public nn::ParamProvider {
 public:
  // Both must outlive the provider.
  ProfilingProvider(nn::ParamProvider& inner, profile::ProfileRecorder& recorder)
      : inner_(inner), recorder_(recorder) {}

  // A new forward pass (training or evaluation) begins.
  void begin_pass(profile::Phase phase) {
    phase_ = phase;
    recorder_.set_phase(phase);
  }

  const float* acquire_params(size_t unit) override {
    recorder_.set_unit(static_cast<int64_t>(unit));
    return inner_.acquire_params(unit);
  }
  const void* acquire_params16(size_t unit) override {
    recorder_.set_unit(static_cast<int64_t>(unit));
    return inner_.acquire_params16(unit);
  }
  DType params16_type() const override { return inner_.params16_type(); }
  void release_params(size_t unit) override { inner_.release_params(unit); }
  float* acquire_grads(size_t unit) override {
    if (phase_ == profile::Phase::forward) {
      phase_ = profile::Phase::backward;
      recorder_.set_phase(phase_);
    }
    recorder_.set_unit(static_cast<int64_t>(unit));
    return inner_.acquire_grads(unit);
  }
  void grads_done(size_t unit) override { inner_.grads_done(unit); }

 private:
  nn::ParamProvider& inner_;
  profile::ProfileRecorder& recorder_;
  profile::Phase phase_ = profile::Phase::other;
};

}  // namespace tierzero::train
