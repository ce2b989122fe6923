// LayerNorm over the channels, with its (replicated) gain and bias, and the per-row statistics
// its backward reuses; or, as the Llama family normalises, RMSNorm: a gain and no bias, and only
// the rstd statistic.
#pragma once

#include <cstddef>
#include <vector>

#include "tierzero/nn/gpt_config.hpp"
#include "tierzero/nn/module.hpp"
#include "tierzero/nn/saved_activations.hpp"

namespace tierzero::nn {

class LayerNorm {
 public:
  LayerNorm(ParamKind weight, ParamKind bias, int layer, size_t channels,
            NormKind kind = NormKind::layernorm, double eps = 1e-5);

  // weight (C), bias (C, layernorm only): replicated, no decay
  std::vector<TensorMeta> parameters() const;
  void bind(const ParamLayout& layout);

  // out (S, C) = layernorm(in (S, C)), keeping stats; S: the stream's rows on this rank. out is
  // of ctx.compute() (the next product's operand); in 16-bit compute the gain and bias are read
  // from ctx.params16 (Kernels::layernorm16_*), and the statistics and gradients stay fp32.
  void forward(const ModuleContext& ctx, const float* in, const ComputeTensor& out,
               const LayerNormStats& stats) const;
  // residual (S, C) = a + b, then out = layernorm(residual) keeping stats, bitwise as
  // residual_forward then forward(), in one fused kernel for either norm, which does not read
  // the sum back from memory.
  void residual_forward(const ModuleContext& ctx, const float* a, const float* b, float* residual,
                        const ComputeTensor& out, const LayerNormStats& stats) const;
  // The norm a module begins with, of its input `in`: forward(), or with ctx.in_sum (the previous
  // block left its last add pending, ResidualSum) residual_forward, which writes `in` first.
  void forward_input(const ModuleContext& ctx, const float* in, const ComputeTensor& out,
                     const LayerNormStats& stats) const;
  // din (S, C) += d(in) for dout (S, C); `in` and `stats` are the forward's. Under sequence
  // parallelism the gain and bias gradients are summed over the tensor-parallel group. din16
  // (16-bit compute; null for none): (S, C) of the compute dtype = the new din rounded, written
  // by the kernel's pass (the next branch's products read it).
  void backward(const ModuleContext& ctx, const float* in, const LayerNormStats& stats,
                const float* dout, float* din, const ComputeTensor& din16 = {}) const;

 private:
  ParamKind weight_kind_, bias_kind_;
  int layer_;
  size_t channels_;
  NormKind kind_;
  float eps_;
  ParamRef weight_, bias_;

  const void* weight16(const ModuleContext& ctx) const;
  const void* bias16(const ModuleContext& ctx) const;  // LayerNorm only
  // din += d(in); dweight, dbias (C) += this rank's rows' gain and bias gradients (dbias null
  // for RMSNorm), in the run's compute (the gain read in 16 bits in 16-bit compute).
  void norm_backward(const ModuleContext& ctx, const float* in, const LayerNormStats& stats,
                     const float* dout, float* din, const ComputeTensor& din16, float* dweight,
                     float* dbias) const;
};

}  // namespace tierzero::nn
