// The stacked per-block activation buffers: their sizes, and one block's views into them.
#include "tierzero/nn/block_activations.hpp"

#include <string>

#include "tierzero/core/error.hpp"

namespace tierzero::nn {

float* ComputeTensor::f32() const {
  TZ_CHECK(type == DType::f32, std::string("an fp32 view of a ") + dtype_name(type) + " activation",
           "internal error: in 16-bit compute the layers call the 16-bit kernels");
  return static_cast<float*>(data);
}

namespace {
ComputeTensor compute_tensor(const DeviceBuffer& b, const ActivationDims& d, size_t elems) {
  return ComputeTensor{b.data(), d.compute}.at(elems);
}
}  // namespace

void AttentionCore::visit(const ActivationDims& d, const BufferVisitor& fn) {
  fn(atty, d.attention_tokens() * d.local_channels * d.compute_bytes(), "atty (recomputed)");
  fn(lse, d.attention_saved() * sizeof(float), "attention lse (recomputed)");
}

void BlockActivations::visit(const ActivationDims& d, size_t n, const BufferVisitor& fn,
                             bool with_core) {
  const size_t C = d.channels, S = d.stream_tokens, BT = d.tokens, AT = d.attention_tokens();
  const size_t Cl = d.local_channels, Hl = d.local_hidden;
  constexpr size_t f = sizeof(float);
  const size_t h = d.compute_bytes();  // what the products read: fp32 or 16-bit
  fn(ln1, n * S * C * h, "ln1");
  fn(ln1_mean, n * S * f, "ln1_mean");
  fn(ln1_rstd, n * S * f, "ln1_rstd");
  fn(qkv, n * AT * d.local_qkv * h, "qkv");
  if (with_core) {
    fn(atty, n * AT * Cl * h, "atty");
    fn(lse, n * d.attention_saved() * f, "attention lse");
  }
  fn(residual2, n * S * C * f, "residual2");
  fn(ln2, n * S * C * h, "ln2");
  fn(ln2_mean, n * S * f, "ln2_mean");
  fn(ln2_rstd, n * S * f, "ln2_rstd");
  fn(fch, n * BT * d.local_fc * h, "fch");
  fn(fch_gelu, n * BT * Hl * h, "fch_gelu");
}

BlockActs BlockActivations::slot(const ActivationDims& d, size_t i) const {
  const size_t C = d.channels, S = d.stream_tokens, BT = d.tokens, AT = d.attention_tokens();
  const size_t Cl = d.local_channels, Hl = d.local_hidden;
  return BlockActs{
      compute_tensor(ln1, d, i * S * C),
      {ln1_mean.f32() + i * S, ln1_rstd.f32() + i * S},
      {compute_tensor(qkv, d, i * AT * d.local_qkv), compute_tensor(atty, d, i * AT * Cl),
       lse.f32() ? lse.f32() + i * d.attention_saved() : nullptr},
      residual2.f32() + i * S * C,
      compute_tensor(ln2, d, i * S * C),
      {ln2_mean.f32() + i * S, ln2_rstd.f32() + i * S},
      {compute_tensor(fch, d, i * BT * d.local_fc), compute_tensor(fch_gelu, d, i * BT * Hl)},
  };
}

}  // namespace tierzero::nn
