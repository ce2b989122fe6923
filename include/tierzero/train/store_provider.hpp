// The bridge between the GPT and the ZeRO partition store. nn sits above zero and zero knows
// nothing of GPT, so the store takes the model as plain unit specs and exposes the same
// unit-at-a-time calls as nn::ParamProvider; the train layer, which may use both, owns this
// adapter: units_from_layout converts nn::ParamLayout into those specs, and StoreParamProvider
// forwards ParamProvider's calls to the store so the GPT runs on it unchanged.
#pragma once

#include <cstddef>
#include <vector>

#include "tierzero/nn/param_layout.hpp"
#include "tierzero/nn/param_provider.hpp"
#include "tierzero/zero/partition_store.hpp"

namespace tierzero::train {

// One UnitSpec per nn unit, in layout order, tensor offsets made relative to the unit.
std::vector<zero::UnitSpec> units_from_layout(const nn::ParamLayout& layout);

class StoreParamProvider final : public nn::ParamProvider {
 public:
  // `store` must outlive the provider.
  explicit StoreParamProvider(zero::PartitionStore& store) : store_(store) {}
  const float* acquire_params(size_t unit) override { return store_.acquire_params(unit); }
  void release_params(size_t unit) override { store_.release_params(unit); }
  float* acquire_grads(size_t unit) override { return store_.acquire_grads(unit); }
  void grads_done(size_t unit) override { store_.grads_done(unit); }

 private:
  zero::PartitionStore& store_;
};

}  // namespace tierzero::train
