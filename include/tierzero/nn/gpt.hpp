// GPT: a GPT-2 built from modules (embedding, blocks, final norm, tied head) with explicit
// forward and backward passes (no autograd), in the manner of llm.c. Activations live in one
// MicroBatch per micro-batch in flight; parameters and gradients come from a ParamProvider one
// unit at a time, so the same code runs resident (reference) or under the ZeRO partition store.
// With activation checkpointing on, it trades one extra block forward per block in the backward
// for keeping only each block's input residual stream instead of all its internals.
//
// Tensor parallelism (Megatron): given a tensor-parallel group, the model holds this rank's
// pieces of every partitioned tensor (ParamLayout from the modules' TensorMeta), runs the
// attention heads, MLP features and vocabulary of its rank, and puts the f/g collectives between
// the modules (TensorParallelGroup); the loss is a vocabulary-parallel cross-entropy. With
// sequence parallelism the residual stream and layernorms hold only this rank's run of the
// micro-batch's tokens, and the collectives become all-gathers and reduce-scatters.
//
// Ulysses sequence parallelism: given a Ulysses group of u ranks, the model runs every sequence's
// slice of T / u positions (the caller still hands it whole sequences: it takes its slice), and
// the attention re-shards to whole sequences of NH / u heads around the kernel (UlyssesGroup).
// Its loss and gradients are those of its slice's tokens; the mean over the group's ranks is the
// whole sequence's (the ranks hold equal token counts).
//
// Two ways in: the context API (make_micro_batch, forward, backward, loss), where the caller
// owns the micro-batches, and the one-micro-batch facade (evaluate, forward_backward), which runs
// the context API on one cached MicroBatch.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "tierzero/comm/communicator.hpp"
#include "tierzero/device/device_allocator.hpp"
#include "tierzero/device/device_timeline.hpp"
#include "tierzero/nn/activation_dims.hpp"
#include "tierzero/nn/checkpoint_store.hpp"
#include "tierzero/nn/gpt_config.hpp"
#include "tierzero/nn/gpt_modules.hpp"
#include "tierzero/nn/micro_batch.hpp"
#include "tierzero/nn/model_scratch.hpp"
#include "tierzero/nn/param_layout.hpp"
#include "tierzero/nn/param_provider.hpp"
#include "tierzero/nn/pp/pipeline_stage.hpp"
#include "tierzero/nn/recompute.hpp"
#include "tierzero/nn/sp/ulysses_group.hpp"
#include "tierzero/nn/tp/tensor_parallel_group.hpp"

namespace tierzero::nn {

class Head;

// GPT-2 initialisation into a host buffer laid out by `layout`: weights normal(0, 0.02), residual
// output projections normal(0, 0.02 / sqrt(2 L)), biases 0, layernorm weights 1. A tp > 1 layout
// gets its rank's pieces of the same full tensors (the values do not depend on tp).
void init_gpt2_params(const ParamLayout& layout, const GPTConfig& config, uint64_t seed,
                      float* host_params);  // (layout.total_numel())
// The same values for elements [begin, begin + count) of the layout's flat buffer alone (a
// unit, a rank's shard): element for element what init_gpt2_params writes there.
void init_gpt2_range(const ParamLayout& layout, const GPTConfig& config, uint64_t seed,
                     size_t begin, size_t count, float* out);  // (count)

// The parameters a pipeline stage's rank holds (its units; the last stage's copy of the
// embeddings' unit included) with tp's pieces: GPT(config, ..., {tp group, sp, stage}).layout()
// without building the model.
ParamLayout stage_param_layout(const GPTConfig& config, const PipelineStage& stage,
                               const TensorParallel& tp);

// The parameters of a rank that runs one or several model chunks (several: the interleaved
// schedule's virtual stages, each a PipelineStage of chunks * stages): every chunk's units in
// chunk order, as one layout (for one chunk, stage_param_layout's). Chunk c's unit j is unit
// chunk_unit_offsets(...)[c] + j here, and a tensor sits at the same place within its unit as in
// the chunk's own layout.
ParamLayout chunks_param_layout(const GPTConfig& config, const std::vector<PipelineStage>& chunks,
                                const TensorParallel& tp);
std::vector<size_t> chunk_unit_offsets(const GPTConfig& config,
                                       const std::vector<PipelineStage>& chunks);

// How a GPT is split over ranks besides data parallelism.
struct ModelParallel {
  // The tensor-parallel ranks (this rank's place is its rank in the group); null or a group of
  // one: no tensor parallelism. Collectives run on the model's device buffers, so on CUDA this
  // is an NCCL communicator and on the CPU an MPI one.
  comm::Communicator* tensor_parallel = nullptr;
  // Megatron sequence parallelism on top of tensor parallelism (ignored without it).
  bool sequence_parallel = false;
  // The pipeline stage this rank runs (partition_pipeline); stages 1: the whole model.
  PipelineStage pipeline;
  // The Ulysses sequence-parallel ranks (this rank's slice of each sequence is its rank in the
  // group); null or a group of one: none. On device buffers, as tensor_parallel.
  comm::Communicator* ulysses = nullptr;
};

class GPT {
 public:
  // Throws Error (before allocating) when the tensor-parallel size does not divide the heads,
  // the channels or the padded vocabulary, or the Ulysses size the heads (or tp and Ulysses are
  // both on, or Ulysses with a pipeline).
  GPT(const GPTConfig& config, DeviceAllocator& allocator, const ModelParallel& parallel = {});

