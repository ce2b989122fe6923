// ModelScratch: its buffers in one list (allocation and byte count), and views into them.
#include "tierzero/nn/model_scratch.hpp"

#include <algorithm>

namespace tierzero::nn {

void ModelScratch::visit(Buffers& b, const ActivationDims& d, Recompute recompute,
                         const BufferVisitor& fn) {
  const size_t C = d.channels, BT = d.tokens, AT = d.attention_tokens();
  const size_t Cl = d.local_channels, Hl = d.local_hidden;
  constexpr size_t f = sizeof(float);
  const size_t h = d.compute_bytes();  // the products' operands: fp32 or 16-bit
  if (recompute.is_full()) b.block.visit(d, 1, fn);
  if (recompute.is_selective()) b.core.visit(d, fn);
  fn(b.proj, BT * C * f, "proj");
  fn(b.dln, BT * C * f, "dln");
  fn(b.dqkv, AT * d.local_qkv * h, "dqkv");
  fn(b.datty, AT * Cl * h, "datty");
  if (d.attention_scratch() > 0) fn(b.attention, d.attention_scratch() * f, "attention scratch");
  fn(b.dfch, BT * d.local_fc * h, "dfch");
  // 16-bit compute takes GELU's gradient in the projection's product and needs no dfch_gelu
  // (SwiGLU's backward still does); it needs the stream's gradient in 16 bits instead, and under
  // Ulysses a packing buffer of its own.
  const bool swiglu = d.local_fc == 2 * Hl;  // its fc row holds gate and up
  if (d.compute == DType::f32 || swiglu) fn(b.dfch_gelu, BT * Hl * h, "dfch_gelu");
  if (d.compute != DType::f32) {
    fn(b.stream_grad16, d.stream_tokens * C * h, "stream_grad16");
    if (d.ulysses > 1) fn(b.ulysses_pack, BT * d.local_qkv * d.ulysses * h, "ulysses_pack");
  }
  if (d.tp > 1) {
    fn(b.xent_partials, BT * 3 * f, "xent_partials");
    fn(b.xent_all, d.tp * BT * 3 * f, "xent_all");
  }
  if (d.sequence_parallel) {
    fn(b.gathered_in, BT * C * h, "gathered_in");
    fn(b.gathered_grad, BT * C * h, "gathered_grad");
    fn(b.reduced, d.stream_tokens * C * f, "reduced");
    fn(b.norm_grads, 2 * C * f, "norm_grads");
  }
}

size_t ModelScratch::bytes_for(const ActivationDims& d, Recompute recompute) {
  Buffers none;
  return rounded_bytes([&](const BufferVisitor& fn) { visit(none, d, recompute, fn); });
}

void ModelScratch::release() {
  buffers_ = Buffers{};
  bytes_ = 0;
  allocated_ = false;
}

void ModelScratch::allocate(const ActivationDims& d, Recompute recompute,
                            DeviceAllocator& allocator) {
  release();  // first, so the budget sees the real peak
  bytes_ = allocate_buffers([&](const BufferVisitor& fn) { visit(buffers_, d, recompute, fn); },
                            allocator);
  dims_ = d;  // only once complete (an allocation may throw)
  recompute_ = recompute;
  allocated_ = true;
}

BlockActs ModelScratch::block() const {
  return buffers_.block.slot(dims_, 0);
}

UlyssesBuffers ModelScratch::ulysses() const {
  const DeviceBuffer& second =
      dims_.compute == DType::f32 ? buffers_.dfch_gelu : buffers_.ulysses_pack;
  return {buffers_.dfch.data(), second.data(), std::min(buffers_.dfch.bytes(), second.bytes())};
}

AttentionActs ModelScratch::attention_core() const {
  return {ComputeTensor{nullptr, dims_.compute}, compute(buffers_.core.atty),
          buffers_.core.lse.f32()};
}

}  // namespace tierzero::nn
