// The stacked per-block activation buffers: their sizes, and one block's views into them.
#include "tierzero/nn/block_activations.hpp"

namespace tierzero::nn {

void AttentionCore::visit(const ActivationDims& d, const BufferVisitor& fn) {
  fn(atty, d.attention_tokens() * d.local_channels * sizeof(float), "atty (recomputed)");
  fn(lse, d.attention_saved() * sizeof(float), "attention lse (recomputed)");
}

void BlockActivations::visit(const ActivationDims& d, size_t n, const BufferVisitor& fn,
                             bool with_core) {
  const size_t C = d.channels, S = d.stream_tokens, BT = d.tokens, AT = d.attention_tokens();
  const size_t Cl = d.local_channels, Hl = d.local_hidden;
  constexpr size_t f = sizeof(float);
  fn(ln1, n * S * C * f, "ln1");
  fn(ln1_mean, n * S * f, "ln1_mean");
  fn(ln1_rstd, n * S * f, "ln1_rstd");
  fn(qkv, n * AT * d.local_qkv * f, "qkv");
  if (with_core) {
    fn(atty, n * AT * Cl * f, "atty");
    fn(lse, n * d.attention_saved() * f, "attention lse");
  }
  fn(residual2, n * S * C * f, "residual2");
  fn(ln2, n * S * C * f, "ln2");
  fn(ln2_mean, n * S * f, "ln2_mean");
  fn(ln2_rstd, n * S * f, "ln2_rstd");
  fn(fch, n * BT * d.local_fc * f, "fch");
  fn(fch_gelu, n * BT * Hl * f, "fch_gelu");
}

BlockActs BlockActivations::slot(const ActivationDims& d, size_t i) const {
  const size_t C = d.channels, S = d.stream_tokens, BT = d.tokens, AT = d.attention_tokens();
  const size_t Cl = d.local_channels, Hl = d.local_hidden;
  return BlockActs{
      ln1.f32() + i * S * C,
      {ln1_mean.f32() + i * S, ln1_rstd.f32() + i * S},
      {qkv.f32() + i * AT * d.local_qkv, atty.f32() ? atty.f32() + i * AT * Cl : nullptr,
       lse.f32() ? lse.f32() + i * d.attention_saved() : nullptr},
      residual2.f32() + i * S * C,
      ln2.f32() + i * S * C,
      {ln2_mean.f32() + i * S, ln2_rstd.f32() + i * S},
      {fch.f32() + i * BT * d.local_fc, fch_gelu.f32() + i * BT * Hl},
  };
}

}  // namespace tierzero::nn
