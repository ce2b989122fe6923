// The bridge between the GPT and the ZeRO store, for the tests: nn sits above zero and zero knows
// nothing of GPT, so the store takes the model as plain unit specs and exposes the same
// unit-at-a-time calls as nn::ParamProvider; this adapter (which the train layer will own later)
// converts nn::ParamLayout into those specs and forwards ParamProvider's calls to the store.
#pragma once

#include <vector>

#include "tierzero/nn/param_layout.hpp"
#include "tierzero/nn/param_provider.hpp"
#include "tierzero/zero/partition_store.hpp"

namespace tierzero::testing {

// One UnitSpec per nn unit, tensor offsets made relative to the unit.
inline std::vector<zero::UnitSpec> units_from_layout(const nn::ParamLayout& layout) {
  std::vector<zero::UnitSpec> out;
  for (const nn::ParamUnit& u : layout.units()) {
    zero::UnitSpec spec;
    spec.name = u.name;
    spec.numel = u.numel;
    for (size_t ti : u.tensors) {
      const nn::ParamTensor& t = layout.tensors()[ti];
      spec.tensors.push_back(zero::TensorSpec{t.offset - u.offset, t.numel, t.decay});
    }
    out.push_back(std::move(spec));
  }
  return out;
}

class StoreParamProvider final : public nn::ParamProvider {
 public:
  explicit StoreParamProvider(zero::PartitionStore& store) : store_(store) {}
  const float* acquire_params(size_t unit) override { return store_.acquire_params(unit); }
  void release_params(size_t unit) override { store_.release_params(unit); }
  float* acquire_grads(size_t unit) override { return store_.acquire_grads(unit); }
  void grads_done(size_t unit) override { store_.grads_done(unit); }

 private:
  zero::PartitionStore& store_;
};

}  // namespace tierzero::testing
