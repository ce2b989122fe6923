// ModelScratch: its buffers in one list (allocation and byte count), and views into them.
#include "tierzero/nn/model_scratch.hpp"

namespace tierzero::nn {

void ModelScratch::visit(Buffers& b, const GPTConfig& config, size_t B, size_t T,
                         bool checkpointing, const BufferVisitor& fn) {
  const size_t C = config.channels, NH = config.num_heads, BT = B * T;
  constexpr size_t f = sizeof(float);
  if (checkpointing) b.block.visit(config, 1, B, T, fn);
  fn(b.proj, BT * C * f, "proj");
  fn(b.dln, BT * C * f, "dln");
  fn(b.dqkv, BT * 3 * C * f, "dqkv");
  fn(b.datty, BT * C * f, "datty");
  fn(b.datt, B * NH * T * T * f, "datt");
  fn(b.dfch, BT * 4 * C * f, "dfch");
  fn(b.dfch_gelu, BT * 4 * C * f, "dfch_gelu");
}

size_t ModelScratch::bytes_for(const GPTConfig& config, size_t B, size_t T, bool checkpointing) {
  Buffers none;
  return rounded_bytes(
      [&](const BufferVisitor& fn) { visit(none, config, B, T, checkpointing, fn); });
}

void ModelScratch::release() {
  buffers_ = Buffers{};
  bytes_ = 0;
  B_ = T_ = 0;
}

void ModelScratch::allocate(const GPTConfig& config, size_t B, size_t T, bool checkpointing,
                            DeviceAllocator& allocator) {
  release();  // first, so the budget sees the real peak
  config_ = config;
  bytes_ = allocate_buffers(
      [&](const BufferVisitor& fn) { visit(buffers_, config, B, T, checkpointing, fn); },
      allocator);
  B_ = B;  // only once complete (an allocation may throw)
  T_ = T;
  checkpointing_ = checkpointing;
}

BlockActs ModelScratch::block() const {
  return buffers_.block.slot(config_, 0, B_, T_);
}

}  // namespace tierzero::nn
