// RecordingParams: a ParamProvider that forwards to LocalParams and records every call, so tests
// can compare call patterns (the ZeRO store traces and prefetches along them).
#pragma once

#include <string>
#include <vector>

#include "tierzero/nn/param_provider.hpp"

namespace tierzero::testing {

class RecordingParams final : public nn::ParamProvider {
 public:
  explicit RecordingParams(nn::LocalParams& inner) : inner_(inner) {}
  const float* acquire_params(size_t unit) override {
    calls.push_back("acquire_params " + std::to_string(unit));
    return inner_.acquire_params(unit);
  }
  void release_params(size_t unit) override {
    calls.push_back("release_params " + std::to_string(unit));
    inner_.release_params(unit);
  }
  float* acquire_grads(size_t unit) override {
    calls.push_back("acquire_grads " + std::to_string(unit));
    return inner_.acquire_grads(unit);
  }
  void grads_done(size_t unit) override {
    calls.push_back("grads_done " + std::to_string(unit));
    inner_.grads_done(unit);
  }
  std::vector<std::string> calls;

 private:
  nn::LocalParams& inner_;
};

}  // namespace tierzero::testing
