// LayerNorm over the channels, with its (replicated) gain and bias, and the per-row statistics
// its backward reuses.
#pragma once

#include <cstddef>
#include <vector>

#include "tierzero/nn/module.hpp"
#include "tierzero/nn/saved_activations.hpp"

namespace tierzero::nn {

class LayerNorm {
 public:
  LayerNorm(ParamKind weight, ParamKind bias, int layer, size_t channels);

  std::vector<TensorMeta> parameters() const;  // weight (C), bias (C): replicated, no decay
  void bind(const ParamLayout& layout);

  // out (S, C) = layernorm(in (S, C)), keeping stats; S: the stream's rows on this rank.
  void forward(const ModuleContext& ctx, const float* in, float* out,
               const LayerNormStats& stats) const;
  // din (S, C) += d(in) for dout (S, C); `in` and `stats` are the forward's. Under sequence
  // parallelism the gain and bias gradients are summed over the tensor-parallel group.
  void backward(const ModuleContext& ctx, const float* in, const LayerNormStats& stats,
                const float* dout, float* din) const;

 private:
  ParamKind weight_kind_, bias_kind_;
  int layer_;
  size_t channels_;
  ParamRef weight_, bias_;
};

}  // namespace tierzero::nn
