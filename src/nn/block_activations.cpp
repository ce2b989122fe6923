// The stacked per-block activation buffers: their sizes, and one block's views into them.
#include "tierzero/nn/block_activations.hpp"

namespace tierzero::nn {

void BlockActivations::visit(const ActivationDims& d, size_t n, const BufferVisitor& fn) {
  const size_t C = d.channels, S = d.stream_tokens, BT = d.tokens, AT = d.attention_tokens();
  const size_t Cl = d.local_channels, NHl = d.local_heads, Hl = d.local_hidden, T = d.seq_len;
  constexpr size_t f = sizeof(float);
  fn(ln1, n * S * C * f, "ln1");
  fn(ln1_mean, n * S * f, "ln1_mean");
  fn(ln1_rstd, n * S * f, "ln1_rstd");
  fn(qkv, n * AT * d.local_qkv * f, "qkv");
  fn(atty, n * AT * Cl * f, "atty");
  fn(att, n * d.B * NHl * T * T * f, "att");
  fn(residual2, n * S * C * f, "residual2");
  fn(ln2, n * S * C * f, "ln2");
  fn(ln2_mean, n * S * f, "ln2_mean");
  fn(ln2_rstd, n * S * f, "ln2_rstd");
  fn(fch, n * BT * d.local_fc * f, "fch");
  fn(fch_gelu, n * BT * Hl * f, "fch_gelu");
}

BlockActs BlockActivations::slot(const ActivationDims& d, size_t i) const {
  const size_t C = d.channels, S = d.stream_tokens, BT = d.tokens, AT = d.attention_tokens();
  const size_t Cl = d.local_channels, NHl = d.local_heads, Hl = d.local_hidden, T = d.seq_len;
  return BlockActs{
      ln1.f32() + i * S * C,
      {ln1_mean.f32() + i * S, ln1_rstd.f32() + i * S},
      {qkv.f32() + i * AT * d.local_qkv, atty.f32() + i * AT * Cl,
       att.f32() + i * d.B * NHl * T * T},
      residual2.f32() + i * S * C,
      ln2.f32() + i * S * C,
      {ln2_mean.f32() + i * S, ln2_rstd.f32() + i * S},
      {fch.f32() + i * BT * d.local_fc, fch_gelu.f32() + i * BT * Hl},
  };
}

}  // namespace tierzero::nn
