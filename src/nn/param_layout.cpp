// Builds a rank's unit-major flat parameter layout from the modules' declared tensors.
#include "tierzero/nn/param_layout.hpp"

#include <algorithm>
#include <cstdint>
#include <string>
#include <unordered_set>

#include "tierzero/core/error.hpp"

namespace tierzero::nn {

namespace {
constexpr size_t kAlignElems = 64;  // 256 bytes: SIMD loads, cuBLASLt pointers, O_DIRECT chunks
size_t align_up(size_t n) {
  return (n + kAlignElems - 1) / kAlignElems * kAlignElems;
}
}  // namespace

ParamLayout::ParamLayout(const std::vector<UnitDecl>& units, const TensorParallel& tp) : tp_(tp) {
  tp.validate();
  int max_layer = -1;
  size_t tensors = 0;
  for (const UnitDecl& u : units) {
    for (const TensorMeta& m : u.tensors) max_layer = std::max(max_layer, m.layer);
    tensors += u.tensors.size();
  }
  units_.reserve(units.size());  // no regrowth copies: a model of 100k blocks has 1.2M tensors
  tensors_.reserve(tensors);
  index_.assign(static_cast<size_t>(max_layer + 2) * kNumParamKinds, SIZE_MAX);

  std::unordered_set<std::string> names;  // a set: a model of 100k blocks checks in linear time
  for (const UnitDecl& decl : units) {
    TZ_CHECK(decl.name.empty() == false, "a parameter unit has no name", "internal error");
    TZ_CHECK(names.insert(decl.name).second, "two parameter units are called " + decl.name,
             "internal error: unit names must be unique");
    units_.push_back(ParamUnit{decl.name, total_, 0, {}, decl.block, decl.tied});
    for (const TensorMeta& meta : decl.tensors) {
      ParamTensor t{meta, meta.local_shape(tp.size), total_, 0, units_.size() - 1};
      t.numel = t.shape.numel();
      const size_t slot =
          static_cast<size_t>(meta.layer + 1) * kNumParamKinds + static_cast<size_t>(meta.kind);
      TZ_CHECK(index_[slot] == SIZE_MAX, "parameter " + meta.name() + " is declared twice",
               "internal error in the modules' declarations");
      index_[slot] = tensors_.size();
      total_ = align_up(total_ + t.numel);
      count_ += t.numel;
      units_.back().tensors.push_back(tensors_.size());
      tensors_.push_back(std::move(t));
    }
    units_.back().numel = total_ - units_.back().offset;
  }
}

const ParamTensor& ParamLayout::get(ParamKind kind, int layer) const {
  size_t slot = static_cast<size_t>(layer + 1) * kNumParamKinds + static_cast<size_t>(kind);
  TZ_CHECK(
      layer >= -1 && slot < index_.size() && index_[slot] != SIZE_MAX,
      std::string("no parameter ") + param_kind_name(kind) + " in layer " + std::to_string(layer),
      "");
  return tensors_[index_[slot]];
}

const ParamTensor* ParamLayout::find(ParamKind kind, int layer) const {
  const size_t slot = static_cast<size_t>(layer + 1) * kNumParamKinds + static_cast<size_t>(kind);
  if (layer < -1 || slot >= index_.size() || index_[slot] == SIZE_MAX) return nullptr;
  return &tensors_[index_[slot]];
}

size_t ParamLayout::unit_index(const std::string& name) const {
  for (size_t u = 0; u < units_.size(); ++u)
    if (units_[u].name == name) return u;
  std::string known;
  for (const ParamUnit& u : units_) known += (known.empty() ? "" : ", ") + u.name;
  TZ_THROW("no parameter unit '" + name + "'", "the layout's units are " + known);
}

}  // namespace tierzero::nn
