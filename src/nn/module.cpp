// The pieces every module shares: finding its unit and tensors in a layout, and zeroing what a
// backward accumulates into.
#include "tierzero/nn/module.hpp"

#include <utility>

namespace tierzero::nn {

void ModuleContext::zero(float* p, size_t n) const {
  device.fill_zero(p, n * sizeof(float), stream);
}

void ParamRef::bind(const ParamLayout& layout) {
  const ParamTensor& t = layout.get(kind_, layer_);
  offset_ = layout.offset_in_unit(t);
  shape_ = t.shape;
}

Module::Module(std::string name, std::string unit_name, size_t index)
    : name_(std::move(name)), unit_name_(std::move(unit_name)), index_(index) {}

void Module::bind(const ParamLayout& layout) {
  unit_ = layout.unit_index(unit_name_);
}

}  // namespace tierzero::nn
