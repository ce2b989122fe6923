// Builds the unit-major flat parameter layout of GPT-2.
#include "tierzero/nn/param_layout.hpp"

#include "tierzero/core/error.hpp"

namespace tierzero::nn {

namespace {
constexpr size_t kAlignElems = 64;  // 256 bytes: SIMD loads, cuBLASLt pointers, O_DIRECT chunks
size_t align_up(size_t n) {
  return (n + kAlignElems - 1) / kAlignElems * kAlignElems;
}
}  // namespace

const char* param_kind_name(ParamKind k) {
  static const char* names[] = {"wte",      "wpe",      "ln1w", "ln1b", "qkvw", "qkvb",
                                "attprojw", "attprojb", "ln2w", "ln2b", "fcw",  "fcb",
                                "fcprojw",  "fcprojb",  "lnfw", "lnfb"};
  return names[static_cast<size_t>(k)];
}

std::string ParamTensor::name() const {
  if (layer < 0) return param_kind_name(kind);
  return "block." + std::to_string(layer) + "." + param_kind_name(kind);
}

ParamLayout::ParamLayout(const GPTConfig& c) {
  const auto C = static_cast<int64_t>(c.channels);
  const auto Vp = static_cast<int64_t>(c.padded_vocab_size);
  const auto maxT = static_cast<int64_t>(c.max_seq_len);
  index_.assign((c.num_layers + 1) * kNumParamKinds, SIZE_MAX);

  auto begin_unit = [&](std::string name) {
    units_.push_back(ParamUnit{std::move(name), total_, 0, {}});
  };
  auto add = [&](ParamKind kind, int layer, Shape shape, bool decay) {
    ParamTensor t{kind, layer, shape, total_, shape.numel(), units_.size() - 1, decay};
    total_ = align_up(total_ + t.numel);
    count_ += t.numel;
    index_[static_cast<size_t>(layer + 1) * kNumParamKinds + static_cast<size_t>(kind)] =
        tensors_.size();
    units_.back().tensors.push_back(tensors_.size());
    tensors_.push_back(t);
  };
  auto end_unit = [&] { units_.back().numel = total_ - units_.back().offset; };

  begin_unit("embeddings");
  add(ParamKind::wte, -1, {Vp, C}, true);
  add(ParamKind::wpe, -1, {maxT, C}, true);
  end_unit();
  for (size_t l = 0; l < c.num_layers; ++l) {
    const int li = static_cast<int>(l);
    begin_unit("block." + std::to_string(l));
    add(ParamKind::ln1w, li, {C}, false);
    add(ParamKind::ln1b, li, {C}, false);
    add(ParamKind::qkvw, li, {3 * C, C}, true);
    add(ParamKind::qkvb, li, {3 * C}, false);
    add(ParamKind::attprojw, li, {C, C}, true);
    add(ParamKind::attprojb, li, {C}, false);
    add(ParamKind::ln2w, li, {C}, false);
    add(ParamKind::ln2b, li, {C}, false);
    add(ParamKind::fcw, li, {4 * C, C}, true);
    add(ParamKind::fcb, li, {4 * C}, false);
    add(ParamKind::fcprojw, li, {C, 4 * C}, true);
    add(ParamKind::fcprojb, li, {C}, false);
    end_unit();
  }
  begin_unit("final_norm");
  add(ParamKind::lnfw, -1, {C}, false);
  add(ParamKind::lnfb, -1, {C}, false);
  end_unit();
}

const ParamTensor& ParamLayout::get(ParamKind kind, int layer) const {
  size_t slot = static_cast<size_t>(layer + 1) * kNumParamKinds + static_cast<size_t>(kind);
  TZ_CHECK(
      layer >= -1 && slot < index_.size() && index_[slot] != SIZE_MAX,
      std::string("no parameter ") + param_kind_name(kind) + " in layer " + std::to_string(layer),
      "");
  return tensors_[index_[slot]];
}

}  // namespace tierzero::nn
