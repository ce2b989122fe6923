// ModelScratch: its buffers in one list (allocation and byte count), and views into them.
#include "tierzero/nn/model_scratch.hpp"

namespace tierzero::nn {

void ModelScratch::visit(Buffers& b, const ActivationDims& d, bool checkpointing,
                         const BufferVisitor& fn) {
  const size_t C = d.channels, BT = d.tokens, AT = d.attention_tokens(), T = d.seq_len;
  const size_t Cl = d.local_channels, NHl = d.local_heads, Hl = d.local_hidden;
  constexpr size_t f = sizeof(float);
  if (checkpointing) b.block.visit(d, 1, fn);
  fn(b.proj, BT * C * f, "proj");
  fn(b.dln, BT * C * f, "dln");
  fn(b.dqkv, AT * d.local_qkv * f, "dqkv");
  fn(b.datty, AT * Cl * f, "datty");
  fn(b.datt, d.B * NHl * T * T * f, "datt");
  fn(b.dfch, BT * d.local_fc * f, "dfch");
  fn(b.dfch_gelu, BT * Hl * f, "dfch_gelu");
  if (d.tp > 1) {
    fn(b.xent_partials, BT * 3 * f, "xent_partials");
    fn(b.xent_all, d.tp * BT * 3 * f, "xent_all");
  }
  if (d.sequence_parallel) {
    fn(b.gathered_in, BT * C * f, "gathered_in");
    fn(b.gathered_grad, BT * C * f, "gathered_grad");
    fn(b.reduced, d.stream_tokens * C * f, "reduced");
    fn(b.norm_grads, 2 * C * f, "norm_grads");
  }
}

size_t ModelScratch::bytes_for(const ActivationDims& d, bool checkpointing) {
  Buffers none;
  return rounded_bytes([&](const BufferVisitor& fn) { visit(none, d, checkpointing, fn); });
}

void ModelScratch::release() {
  buffers_ = Buffers{};
  bytes_ = 0;
  allocated_ = false;
}

void ModelScratch::allocate(const ActivationDims& d, bool checkpointing,
                            DeviceAllocator& allocator) {
  release();  // first, so the budget sees the real peak
  bytes_ = allocate_buffers([&](const BufferVisitor& fn) { visit(buffers_, d, checkpointing, fn); },
                            allocator);
  dims_ = d;  // only once complete (an allocation may throw)
  checkpointing_ = checkpointing;
  allocated_ = true;
}

BlockActs ModelScratch::block() const {
  return buffers_.block.slot(dims_, 0);
}

}  // namespace tierzero::nn
