// units_from_layout / group_units: nn's parameter layout as the partition store's unit specs,
// optionally with several blocks per store unit; StoreParamProvider: the GPT's unit calls mapped
// onto the store's (possibly larger) units.
#include "tierzero/train/store_provider.hpp"

#include <string>
#include <utility>

#include "tierzero/core/error.hpp"

namespace tierzero::train {

UnitGrouping group_units(const nn::ParamLayout& layout, size_t blocks_per_unit) {
  TZ_CHECK(blocks_per_unit >= 1, "blocks_per_unit is 0",
           "tierzero.blocks_per_unit is the number of transformer blocks per store unit (>= 1)");
  UnitGrouping g;
  const auto& units = layout.units();
  size_t blocks_in_current = 0;
  size_t group_start = 0;  // elements: where the current store unit starts in the layout
  for (size_t i = 0; i < units.size(); ++i) {
    const nn::ParamUnit& u = units[i];
    // A block joins the previous store unit while that one is a block group with room left and
    // ends with the block before it (a rank's interleaved chunks are not contiguous in the
    // model); units are back to back in the layout, so a group is one flat range.
    const bool join = u.block >= 0 && blocks_in_current > 0 &&
                      blocks_in_current < blocks_per_unit && units[i - 1].block + 1 == u.block;
    if (!join) {
      g.specs.push_back(zero::UnitSpec{u.name, 0, {}});
      g.members.push_back(0);
      g.start.push_back(u.offset);
      blocks_in_current = 0;
      group_start = u.offset;
    }
    zero::UnitSpec& spec = g.specs.back();
    const size_t group_offset = u.offset - group_start;
    TZ_CHECK(group_offset == spec.numel,
             "unit " + u.name + " does not follow its group in the layout",
             "internal error: nn units are expected back to back");
    if (join) {
      const int first = units[i - g.members.back()].block;
      spec.name = "blocks." + std::to_string(first) + "-" + std::to_string(u.block);
    }
    for (size_t ti : u.tensors) {
      const nn::ParamTensor& t = layout.tensors()[ti];
      spec.tensors.push_back(
          zero::TensorSpec{t.offset - u.offset + group_offset, t.numel, t.decay, t.replicated()});
    }
    spec.numel += u.numel;
    g.store_unit.push_back(g.specs.size() - 1);
    g.offset.push_back(group_offset);
    ++g.members.back();
    if (u.block >= 0) ++blocks_in_current;
  }
  return g;
}

std::vector<zero::UnitSpec> units_from_layout(const nn::ParamLayout& layout,
                                              size_t blocks_per_unit) {
  return group_units(layout, blocks_per_unit).specs;
}

StoreParamProvider::StoreParamProvider(zero::PartitionStore& store, UnitGrouping grouping)
    : store_(store),
      grouping_(std::move(grouping)),
      grads_open_(grouping_.store_unit.size(), 0),
      done_(grouping_.specs.size(), 0) {}

const float* StoreParamProvider::acquire_params(size_t unit) {
  return store_.acquire_params(grouping_.store_unit.at(unit)) + grouping_.offset[unit];
}

const void* StoreParamProvider::acquire_params16(size_t unit) {
  const size_t g = grouping_.store_unit.at(unit);
  const auto* unit_bits = static_cast<const unsigned char*>(store_.acquire_params16(g));
  return unit_bits + grouping_.offset[unit] * dtype_size(store_.config().compute);
}

DType StoreParamProvider::params16_type() const {
  return store_.config().compute;
}

void StoreParamProvider::release_params(size_t unit) {
  store_.release_params(grouping_.store_unit.at(unit));
}

float* StoreParamProvider::acquire_grads(size_t unit) {
  grads_open_.at(unit) = 1;
  return store_.acquire_grads(grouping_.store_unit[unit]) + grouping_.offset[unit];
}

void StoreParamProvider::grads_done(size_t unit) {
  TZ_CHECK(grads_open_.at(unit),
           "grads_done for unit " + std::to_string(unit) + " without open gradients",
           "call acquire_grads first");
  grads_open_[unit] = 0;
  const size_t g = grouping_.store_unit[unit];
  if (++done_[g] < grouping_.members[g]) return;
  done_[g] = 0;
  store_.grads_done(g);
}

}  // namespace tierzero::train