  const GPTConfig& config() const { return config_; }
  // This rank's parameters: its pipeline stage's units (the last stage also holds the embeddings'
  // unit, tied to the first stage's) with its tensor-parallel pieces.
  const ParamLayout& layout() const { return layout_; }
  const PipelineStage& stage() const { return stage_; }
  size_t tensor_parallel() const { return layout_.tp().size; }
  bool sequence_parallel() const { return tp_ && tp_->sequence_parallel(); }
  size_t ulysses() const { return ulysses_ ? ulysses_->size() : 1; }
  // This rank's activation extents for a micro-batch of B whole sequences of T (throws as
  // ActivationDims::of).
  ActivationDims dims(size_t B, size_t T) const;
  // Bytes the tensor-parallel collectives moved since the last reset (all zero at tp 1).
  TensorParallelTraffic tensor_parallel_traffic() const;
  void reset_tensor_parallel_traffic();
  // Bytes the Ulysses all-to-alls moved since the last reset (zero without Ulysses).
  UlyssesTraffic ulysses_traffic() const;
  void reset_ulysses_traffic();
  // The top-level modules in forward order; module i's parameters are layout unit
  // modules()[i]->unit(). A pipeline stage runs a contiguous range of them.
  const ModuleList& modules() const { return modules_; }

  // ---- the context API: one MicroBatch per micro-batch in flight ----
  // Activations for one micro-batch of B sequences of T (whole sequences: under Ulysses it holds
  // this rank's slice of T / ulysses positions of each) in the current checkpointing mode.
  MicroBatch make_micro_batch(size_t B, size_t T);
  // Loads tokens and targets (host (B, T) arrays; targets may be null: logits only) into mb and
  // runs the forward up to the logits. A pipeline stage runs its modules only: after the first,
  // the caller has put the previous stage's output into mb.stage_input(); before the last, the
  // stage's output is in mb.stage_output() afterwards.
  // for_backward false: no backward follows (evaluation), so checkpoints placed in a
  // CheckpointStore are dropped rather than written out.
  void forward(MicroBatch& mb, ParamProvider& params, const int32_t* tokens, const int32_t* targets,
               bool for_backward = true);
  // After forward(mb) with targets: the loss's backward, accumulating (+=) grad_scale *
  // d(mean loss of mb) into the provider's gradients. mb's logits then hold their gradient.
  // Before the last pipeline stage the caller has put the gradient of the stage's output into
  // mb.dresidual() instead; after the first, mb.dresidual() holds that of its input afterwards.
  void backward(MicroBatch& mb, ParamProvider& params, float grad_scale);
  // Mean cross-entropy of mb (computed here if the backward has not); throws when not finite.
  // Last pipeline stage only.
  float loss(MicroBatch& mb);
  // The loss without the host waiting: queues the copy of mb's per-token losses (computed here if
  // the backward has not) into `host_losses` (mb.B() * mb.T() floats, page-locked for the copy to
  // be asynchronous on CUDA); once the default stream has synchronized, mean_loss() of them is what
  // loss() returns, bit for bit. Last pipeline stage only.
  void queue_loss_copy(MicroBatch& mb, float* host_losses);
  // The mean of n per-token losses in host memory (in loss()'s order); throws when not finite.
  static float mean_loss(const float* host_losses, size_t n);

