// The stacked per-block activation buffers: their sizes, and one block's views into them.
#include "tierzero/nn/block_activations.hpp"

namespace tierzero::nn {

void BlockActivations::visit(const GPTConfig& config, size_t n, size_t B, size_t T,
                             const BufferVisitor& fn) {
  const size_t C = config.channels, NH = config.num_heads, BT = B * T;
  constexpr size_t f = sizeof(float);
  fn(ln1, n * BT * C * f, "ln1");
  fn(ln1_mean, n * BT * f, "ln1_mean");
  fn(ln1_rstd, n * BT * f, "ln1_rstd");
  fn(qkv, n * BT * 3 * C * f, "qkv");
  fn(atty, n * BT * C * f, "atty");
  fn(att, n * B * NH * T * T * f, "att");
  fn(residual2, n * BT * C * f, "residual2");
  fn(ln2, n * BT * C * f, "ln2");
  fn(ln2_mean, n * BT * f, "ln2_mean");
  fn(ln2_rstd, n * BT * f, "ln2_rstd");
  fn(fch, n * BT * 4 * C * f, "fch");
  fn(fch_gelu, n * BT * 4 * C * f, "fch_gelu");
}

BlockActs BlockActivations::slot(const GPTConfig& config, size_t i, size_t B, size_t T) const {
  const size_t C = config.channels, NH = config.num_heads, BT = B * T;
  return BlockActs{
      ln1.f32() + i * BT * C,
      {ln1_mean.f32() + i * BT, ln1_rstd.f32() + i * BT},
      {qkv.f32() + i * BT * 3 * C, atty.f32() + i * BT * C, att.f32() + i * B * NH * T * T},
      residual2.f32() + i * BT * C,
      ln2.f32() + i * BT * C,
      {ln2_mean.f32() + i * BT, ln2_rstd.f32() + i * BT},
      {fch.f32() + i * BT * 4 * C, fch_gelu.f32() + i * BT * 4 * C},
  };
}

}  // namespace tierzero::nn
