// MicroBatch: its buffers in one list (allocation and byte count), and views into them.
#include "tierzero/nn/micro_batch.hpp"

#include <atomic>
#include <string>

#include "tierzero/core/error.hpp"

namespace tierzero::nn {

namespace {
uint64_t next_id() {
  static std::atomic<uint64_t> next{1};
  return next.fetch_add(1);
}
}  // namespace

void MicroBatch::visit(Buffers& b, const GPTConfig&, const ActivationDims& d,
                       const PipelineStage& stage, Recompute recompute, bool external,
                       const BufferVisitor& fn) {
  const bool checkpointing = recompute.is_full();
  const size_t n = stage.num_blocks, C = d.channels, BT = d.tokens, S = d.stream_tokens;
  constexpr size_t f = sizeof(float);
  fn(b.tokens, BT * sizeof(int32_t), "tokens");
  fn(b.targets, BT * sizeof(int32_t), "targets");
  // With the checkpoints in a store the stage's input is one of them (the store's buffer).
  if (!(checkpointing && external)) fn(b.encoded, S * C * f, "encoded");
  if (!checkpointing) b.blocks.visit(d, n, fn, !recompute.is_selective());
  if (checkpointing && external)
    fn(b.residual3, S * C * f, "residual3 (stage output; checkpoints in a store)");
  else
    fn(b.residual3, n * S * C * f, checkpointing ? "residual3 (checkpoints)" : "residual3");
  if (stage.last()) {
    fn(b.lnf, S * C * d.compute_bytes(), "lnf");
    fn(b.lnf_mean, S * f, "lnf_mean");
    fn(b.lnf_rstd, S * f, "lnf_rstd");
    // The whole block, kept from the forward to the backward, or one chunk of rows (the
    // classifier runs in the backward, chunk by chunk).
    fn(b.logits, d.logits_rows * d.local_vocab * f,
       d.chunked_logits() ? "logits (one chunk)" : "logits");
    // 16-bit compute: the logits' gradient, the head's 16-bit operand, beside the fp32 logits.
    if (d.compute != DType::f32)
      fn(b.dlogits16, d.logits_rows * d.local_vocab * d.compute_bytes(),
         d.chunked_logits() ? "dlogits16 (one chunk)" : "dlogits16");
    fn(b.losses, BT * f, "losses");
  }
  fn(b.dresidual, S * C * f, "dresidual");
}

size_t MicroBatch::bytes_for(const GPTConfig& config, const ActivationDims& d,
                             const PipelineStage& stage, Recompute recompute, bool external) {
  Buffers none;
  return rounded_bytes(
      [&](const BufferVisitor& fn) { visit(none, config, d, stage, recompute, external, fn); });
}

MicroBatch::MicroBatch(const GPTConfig& config, size_t num_modules, const ActivationDims& d,
                       const PipelineStage& stage, Recompute recompute, DeviceAllocator& allocator,
                       bool external_checkpoints)
    : config_(config),
      dims_(d),
      stage_(stage),
      recompute_(recompute),
      external_(recompute.is_full() && external_checkpoints),
      id_(next_id()),
      external_at_(stage.num_blocks, nullptr),
      inputs_(num_modules, nullptr),
      host_losses_(d.tokens),
      host_slice_(d.ulysses > 1 ? 2 * d.tokens : 0) {
  TZ_CHECK(d.B > 0 && d.T > 0, "empty batch", "");
  TZ_CHECK(d.seq_len <= config.max_seq_len,
           "sequence length " + std::to_string(d.seq_len) + " exceeds the model's context length " +
               std::to_string(config.max_seq_len),
           "lower seq_len or use a model with a longer context");
  bytes_ = allocate_buffers(
      [&](const BufferVisitor& fn) {
        visit(buffers_, config_, dims_, stage_, recompute_, external_, fn);
      },
      allocator);
}

const int32_t* MicroBatch::tokens() const {
  return static_cast<const int32_t*>(buffers_.tokens.data());
}

const int32_t* MicroBatch::targets() const {
  return static_cast<const int32_t*>(buffers_.targets.data());
}

float* MicroBatch::residual(size_t i) const {
  const size_t first = stage_.first_block;
  TZ_CHECK(i >= first && i <= first + stage_.num_blocks,
           "residual stream position " + std::to_string(i) + " is not in " + stage_.str(),
           "positions are the stage's first block to one past its last");
  if (external_) {
    if (i == first + stage_.num_blocks) return buffers_.residual3.f32();
    float* at = external_at_[i - first];
    TZ_CHECK(
        at != nullptr, "the checkpoint of block " + std::to_string(i) + " is not on the device now",
        i == first && stage_.stage > 0
            ? "receive a pipeline stage's input into GPT::input_buffer(mb), not stage_input()"
            : "internal error: the model reads a stored checkpoint only between begin and end");
    return at;
  }
  if (i == first) return buffers_.encoded.f32();
  return buffers_.residual3.f32() + (i - first - 1) * dims_.stream_tokens * dims_.channels;
}

void MicroBatch::set_external(size_t i, float* buffer) {
  TZ_CHECK(is_external(i),
           "residual stream position " + std::to_string(i) + " of " + stage_.str() +
               " is not a stored checkpoint",
           "internal error");
  external_at_[i - stage_.first_block] = buffer;
}

BlockActs MicroBatch::block(size_t layer) const {
  TZ_CHECK(!recompute_.is_full(), "block " + std::to_string(layer) + "'s internals are not kept",
           "with activation checkpointing they live in the model's scratch");
  TZ_CHECK(stage_.holds_block(layer), "no block " + std::to_string(layer) + " in " + stage_.str(),
           "");
  return buffers_.blocks.slot(dims_, layer - stage_.first_block);
}

void MicroBatch::check_last(const char* what) const {
  TZ_CHECK(stage_.last(),
           std::string(what) + " lives on the last pipeline stage, not " + stage_.str(),
           "internal error: only the last stage runs the final norm, the head and the loss");
}

ComputeTensor MicroBatch::lnf() const {
  check_last("the final norm's output");
  return {buffers_.lnf.data(), dims_.compute};
}

LayerNormStats MicroBatch::final_norm_stats() const {
  check_last("the final norm's statistics");
  return {buffers_.lnf_mean.f32(), buffers_.lnf_rstd.f32()};
}

float* MicroBatch::logits() const {
  check_last("the logits");
  return buffers_.logits.f32();
}

ComputeTensor MicroBatch::dlogits16() const {
  check_last("the logits' gradient");
  TZ_CHECK(dims_.compute != DType::f32, "a 16-bit logits' gradient in fp32 compute",
           "internal error: in fp32 compute the gradient is written over the logits");
  return {buffers_.dlogits16.data(), dims_.compute};
}

float* MicroBatch::losses() const {
  check_last("the losses");
  return buffers_.losses.f32();
}

float* MicroBatch::dresidual() const {
  return buffers_.dresidual.f32();
}

void MicroBatch::save_input(size_t module, const float* in) {
  TZ_CHECK(module < inputs_.size(), "module " + std::to_string(module) + " is not in the model",
           "");
  inputs_[module] = in;
}

const float* MicroBatch::saved_input(size_t module) const {
  TZ_CHECK(module < inputs_.size() && inputs_[module] != nullptr,
           "module " + std::to_string(module) + " has no saved input in this micro-batch",
           "run the forward on this micro-batch before its backward");
  return inputs_[module];
}

}  // namespace tierzero::nn