  // ---- the facade: one cached micro-batch ----
  // Mean cross-entropy over the batch; keeps the logits (see logits()).
  // tokens, targets: host arrays (B, T); targets may be null (then returns 0, logits only).
  float evaluate(ParamProvider& params, const int32_t* tokens, const int32_t* targets, size_t B,
                 size_t T);
  // Forward and backward: returns the mean loss and accumulates (+=) grad_scale * d(mean loss)
  // into the provider's gradients. grad_scale is 1/accumulation_steps under accumulation.
  float forward_backward(ParamProvider& params, const int32_t* tokens, const int32_t* targets,
                         size_t B, size_t T, float grad_scale);
  // The same without waiting for the loss: its per-token values go to `host_losses` as in
  // queue_loss_copy, so micro-batches follow each other without draining the device's queue.
  // Returns how many it copies: B * T, or this rank's share of them under Ulysses.
  size_t forward_backward_queued(ParamProvider& params, const int32_t* tokens,
                                 const int32_t* targets, size_t B, size_t T, float grad_scale,
                                 float* host_losses);
  Device& device() { return device_; }
  // Logits of the last evaluate() (after forward_backward: their gradient in fp32 compute, the
  // logits in 16-bit compute), (B, T, Vl) in device memory (Vl = Vp / tp: this rank's
  // vocabulary columns); columns V..Vp are padding. Null when the classifier ran in chunks
  // (more tokens than GPTConfig::classifier_chunk_tokens): no whole block of logits exists.
  const float* logits() const {
    return cached_ && !cached_->dims().chunked_logits() ? cached_->logits() : nullptr;
  }
  // Bytes of the facade's activations allocated now: its micro-batch plus the model's scratch
  // (for the last batch shape; 0 before the first call).
  size_t activation_bytes() const;

  // Activation checkpointing. On: the forward keeps per block only its input residual stream
  // (the checkpoint) and runs the block's internals in one layer's worth of scratch; the backward
  // recomputes each block's forward from its checkpoint inside the block's own acquire_params, so
  // the ParamProvider sees the same calls as without it. Results are bitwise identical (same
  // kernels on the same inputs). Changing it reallocates the facade's activations for the current
  // shape (logits() is invalid until the next evaluate()); micro-batches made before the change
  // are refused.
  void set_activation_checkpointing(bool on) { set_recompute(Recompute(on)); }
  // The recompute mode (Recompute): none, selective (the attention's core, rebuilt from the kept
  // qkv) or full (activation checkpointing as above); the same rules as above on changing it.
  void set_recompute(Recompute recompute);
  Recompute recompute() const { return recompute_; }
  // The dtype the products run in (ActivationDims::compute): fp32 (the default, the reference),
  // or bf16 / fp16, 16-bit compute: the products' operands and the activations they read held
  // in that dtype, the parameters acquired with acquire_params16 (the provider's
  // params16_type() must be it). On CUDA the products run on the tensor cores, and the attention
  // on its tensor-core kernels when the kernels' matmul precision is a 16-bit one
  // (Kernels::set_matmul_precision, which the trainer and `bench train` set to the same type;
  // warned otherwise). The residual stream, the norms' statistics, the logits, the loss and
  // every gradient of a parameter stay fp32. Every architecture and split. Changing it
  // reallocates the facade's
  // activations like set_recompute; older micro-batches are refused.
  void set_compute(DType compute);
  DType compute() const { return compute_; }
  // Where the block checkpoints go with checkpointing on: null (the default) keeps them in the
  // MicroBatch on the device; a store places all of them on its tier, the stage's first block's
  // input too (the embeddings write theirs into the store's buffer; a later pipeline stage
  // receives its input into one, see input_buffer). Set before the micro-batches are made;
  // changing it reallocates the facade's activations like set_activation_checkpointing.
  void set_checkpoint_store(CheckpointStore* store);
  CheckpointStore* checkpoint_store() const { return store_; }
  // Where each module's forward and backward (recompute included) is timed on the device, as a
  // span of Track::compute named "forward" / "backward" with the module's unit, and the
  // tensor-parallel and Ulysses collectives on their device stream (NCCL); null (the default):
  // compute untimed, collectives on the host's clock. The caller begins and flushes the
  // timeline's steps.
  void set_device_timeline(DeviceTimeline* timeline);
  // Whether a block leaves its last residual add to the next block's ln1 (or the final norm),
  // which writes the sum in its own pass (ResidualSum): on by default; off, the reference path,
  // adds it in a pass of its own. The results are bitwise the same on every backend.
  void set_residual_fusion(bool on) { fuse_residual_ = on; }
  // Where a pipeline stage after the first receives mb's input before its forward: mb's
  // stage_input(), or with the checkpoints in a store the device buffer of its first checkpoint
  // (begun in the store here, so it moves to its tier behind the stage's first block like the
  // others). Calling it again before the forward returns the same buffer.
  float* input_buffer(MicroBatch& mb);
  // Whether input_buffer may be taken ahead of the forward, while another micro-batch's forward
  // runs: that one holds two of the store's device slots (the checkpoint it reads and the one it
  // writes), so a third must exist.
  bool can_take_input_buffer_ahead() const;
  // Bytes of one block checkpoint of dims d: (S, C) floats, the sequence shard under Megatron
  // sequence parallelism and the slice under Ulysses.
  static size_t checkpoint_bytes_for(const ActivationDims& d);
  // Use `with`'s scratch from now on (a rank's interleaved pipeline chunks: their actions never
  // overlap, so one scratch serves all of them); before either allocated it.
  void share_scratch(GPT& with);
  // Waits until the model's work issued so far has run (before another engine reads its buffers).
  void sync() { device_.default_stream().synchronize(); }
  bool activation_checkpointing() const { return recompute_.is_full(); }
  // Exactly the activation bytes of one micro-batch in flight for (B, T) in the given mode: a
  // MicroBatch plus the model's scratch, the sum of DeviceAllocator::round_size over their
  // buffers, which is what the MemoryTracker records (Category::activation) when the allocator
  // serves them fresh rather than from its cache. k micro-batches in flight take
  // scratch_bytes_for + k * micro_batch_bytes_for.
  // tp, sequence_parallel, ulysses: the per-rank count under tensor (and sequence) parallelism
  // or Ulysses (T is then still the whole sequence).
  // compute: the dtype of the products' activations (set_compute).
  static size_t activation_bytes_for(const GPTConfig& config, size_t B, size_t T,
                                     Recompute recompute, size_t tp = 1,
                                     bool sequence_parallel = false, size_t ulysses = 1,
                                     DType compute = DType::f32);
  static size_t micro_batch_bytes_for(const GPTConfig& config, size_t B, size_t T,
                                      Recompute recompute, size_t tp = 1,
                                      bool sequence_parallel = false, size_t ulysses = 1,
                                      DType compute = DType::f32);
  // One micro-batch of a pipeline stage (its blocks; the logits on the last stage only).
  // external_checkpoints: the stage's checkpoints, its input included, live in a CheckpointStore.
  static size_t micro_batch_bytes_for(const GPTConfig& config, const ActivationDims& dims,
                                      const PipelineStage& stage, Recompute recompute,
                                      bool external_checkpoints = false);
  static size_t scratch_bytes_for(const GPTConfig& config, size_t B, size_t T, Recompute recompute,
                                  size_t tp = 1, bool sequence_parallel = false, size_t ulysses = 1,
                                  DType compute = DType::f32);

