// ParamLayout: where every GPT-2 parameter tensor lives in one flat buffer, grouped into units.
// A unit (embeddings, each transformer block, the final layernorm) is a contiguous range, which
// is what the partition store shards, gathers and offloads; gradients use the same layout.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "tierzero/core/tensor.hpp"
#include "tierzero/nn/gpt_config.hpp"

namespace tierzero::nn {

// The tensor kinds of GPT-2, in llm.c's checkpoint order.
enum class ParamKind {
  wte,
  wpe,
  ln1w,
  ln1b,
  qkvw,
  qkvb,
  attprojw,
  attprojb,
  ln2w,
  ln2b,
  fcw,
  fcb,
  fcprojw,
  fcprojb,
  lnfw,
  lnfb
};
constexpr size_t kNumParamKinds = 16;
const char* param_kind_name(ParamKind k);

struct ParamTensor {
  ParamKind kind;
  int layer;      // block index, or -1 for embeddings and the final layernorm
  Shape shape;    // per-layer shape, e.g. (3C, C) for qkvw
  size_t offset;  // elements from the start of the flat buffer (256-byte aligned)
  size_t numel;
  size_t unit;
  bool decay;                // weight decay applies (matrices), not biases or norms
  std::string name() const;  // "block.3.qkvw", "wte"
};

struct ParamUnit {
  std::string name;             // "embeddings", "block.0", ..., "final_norm"
  size_t offset;                // elements; start of the unit in the flat buffer
  size_t numel;                 // elements the unit spans, alignment padding included
  std::vector<size_t> tensors;  // indices into ParamLayout::tensors()
};

class ParamLayout {
 public:
  explicit ParamLayout(const GPTConfig& config);

  const std::vector<ParamTensor>& tensors() const { return tensors_; }
  const std::vector<ParamUnit>& units() const { return units_; }
  size_t total_numel() const { return total_; }      // flat buffer length, padding included
  size_t parameter_count() const { return count_; }  // real parameters, padding excluded
  // The tensor of `kind` in block `layer` (-1 for non-block tensors).
  const ParamTensor& get(ParamKind kind, int layer = -1) const;

  size_t embeddings_unit() const { return 0; }
  size_t block_unit(size_t layer) const { return 1 + layer; }
  size_t final_norm_unit() const { return units_.size() - 1; }

 private:
  std::vector<ParamTensor> tensors_;
  std::vector<ParamUnit> units_;
  std::vector<size_t> index_;  // (layer + 1) * kNumParamKinds + kind -> tensor index
  size_t total_ = 0;
  size_t count_ = 0;
};

}  // namespace tierzero::nn
