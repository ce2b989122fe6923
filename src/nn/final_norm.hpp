// FinalNorm: the layernorm between the last block and the head.
#pragma once

#include <vector>

#include "layer_norm.hpp"
#include "tierzero/nn/gpt_config.hpp"
#include "tierzero/nn/module.hpp"

namespace tierzero::nn {

class FinalNorm final : public Module {
 public:
  FinalNorm(const GPTConfig& config, size_t index);

  std::vector<TensorMeta> parameters() const override { return norm_.parameters(); }
  void bind(const ParamLayout& layout) override;
  void forward(ModuleContext& ctx, const float* in, float* out) override;  // (B, T, C) each
  void backward(ModuleContext& ctx, const float* dout, float* din) override;
  bool takes_residual_sum() const override { return true; }

 private:
  LayerNorm norm_;
};

}  // namespace tierzero::nn