 private:
  void check(const MicroBatch& mb) const;  // made by this model, in the current mode
  void ensure_scratch(const ActivationDims& d);
  // The losses of mb and, with dloss given, the logits' gradient in place of the logits.
  void cross_entropy(MicroBatch& mb, const float* dloss);
  // The head when mb's classifier runs in chunks (last stage, dims().chunked_logits()), else
  // null.
  Head* chunked_head(const MicroBatch& mb) const;
  MicroBatch& cached(size_t B, size_t T);  // the facade's micro-batch, (re)made for (B, T)
  ModuleContext context(MicroBatch& mb);
  // The unit's parameters into ctx: params, or params16 in 16-bit compute.
  void acquire(ModuleContext& ctx, ParamProvider& params, size_t unit) const;
  // A stored checkpoint (mb.is_external(position)) between the store's begin and end calls.
  void begin_checkpoint_read(MicroBatch& mb, size_t position, size_t module);
  void end_checkpoint(MicroBatch& mb, size_t position, bool read, bool discard);
  // The residual-stream wiring of module i within mb: what it reads and writes in the forward,
  // and the gradient of its output in the backward.
  const float* input_of(MicroBatch& mb, size_t i) const;
  float* output_of(MicroBatch& mb, size_t i) const;
  float* output_grad_of(MicroBatch& mb, size_t i) const;

  GPTConfig config_;
  PipelineStage stage_;
  size_t num_modules_;  // the whole model's top-level modules (indices in a MicroBatch)
  ModuleList modules_;  // this stage's, in forward order
  ParamLayout layout_;
  std::unique_ptr<TensorParallelGroup> tp_;  // null at tp 1
  std::unique_ptr<UlyssesGroup> ulysses_;    // null at ulysses 1
  std::vector<char> finishes_unit_;  // per module: last of its unit in the backward (grads_done)
  DeviceAllocator& allocator_;
  Device& device_;
  kernels::Kernels& k_;
  DeviceBuffer workspace_;                 // kernels' scratch (cuBLASLt)
  std::shared_ptr<ModelScratch> scratch_;  // shared by a rank's pipeline chunks (share_scratch)
  std::unique_ptr<MicroBatch> cached_;     // the facade's
  Recompute recompute_;
  DType compute_ = DType::f32;        // set_compute
  CheckpointStore* store_ = nullptr;  // null: checkpoints stay in the MicroBatch
  DeviceTimeline* timeline_ = nullptr;
  bool fuse_residual_ = true;  // set_residual_fusion
};

}  // namespace tierzero::nn
