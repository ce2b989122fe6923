// ParamLayout: where every parameter tensor of one rank lives in one flat buffer, grouped into
// units. It is built from what the modules declare (TensorMeta) for a tensor-parallel rank: each
// tensor takes its local shape, and a unit (the parameters of one top-level module: the
// embeddings, each transformer block, the final layernorm) is a contiguous range, which is what
// the partition store shards, gathers and offloads; gradients use the same layout.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "tierzero/core/tensor.hpp"
#include "tierzero/nn/tensor_meta.hpp"

namespace tierzero::nn {

// The parameters of one top-level module, as it declares them, in layout order. What a unit is
// comes from block and tied, never from its name: the name is for messages, checkpoints and
// reports.
struct UnitDecl {
  std::string name;  // "embeddings", "block.0", ..., "final_norm"
  std::vector<TensorMeta> tensors;
  int block = -1;     // the transformer block it holds; -1: embeddings, final norm and the like
  bool tied = false;  // another module runs on its parameters too (the head on the embeddings')
};

// A declared tensor placed on this rank: the metadata (kind, layer, full shape, partitioning,
// decay, name(), replicated()) plus its local shape and where it sits.
struct ParamTensor : TensorMeta {
  Shape shape;    // local shape on this tp rank, e.g. (3C / tp, C) for qkvw
  size_t offset;  // elements from the start of the flat buffer (256-byte aligned)
  size_t numel;   // local elements
  size_t unit;    // index into ParamLayout::units()
};

struct ParamUnit {
  std::string name;             // "embeddings", "block.0", ..., "final_norm"
  size_t offset;                // elements; start of the unit in the flat buffer
  size_t numel;                 // elements the unit spans, alignment padding included
  std::vector<size_t> tensors;  // indices into ParamLayout::tensors()
  int block = -1;               // as declared (UnitDecl)
  bool tied = false;            // as declared (UnitDecl)
};

class ParamLayout {
 public:
  // Units in the order given, tensors in each in the order declared, with their local shapes on
  // tensor-parallel rank tp. Throws Error naming the tensor when tp.size does not divide a
  // partitioned dim. (The GPT-2's layout: gpt_param_layout in gpt_modules.hpp.)
  ParamLayout(const std::vector<UnitDecl>& units, const TensorParallel& tp);

  const std::vector<ParamTensor>& tensors() const { return tensors_; }
  const std::vector<ParamUnit>& units() const { return units_; }
  size_t total_numel() const { return total_; }      // flat buffer length, padding included
  size_t parameter_count() const { return count_; }  // real local parameters, padding excluded
  const TensorParallel& tp() const { return tp_; }
  // The tensor of `kind` in block `layer` (-1 for non-block tensors).
  const ParamTensor& get(ParamKind kind, int layer = -1) const;
  // The same, or null when this layout does not hold it (another pipeline stage's).
  const ParamTensor* find(ParamKind kind, int layer = -1) const;
  // Index into units() of the unit called `name`; throws Error when there is none.
  size_t unit_index(const std::string& name) const;
  // Elements from the start of t's unit to t: where t sits in what acquire_params returns.
  size_t offset_in_unit(const ParamTensor& t) const { return t.offset - units_[t.unit].offset; }

 private:
  std::vector<ParamTensor> tensors_;
  std::vector<ParamUnit> units_;
  std::vector<size_t> index_;  // (layer + 1) * kNumParamKinds + kind -> tensor index
  TensorParallel tp_;
  size_t total_ = 0;
  size_t count_ = 0;
};

}  // namespace tierzero::nn
