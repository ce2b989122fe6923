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

// The store's unit granularity: nn's units (embeddings, each block, final norm) with every
// `blocks_per_unit` consecutive blocks merged into one store unit ("blocks.0-1"), so that
// gathers and reduce-scatters move bigger pieces (fewer, larger collectives) at the price of
// more live memory. 1 keeps nn's units.
struct UnitGrouping {
  std::vector<size_t> store_unit;     // per nn unit: the store unit holding it
  std::vector<size_t> offset;         // per nn unit: elements from the store unit's start
  std::vector<size_t> members;        // per store unit: how many nn units it holds
  std::vector<size_t> start;          // per store unit: its offset in the layout (elements)
  std::vector<zero::UnitSpec> specs;  // the store's units, tensor offsets relative to each
};
// Throws Error when blocks_per_unit is 0.
UnitGrouping group_units(const nn::ParamLayout& layout, size_t blocks_per_unit = 1);

// One UnitSpec per store unit (see group_units), in layout order.
std::vector<zero::UnitSpec> units_from_layout(const nn::ParamLayout& layout,
                                              size_t blocks_per_unit = 1);

class StoreParamProvider final : public nn::ParamProvider {
 public:
  // `store` must outlive the provider; it was built from grouping.specs.
  StoreParamProvider(zero::PartitionStore& store, UnitGrouping grouping);
  const float* acquire_params(size_t unit) override;
  // The store's 16-bit hand-out (StoreConfig::compute the 16-bit working type).
  const void* acquire_params16(size_t unit) override;
  DType params16_type() const override;
  void release_params(size_t unit) override;
  float* acquire_grads(size_t unit) override;
  // A store unit's gradients are done (and reduced) when all its nn units' are.
  void grads_done(size_t unit) override;
  const UnitGrouping& grouping() const { return grouping_; }

 private:
  zero::PartitionStore& store_;
  UnitGrouping grouping_;
  std::vector<char> grads_open_;  // per nn unit
  std::vector<size_t> done_;      // per store unit: its nn units whose gradients are done
};

}  // namespace tierzero::train
