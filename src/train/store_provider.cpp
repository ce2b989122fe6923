// units_from_layout: nn's parameter layout as the partition store's unit specs.
#include "tierzero/train/store_provider.hpp"

#include <utility>

namespace tierzero::train {

std::vector<zero::UnitSpec> units_from_layout(const nn::ParamLayout& layout) {
  std::vector<zero::UnitSpec> out;
  out.reserve(layout.units().size());
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

}  // namespace tierzero::train
