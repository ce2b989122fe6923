// MicroBatch: the per-micro-batch context — its shape, tokens and targets, the residual stream,
// what every module's forward keeps for its backward, the logits, losses, and the running
// gradient of the residual stream. One object per micro-batch in flight, so a pipeline schedule
// can run several forwards before their backwards; the model's modules and scratch are shared.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "tierzero/device/device_allocator.hpp"
#include "tierzero/nn/activation_buffers.hpp"
#include "tierzero/nn/activation_dims.hpp"
#include "tierzero/nn/block_activations.hpp"
#include "tierzero/nn/gpt_config.hpp"
#include "tierzero/nn/pp/pipeline_stage.hpp"
#include "tierzero/nn/recompute.hpp"

namespace tierzero::nn {

class GPT;

class MicroBatch {
 public:
  // Allocates the activations of one micro-batch of `config` with this rank's dims d for the
  // pipeline stage's blocks (Category::activation; the final norm's, the logits and losses on
  // the last stage only); with full recompute only the blocks' inputs are kept, with selective
  // all but the attention's core (see BlockActivations and Recompute). num_modules: the whole
  // model's top-level modules, whose forward inputs it records by index.
  // external_checkpoints (with full recompute): the checkpoints of all the stage's blocks, its
  // input included, live in a CheckpointStore, not here; the MicroBatch keeps only the stage's
  // output of the residual stream, and the GPT points residual() at the store's buffers (a stage
  // after the first receives its input into one: GPT::input_buffer).
  MicroBatch(const GPTConfig& config, size_t num_modules, const ActivationDims& d,
             const PipelineStage& stage, Recompute recompute, DeviceAllocator& allocator,
             bool external_checkpoints = false);
  MicroBatch(MicroBatch&&) = default;
  MicroBatch& operator=(MicroBatch&&) = default;

  size_t B() const { return dims_.B; }
  size_t T() const { return dims_.T; }  // this rank's positions of each sequence (Ulysses: a slice)
  const ActivationDims& dims() const { return dims_; }
  bool checkpointing() const { return recompute_.is_full(); }
  Recompute recompute() const { return recompute_; }
  bool has_targets() const { return has_targets_; }
  // Bytes of its buffers as the MemoryTracker counts them; equals bytes_for(its shape).
  size_t activation_bytes() const { return bytes_; }
  static size_t bytes_for(const GPTConfig& config, const ActivationDims& d,
                          const PipelineStage& stage, Recompute recompute,
                          bool external_checkpoints = false);
  // Names the micro-batch's checkpoints in a CheckpointStore: unique in the process.
  uint64_t id() const { return id_; }
  bool external_checkpoints() const { return external_; }
  // Whether residual(i) is a checkpoint kept in a CheckpointStore (external_checkpoints).
  bool is_external(size_t i) const {
    return external_ && i >= stage_.first_block && i < stage_.first_block + stage_.num_blocks;
  }
  // Points residual(i) (is_external(i)) at a store's device buffer; null: not on the device.
  void set_external(size_t i, float* buffer);
  const PipelineStage& stage() const { return stage_; }

  const int32_t* tokens() const;   // (B, T) device
  const int32_t* targets() const;  // (B, T) device
  // S: the stream's rows, dims().stream_tokens (B*T unless sequence parallel); Vl: this rank's
  // logit columns, dims().local_vocab (Vp unless tensor parallel).
  // The residual stream entering block i (i = 0: the embeddings' output; i = L: the last
  // block's output), for i from the stage's first block to one past its last. With
  // checkpointing these are the checkpoints.
  float* residual(size_t i) const;  // (S, C)
  // Pipeline boundaries: what a stage after the first receives before its forward, and what a
  // stage before the last sends after it; the gradients go the other way through dresidual().
  // With external checkpoints the input is a store's buffer: receive into GPT::input_buffer.
  // Whether the stage's input is set now (external checkpoints: begun in the store).
  bool has_stage_input() const { return !external_ || external_at_[0] != nullptr; }
  float* stage_input() const { return residual(stage_.first_block); }  // (S, C)
  float* stage_output() const {
    return residual(stage_.first_block + stage_.num_blocks);
  }  // (S, C)
  // Block `layer`'s saved internals; not with full recompute (then they live in scratch); with
  // selective recompute the attention's core (attn.atty, attn.lse) is null here (in scratch).
  BlockActs block(size_t layer) const;
  ComputeTensor lnf() const;  // (S, C) compute: the final norm's output; last stage only
  LayerNormStats final_norm_stats() const;
  // (R, Vl), R = dims().logits_rows: all B*T rows, the gradient of the logits after the
  // backward; or one chunk of rows that the classifier reuses (dims().chunked_logits()). Last
  // stage only. In 16-bit compute they stay the logits: their gradient is dlogits16().
  float* logits() const;
  ComputeTensor dlogits16() const;  // (R, Vl) 16-bit compute only: the logits' gradient
  float* losses() const;            // (B, T) (last stage)
  float* dresidual() const;         // (S, C) the residual stream's running gradient

  // A module's forward input, kept by reference for its backward (and checkpoint recompute).
  void save_input(size_t module, const float* in);
  const float* saved_input(size_t module) const;  // throws Error when never saved

 private:
  friend class GPT;                         // loads the batch and tracks the loss state
  void check_last(const char* what) const;  // throws unless this is the last stage
  struct Buffers {
    DeviceBuffer tokens;      // (B, T) int32
    DeviceBuffer targets;     // (B, T) int32
    DeviceBuffer encoded;     // (S, C) the stage's input: the embeddings' output on the first;
                              // none with external checkpoints (a store's buffer instead)
    BlockActivations blocks;  // the stage's n blocks' internals; empty when checkpointing
    DeviceBuffer residual3;   // (n, S, C) block outputs; the checkpoints when checkpointing;
                              // (1, S, C) the stage's output with external checkpoints
    DeviceBuffer lnf;         // (S, C) compute
    DeviceBuffer lnf_mean;    // (S)
    DeviceBuffer lnf_rstd;    // (S)
    DeviceBuffer logits;      // (R, Vl); holds dlogits after the backward in fp32 compute
    DeviceBuffer dlogits16;   // (R, Vl) compute, 16-bit compute only
    DeviceBuffer losses;      // (B, T)
    DeviceBuffer dresidual;   // (S, C)
  };
  static void visit(Buffers& b, const GPTConfig& config, const ActivationDims& d,
                    const PipelineStage& stage, Recompute recompute, bool external,
                    const BufferVisitor& fn);

  GPTConfig config_;
  ActivationDims dims_;
  PipelineStage stage_;
  Recompute recompute_;
  bool external_ = false;  // checkpoints in a CheckpointStore
  uint64_t id_ = 0;
  std::vector<float*> external_at_;  // (num_blocks) the store's buffer of residual(first + j)
  Buffers buffers_;
  size_t bytes_ = 0;
  std::vector<const float*> inputs_;  // per top-level module: its forward input
  bool has_targets_ = false;
  bool forwarded_ = false;          // the logits are this batch's (no backward since)
  bool losses_ready_ = false;       // losses hold this batch's (xent forward or backward ran)
  std::vector<float> host_losses_;  // (B, T) host
  // Ulysses: this rank's slice of each sequence's tokens, then of its targets, staged on the
  // host (they outlive the asynchronous copy to the device); empty without Ulysses.
  std::vector<int32_t> host_slice_;  // (2, B, T)
};

}  // namespace tierzero::nn
