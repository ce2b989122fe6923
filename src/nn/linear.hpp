// Linear: out = in @ W^T + b with W (out_features, in_features), and the metadata tensor
// parallelism needs: Megatron's column-parallel linear cuts W's rows and b (each rank computes a
// slice of the outputs), the row-parallel one cuts W's columns (each rank takes a slice of the
// inputs; the partial outputs are summed, and b, added once after the sum, is replicated).
#pragma once

#include <cstddef>
#include <vector>

#include "tierzero/nn/module.hpp"

namespace tierzero::nn {

enum class LinearSplit { replicated, column, row };

class Linear {
 public:
  // stride: fused outputs cut separately (column split of fused QKV: 3); granule: features that
  // stay on one rank along the split dim (an attention head's channels); has_bias false: no
  // bias tensor (Llama's projections).
  Linear(ParamKind weight, ParamKind bias, int layer, size_t in_features, size_t out_features,
         LinearSplit split, size_t stride = 1, size_t granule = 1, bool has_bias = true);

  // weight (out, in) with decay, bias (out) when it has one
  std::vector<TensorMeta> parameters() const;
  void bind(const ParamLayout& layout);
  size_t in_features() const { return in_; }    // local, after bind
  size_t out_features() const { return out_; }  // local, after bind

  // Each runs in the run's compute (ctx.compute16(): W and b from ctx.params16, the operands of
  // ctx.compute(), each product accumulated in fp32 by Kernels::matmul16_*; else fp32 from
  // ctx.params). W's and b's gradients are fp32 either way. A result's own type says how it is
  // stored: the compute dtype when the next product reads it, fp32 when the residual stream or a
  // norm's backward does.
  //
  // out (B*T, out) = in (B*T, in) @ W^T + b, over all of ctx.mb's tokens (row-parallel: a
  // partial sum, with b on tp rank 0 only).
  void forward(const ModuleContext& ctx, const ComputeTensor& in, const ComputeTensor& out) const;
  // din (B*T, in) = dout @ W, OVERWRITTEN (every caller's din has no other term, so it is not
  // zero-filled first, and the product does not read it); dW += dout^T in; db += colsum(dout).
  // `in` is the forward's input.
  void backward(const ModuleContext& ctx, const ComputeTensor& in, const ComputeTensor& dout,
                const ComputeTensor& din) const;
  // forward with GELU after it: pre (B*T, out) as forward's out, act (B*T, out) = gelu(pre), in
  // one kernel call (Kernels::matmul_gelu_forward). Not for a row-parallel linear, whose partial
  // outputs are summed before any activation.
  void forward_gelu(const ModuleContext& ctx, const ComputeTensor& in, const ComputeTensor& pre,
                    const ComputeTensor& act) const;
  // backward of a linear whose input was gelu(pre): dpre (B*T, in) = gelu'(pre) * (dout @ W),
  // OVERWRITTEN; dW and db accumulate as in backward (Kernels::matmul_backward_gelu).
  void backward_gelu(const ModuleContext& ctx, const ComputeTensor& in, const ComputeTensor& pre,
                     const ComputeTensor& dout, const ComputeTensor& dpre) const;

 private:
  const void* weight16(const ModuleContext& ctx) const;
  const void* bias16(const ModuleContext& ctx) const;  // null when the forward adds none

  ParamKind weight_kind_, bias_kind_;
  int layer_;
  size_t full_in_, full_out_;  // unpartitioned, as declared
  size_t in_, out_;            // local: set by bind
  LinearSplit split_;
  size_t stride_, granule_;
  bool has_bias_;
  bool bias_in_forward_ = true;  // false on tp ranks > 0 of a row-parallel linear
  ParamRef weight_, bias_;
};

}  // namespace tierzero::nn
