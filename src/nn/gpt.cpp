// GPT: runs its top-level modules in order over a MicroBatch, one ParamProvider unit per module.
// The forward acquires each module's unit around its forward. The backward walks the modules in
// reverse: parameters (when the backward reads them), then the checkpoint recompute, then the
// gradients; the module that is last to touch a unit in the backward (the embedding, for the
// unit it shares with the tied head) reports the unit's gradients done. These are the calls the
// ZeRO store traces and prefetches along, so their order is part of the contract.
#include "tierzero/nn/gpt.hpp"

#include <algorithm>
#include <cmath>
#include <string>
#include <unordered_set>

#include "cross_entropy.hpp"
#include "head.hpp"
#include "tierzero/core/error.hpp"
#include "tierzero/core/log.hpp"

namespace tierzero::nn {

namespace {

PipelineStage stage_of(const GPTConfig& config, const ModelParallel& parallel) {
  if (parallel.pipeline.stages <= 1) return PipelineStage::whole(config);
  const PipelineStage& p = parallel.pipeline;
  TZ_CHECK(
      p.stage < p.stages && p.num_blocks >= 1 && p.first_block + p.num_blocks <= config.num_layers,
      "pipeline " + p.str() + " does not fit the model's " + std::to_string(config.num_layers) +
          " blocks",
      "build the stages with partition_pipeline");
  return p;
}

// The stage's modules, in forward order: its blocks, the embedding on the first stage, the final
// norm and the head on the last.
ModuleList stage_modules(const GPTConfig& config, const PipelineStage& stage) {
  ModuleList all = make_gpt_modules(config);
  ModuleList kept;
  const size_t L = config.num_layers;
  for (size_t i = 0; i < all.size(); ++i) {
    const bool keep = i == 0 ? stage.first() : i <= L ? stage.holds_block(i - 1) : stage.last();
    if (keep) kept.push_back(std::move(all[i]));
  }
  return kept;
}

// The units the stage's modules use, in the whole model's unit order: those they declare, and
// those declared elsewhere that one of them shares (the head's embeddings on the last stage).
std::vector<UnitDecl> stage_units(const GPTConfig& config, const ModuleList& modules,
                                  const PipelineStage& stage) {
  // A stage of the whole model keeps every module, so it uses every unit they declare: those
  // modules' own declarations, without building the model's modules a second time.
  if (stage.first() && stage.last() && stage.first_block == 0 &&
      stage.num_blocks == config.num_layers)
    return param_units(modules);
  std::unordered_set<std::string> used;  // a set: linear in the model's blocks
  for (const auto& m : modules) used.insert(m->unit_name());
  std::vector<UnitDecl> units;
  for (UnitDecl& decl : gpt_param_units(config))
    if (used.count(decl.name) > 0) units.push_back(std::move(decl));
  return units;
}

}  // namespace

ParamLayout stage_param_layout(const GPTConfig& config, const PipelineStage& stage,
                               const TensorParallel& tp) {
  const PipelineStage st = stage.stages <= 1 ? PipelineStage::whole(config) : stage;
  return ParamLayout(stage_units(config, stage_modules(config, st), st), tp);
}

ParamLayout chunks_param_layout(const GPTConfig& config, const std::vector<PipelineStage>& chunks,
                                const TensorParallel& tp) {
  std::vector<UnitDecl> units;
  for (const PipelineStage& chunk : chunks)
    for (UnitDecl& decl : stage_units(config, stage_modules(config, chunk), chunk))
      units.push_back(std::move(decl));
  return ParamLayout(units, tp);
}

std::vector<size_t> chunk_unit_offsets(const GPTConfig& config,
                                       const std::vector<PipelineStage>& chunks) {
  std::vector<size_t> offsets;
  size_t at = 0;
  for (const PipelineStage& chunk : chunks) {
    offsets.push_back(at);
    at += stage_units(config, stage_modules(config, chunk), chunk).size();
  }
  return offsets;
}

namespace {

TensorParallel place_of(const ModelParallel& parallel) {
  if (parallel.tensor_parallel == nullptr) return {};
  const comm::Communicator& g = *parallel.tensor_parallel;
  return TensorParallel{static_cast<size_t>(g.size()), static_cast<size_t>(g.rank())};
}

void check_shape(const GPTConfig& config, size_t B, size_t T) {
  TZ_CHECK(B > 0 && T > 0, "empty batch", "");
  TZ_CHECK(T <= config.max_seq_len,
           "sequence length " + std::to_string(T) + " exceeds the model's context length " +
               std::to_string(config.max_seq_len),
           "lower seq_len or use a model with a longer context");
}

void check_tokens(const GPTConfig& config, const int32_t* tokens, const int32_t* targets, size_t B,
                  size_t T) {
  const size_t V = config.vocab_size;
  for (size_t i = 0; i < B * T; ++i) {
    bool bad_tok = tokens[i] < 0 || static_cast<size_t>(tokens[i]) >= V;
    bool bad_tgt = targets && (targets[i] < 0 || static_cast<size_t>(targets[i]) >= V);
    if (bad_tok || bad_tgt)
      TZ_THROW("token id " + std::to_string(bad_tok ? tokens[i] : targets[i]) + " at batch row " +
                   std::to_string(i / T) + ", position " + std::to_string(i % T) +
                   " is outside the vocabulary [0, " + std::to_string(V) + ")",
               "the data was tokenized for a different vocabulary");
  }
}

}  // namespace

GPT::GPT(const GPTConfig& config, DeviceAllocator& allocator, const ModelParallel& parallel)
    : config_(config),
      stage_(stage_of(config, parallel)),
      num_modules_(config.num_layers + 3),
      modules_(stage_modules(config, stage_)),
      layout_(stage_units(config, modules_, stage_),
              place_of(parallel)),  // checks every tensor divides
      allocator_(allocator),
      device_(allocator.device()),
      k_(device_.kernels()),
      scratch_(std::make_shared<ModelScratch>()) {
  const size_t u = parallel.ulysses ? static_cast<size_t>(parallel.ulysses->size()) : 1;
  (void)ActivationDims::of(config_, 1, u, layout_.tp().size, false, u);  // heads, vocabulary
  TZ_CHECK(u == 1 || stage_.stages == 1,
           "ulysses_parallel " + std::to_string(u) + " with pipeline_parallel is not supported",
           "use ulysses_parallel without pipeline_parallel");
  if (layout_.tp().size > 1)
    tp_ = std::make_unique<TensorParallelGroup>(*parallel.tensor_parallel, device_,
                                                parallel.sequence_parallel);
  if (u > 1) ulysses_ = std::make_unique<UlyssesGroup>(*parallel.ulysses, device_);
  for (auto& m : modules_) m->bind(layout_);
  for (size_t i = 0; i < modules_.size(); ++i) {
    bool earlier_user = false;
    for (size_t j = 0; j < i; ++j) earlier_user |= modules_[j]->unit() == modules_[i]->unit();
    finishes_unit_.push_back(earlier_user ? 0 : 1);
  }
  const size_t ws = k_.workspace_bytes();
  if (ws > 0) {
    workspace_ = allocator_.allocate(ws, Category::workspace, "kernel workspace");
    k_.set_workspace(workspace_.data(), ws);
  }
  k_.set_stream(device_.default_stream().native());
  // The activation accounting (ActivationDims, the estimator) sizes the attention's saved state
  // as one logsumexp per query row and its scratch as nothing: a backend must agree.
  const kernels::AttentionShape probe{3, 5, 4, 2, 8};
  TZ_CHECK(k_.attention_saved_floats(probe) == probe.B * probe.n_head * probe.T &&
               k_.attention_scratch_floats(probe) == 0,
           std::string("the ") + k_.backend_name() +
               " backend's attention keeps other state than ActivationDims counts",
           "give the backend a tiled attention (lse (B, NH, T), no scratch), or teach "
           "ActivationDims its sizes");
}

size_t GPT::micro_batch_bytes_for(const GPTConfig& config, size_t B, size_t T, Recompute recompute,
                                  size_t tp, bool sequence_parallel, size_t ulysses,
                                  DType compute) {
  return MicroBatch::bytes_for(
      config, ActivationDims::of(config, B, T, tp, sequence_parallel, ulysses, compute),
      PipelineStage::whole(config), recompute);
}

size_t GPT::micro_batch_bytes_for(const GPTConfig& config, const ActivationDims& dims,
                                  const PipelineStage& stage, Recompute recompute,
                                  bool external_checkpoints) {
  return MicroBatch::bytes_for(config, dims, stage, recompute, external_checkpoints);
}

size_t GPT::checkpoint_bytes_for(const ActivationDims& d) {
  return d.stream_tokens * d.channels * sizeof(float);
}

size_t GPT::scratch_bytes_for(const GPTConfig& config, size_t B, size_t T, Recompute recompute,
                              size_t tp, bool sequence_parallel, size_t ulysses, DType compute) {
  return ModelScratch::bytes_for(
      ActivationDims::of(config, B, T, tp, sequence_parallel, ulysses, compute), recompute);
}

size_t GPT::activation_bytes_for(const GPTConfig& config, size_t B, size_t T, Recompute recompute,
                                 size_t tp, bool sequence_parallel, size_t ulysses, DType compute) {
  return micro_batch_bytes_for(config, B, T, recompute, tp, sequence_parallel, ulysses, compute) +
         scratch_bytes_for(config, B, T, recompute, tp, sequence_parallel, ulysses, compute);
}

ActivationDims GPT::dims(size_t B, size_t T) const {
  return ActivationDims::of(config_, B, T, layout_.tp().size, sequence_parallel(), ulysses(),
                            compute_);
}

void GPT::set_device_timeline(DeviceTimeline* timeline) {
  timeline_ = timeline;
  if (tp_) tp_->set_device_timeline(timeline);
  if (ulysses_) ulysses_->set_device_timeline(timeline);
}

TensorParallelTraffic GPT::tensor_parallel_traffic() const {
  return tp_ ? tp_->traffic() : TensorParallelTraffic{};
}

void GPT::reset_tensor_parallel_traffic() {
  if (tp_) tp_->reset_traffic();
}

UlyssesTraffic GPT::ulysses_traffic() const {
  return ulysses_ ? ulysses_->traffic() : UlyssesTraffic{};
}

void GPT::reset_ulysses_traffic() {
  if (ulysses_) ulysses_->reset_traffic();
}

void GPT::share_scratch(GPT& with) {
  TZ_CHECK(&with.allocator_ == &allocator_, "share_scratch across allocators",
           "internal error: the chunks of one rank share one");
  scratch_ = with.scratch_;
}

size_t GPT::activation_bytes() const {
  return cached_ ? cached_->activation_bytes() + scratch_->bytes() : 0;
}

MicroBatch GPT::make_micro_batch(size_t B, size_t T) {
  check_shape(config_, B, T);
  return MicroBatch(config_, num_modules_, dims(B, T), stage_, recompute_, allocator_,
                    store_ != nullptr);
}

void GPT::check(const MicroBatch& mb) const {
  TZ_CHECK(mb.dims().compute == compute_,
           std::string("micro-batch was made for ") + dtype_name(mb.dims().compute) +
               " compute but the model now computes in " + dtype_name(compute_),
           "make new micro-batches after set_compute");
  TZ_CHECK(mb.inputs_.size() == num_modules_ && mb.config_.str() == config_.str() &&
               mb.dims() == dims(mb.B(), mb.dims().seq_len) && mb.stage().stage == stage_.stage &&
               mb.stage().first_block == stage_.first_block &&
               mb.stage().num_blocks == stage_.num_blocks,
           "micro-batch was made for another model (" + mb.config_.str() + ")",
           "make micro-batches with this model's make_micro_batch");
  TZ_CHECK(mb.recompute() == recompute_,
           std::string("micro-batch was made with activation checkpointing ") +
               (mb.checkpointing() ? "on" : "off") + " (recompute " + mb.recompute().name() +
               ") but the model now has it " + (recompute_.is_full() ? "on" : "off") +
               " (recompute " + recompute_.name() + ")",
           "make new micro-batches after changing the recompute mode (activation checkpointing)");
  TZ_CHECK(mb.external_checkpoints() == (recompute_.is_full() && store_ != nullptr),
           "micro-batch was made for another checkpoint placement",
           "make new micro-batches after set_checkpoint_store");
}

void GPT::ensure_scratch(const ActivationDims& d) {
  if (!scratch_->fits(d, recompute_)) scratch_->allocate(d, recompute_, allocator_);
}

MicroBatch& GPT::cached(size_t B, size_t T) {
  TZ_CHECK(stage_.stages == 1,
           "evaluate and forward_backward run the whole model, not pipeline " + stage_.str(),
           "drive a pipeline stage through forward/backward with micro-batches");
  if (cached_ && cached_->B() == B && cached_->dims().seq_len == T &&
      scratch_->fits(cached_->dims(), recompute_))
    return *cached_;
  check_shape(config_, B, T);
  const ActivationDims d = dims(B, T);
  cached_.reset();  // release the old set first so the budget sees the real peak
  scratch_->release();
  scratch_->allocate(d, recompute_, allocator_);
  cached_ = std::make_unique<MicroBatch>(make_micro_batch(B, T));
  return *cached_;
}

void GPT::set_recompute(Recompute recompute) {
  if (recompute == recompute_) return;
  recompute_ = recompute;
  if (!cached_) return;  // nothing allocated yet: the first batch allocates in this mode
  const size_t B = cached_->B(), T = cached_->dims().seq_len;
  cached_.reset();
  cached(B, T);
}

void GPT::set_compute(DType compute) {
  if (compute == compute_) return;
  compute_ = compute;
  const kernels::MatmulPrecision p = k_.matmul_precision();
  if (compute_ != DType::f32 && device_.kind() == DeviceKind::cuda &&
      p != kernels::MatmulPrecision::bf16 && p != kernels::MatmulPrecision::fp16)
    log::warn(std::string(dtype_name(compute_)) + " compute with " +
              kernels::matmul_precision_name(p) +
              " products: the attention runs its CUDA-core kernels, not the tensor-core ones (set "
              "the kernels' matmul precision to " +
              dtype_name(compute_) + ")");
  if (!cached_) return;
  const size_t B = cached_->B(), T = cached_->dims().seq_len;
  cached_.reset();
  cached(B, T);
}

void GPT::set_checkpoint_store(CheckpointStore* store) {
  if (store == store_) return;
  store_ = store;
  if (!cached_) return;
  const size_t B = cached_->B(), T = cached_->dims().seq_len;
  cached_.reset();
  cached(B, T);
}

float* GPT::input_buffer(MicroBatch& mb) {
  check(mb);
  const size_t first = stage_.first_block;
  if (mb.is_external(first) && !mb.has_stage_input()) {
    mb.set_external(first, store_->begin_write(mb.id(), first, checkpoint_bytes_for(mb.dims())));
    // The receive writes it outside the default stream: the slot's last reader there (a block
    // that read the checkpoint it held before) must be done first.
    device_.default_stream().synchronize();
  }
  return mb.stage_input();
}

bool GPT::can_take_input_buffer_ahead() const {
  return store_ == nullptr || !recompute_.is_full() || store_->device_slots() >= 3;
}

void GPT::begin_checkpoint_read(MicroBatch& mb, size_t position, size_t module) {
  float* at = const_cast<float*>(store_->begin_read(mb.id(), position));
  mb.set_external(position, at);
  mb.save_input(module, at);
}

void GPT::end_checkpoint(MicroBatch& mb, size_t position, bool read, bool discard) {
  mb.set_external(position, nullptr);
  if (read)
    store_->end_read(mb.id(), position);
  else
    store_->end_write(mb.id(), position, discard);
}

ModuleContext GPT::context(MicroBatch& mb) {
  return ModuleContext{k_,      device_,   device_.default_stream(),
                       mb,      *scratch_, tp_.get(),
                       nullptr, nullptr,   ulysses_.get()};
}

void GPT::acquire(ModuleContext& ctx, ParamProvider& params, size_t unit) const {
  if (compute_ == DType::f32) {
    ctx.params = params.acquire_params(unit);
    return;
  }
  TZ_CHECK(params.params16_type() == compute_,
           std::string("the model computes in ") + dtype_name(compute_) +
               " but its parameters are handed out in " + dtype_name(params.params16_type()),
           "hold the working parameters in the compute dtype (bf16 or fp16 training), or set "
           "the compute dtype to fp32");
  ctx.params16 = params.acquire_params16(unit);
}

void GPT::cross_entropy(MicroBatch& mb, const float* dloss) {
  ModuleContext ctx = context(mb);
  cross_entropy_rows(ctx, mb.logits(), 0, mb.dims().tokens, config_.vocab_size, dloss);
}

Head* GPT::chunked_head(const MicroBatch& mb) const {
  if (!stage_.last() || !mb.dims().chunked_logits()) return nullptr;
  return dynamic_cast<Head*>(modules_.back().get());
}

// Module i: 0 the embedding, 1..L the blocks, L + 1 the final norm, L + 2 the head.
float* GPT::output_of(MicroBatch& mb, size_t i) const {
  const size_t L = config_.num_layers;
  if (i <= L) return mb.residual(i);
  // The final norm writes mb.lnf() and the head reads it, in the compute dtype: an fp32 pointer
  // in fp32 compute only.
  if (i == L + 1) return compute_ == DType::f32 ? mb.lnf().f32() : nullptr;
  return mb.logits();
}

const float* GPT::input_of(MicroBatch& mb, size_t i) const {
  return i == 0 ? nullptr : output_of(mb, i - 1);  // the embedding reads mb's tokens
}

float* GPT::output_grad_of(MicroBatch& mb, size_t i) const {
  const size_t L = config_.num_layers;
  if (i <= L) return mb.dresidual();
  // The final norm's output gradient lives only from the head's backward to its own.
  // The logits' gradient, in place (in 16-bit compute the head reads mb.dlogits16()).
  return i == L + 1 ? scratch_->dln() : mb.logits();
}

void GPT::forward(MicroBatch& mb, ParamProvider& params, const int32_t* tokens,
                  const int32_t* targets, bool for_backward) {
  check(mb);
  const size_t B = mb.B(), Ts = mb.dims().seq_len;
  check_tokens(config_, tokens, targets, B, Ts);
  ensure_scratch(mb.dims());
  Stream& s = device_.default_stream();
  const size_t n = mb.B() * mb.T();
  if (ulysses_) {  // this rank's slice of each sequence, through the micro-batch's host rows
    const size_t T = mb.T(), first = ulysses_->rank() * T;
    for (size_t b = 0; b < B; ++b) {
      std::copy_n(tokens + b * Ts + first, T, mb.host_slice_.begin() + b * T);
      if (targets) std::copy_n(targets + b * Ts + first, T, mb.host_slice_.begin() + n + b * T);
    }
    tokens = mb.host_slice_.data();                           // (B, T)
    targets = targets ? mb.host_slice_.data() + n : nullptr;  // (B, T)
  }
  device_.copy(mb.buffers_.tokens.data(), tokens, n * sizeof(int32_t), CopyKind::host_to_device, s);
  if (targets)
    device_.copy(mb.buffers_.targets.data(), targets, n * sizeof(int32_t), CopyKind::host_to_device,
                 s);
  mb.has_targets_ = targets != nullptr;
  mb.losses_ready_ = false;
  mb.forwarded_ = false;
  TZ_CHECK(stage_.first() || mb.has_stage_input(),
           "the input of " + stage_.str() + " was not received into the checkpoint store's buffer",
           "receive a pipeline stage's input into GPT::input_buffer(mb) before its forward");

  Head* const chunked = chunked_head(mb);  // null: the head writes whole logits
  ResidualSum left{};                      // the previous block's output, when left as a sum
  for (size_t i = 0; i < modules_.size(); ++i) {
    Module& m = *modules_[i];
    const size_t g = m.index();  // in the whole model: wires it to the residual stream
    ModuleContext ctx = context(mb);
    // A block leaves its last residual add to the next module when that one fuses it into its
    // norm; the stage's last block (a pipeline boundary) writes its output whole.
    ResidualSum next{};
    const bool fuse =
        fuse_residual_ && i + 1 < modules_.size() && modules_[i + 1]->takes_residual_sum();
    ctx.in_sum = left.into ? &left : nullptr;
    ctx.out_sum = fuse ? &next : nullptr;
    // A module writes the checkpoint of the next block into the store's buffer (the embeddings
    // that of block 0), and a block hands its own input to the store once its forward is issued
    // (module g reads residual g - 1).
    if (mb.is_external(g))
      mb.set_external(g, store_->begin_write(mb.id(), g, checkpoint_bytes_for(mb.dims())));
    acquire(ctx, params, m.unit());
    const size_t span = timeline_ ? timeline_->open(s) : 0;
    m.forward(ctx, input_of(mb, g), output_of(mb, g));
    // An evaluation's loss with chunked logits: the head's chunks now, while its unit is here
    // (a training forward leaves them to the backward).
    if (&m == chunked && !for_backward && mb.has_targets_) {
      chunked->classify(ctx, nullptr, nullptr);
      mb.losses_ready_ = true;
    }
    if (timeline_)
      timeline_->close(span, s, Track::compute, "forward", static_cast<int64_t>(m.unit()));
    params.release_params(m.unit());
    if (g > 0 && mb.is_external(g - 1)) end_checkpoint(mb, g - 1, false, !for_backward);
    left = next;
  }
  TZ_CHECK(left.into == nullptr,
           "the last module of " + stage_.str() + " left its output unwritten",
           "internal error: only a module followed by one that takes a ResidualSum leaves one");
  mb.forwarded_ = true;
}

void GPT::backward(MicroBatch& mb, ParamProvider& params, float grad_scale) {
  check(mb);
  TZ_CHECK(mb.forwarded_, "backward of a micro-batch without a forward since its last backward",
           "run forward(mb, ...) first");
  const ActivationDims& d = mb.dims();
  ensure_scratch(d);
  // The gradient of each token's loss; with chunked logits the head's classify() computes the
  // loss and its gradient chunk by chunk in the loop below.
  const float dloss = grad_scale / static_cast<float>(d.tokens);
  Head* const chunked = chunked_head(mb);
  if (stage_.last()) {
    TZ_CHECK(mb.has_targets_, "backward needs targets", "pass targets to forward");
    if (chunked == nullptr) cross_entropy(mb, &dloss);
    mb.losses_ready_ = true;
  }  // else the next stage's gradient of this one's output is in mb.dresidual()
  mb.forwarded_ = false;  // the logits now hold their gradient (fp32 compute)

  // 16-bit compute: whether the scratch's 16-bit copy of the stream's gradient holds the next
  // module's dout (ModuleContext::dout16); a stage's last module starts without it.
  bool dout16 = false;
  for (size_t i = modules_.size(); i-- > 0;) {
    Module& m = *modules_[i];
    const size_t unit = m.unit();
    const size_t g = m.index();
    ModuleContext ctx = context(mb);
    ctx.dout16 = dout16;
    ctx.want_din16 = compute_ != DType::f32 && i > 0 && modules_[i - 1]->block() >= 0;
    const bool stored = g > 0 && mb.is_external(g - 1);
    if (m.backward_reads_params()) acquire(ctx, params, unit);
    if (stored) begin_checkpoint_read(mb, g - 1, g);  // its input, read ahead by the store
    Stream& s = ctx.stream;
    const auto unit_id = static_cast<int64_t>(unit);
    if (mb.recompute().mode() != Recompute::none) {
      const size_t span = timeline_ ? timeline_->open(s) : 0;
      m.recompute(ctx);
      if (timeline_) timeline_->close(span, s, Track::compute, "recompute", unit_id);
    }
    // The gradients may take the host a wait (a reduction's buffer): the span opens after.
    ctx.grads = params.acquire_grads(unit);
    const size_t span = timeline_ ? timeline_->open(s) : 0;
    float* dout = output_grad_of(mb, g);
    float* din = g > 0 ? output_grad_of(mb, g - 1) : nullptr;
    // A fresh gradient starts at zero; the residual stream's running one carries on.
    if (din && din != dout) ctx.zero(din, d.stream_tokens * d.channels);
    if (&m == chunked)
      chunked->classify(ctx, &dloss, din);
    else
      m.backward(ctx, dout, din);
    dout16 = ctx.wrote_din16;
    if (timeline_) timeline_->close(span, s, Track::compute, "backward", unit_id);
    if (stored) end_checkpoint(mb, g - 1, true, false);
    if (m.backward_reads_params()) params.release_params(unit);
    if (finishes_unit_[i]) params.grads_done(unit);
  }
}

float GPT::loss(MicroBatch& mb) {
  queue_loss_copy(mb, mb.host_losses_.data());
  device_.default_stream().synchronize();
  return mean_loss(mb.host_losses_.data(), mb.B() * mb.T());
}

void GPT::queue_loss_copy(MicroBatch& mb, float* host_losses) {
  TZ_CHECK(stage_.last(), "the loss is computed on the last pipeline stage, not " + stage_.str(),
           "read the loss on the last stage");
  TZ_CHECK(mb.has_targets_, "loss of a micro-batch without targets", "pass targets to forward");
  if (!mb.losses_ready_) {
    TZ_CHECK(mb.forwarded_, "loss of a micro-batch that has not run forward",
             "run forward(mb, ...) first");
    TZ_CHECK(chunked_head(mb) == nullptr,
             "loss of a micro-batch whose classifier runs in chunks, after a training forward",
             "with chunked logits the backward computes the loss (or run forward(mb, ..., "
             "for_backward = false) to evaluate)");
    ensure_scratch(mb.dims());
    cross_entropy(mb, nullptr);
    mb.losses_ready_ = true;
  }
  device_.copy(host_losses, mb.losses(), mb.B() * mb.T() * sizeof(float), CopyKind::device_to_host,
               device_.default_stream());
}

float GPT::mean_loss(const float* host_losses, size_t n) {
  double sum = 0.0;
  for (size_t i = 0; i < n; ++i) sum += static_cast<double>(host_losses[i]);
  const double mean = sum / static_cast<double>(n);
  if (!std::isfinite(mean))
    TZ_THROW("loss is not finite (" + std::to_string(mean) + ")",
             "lower the learning rate or enable gradient_clipping");
  return static_cast<float>(mean);
}

float GPT::evaluate(ParamProvider& params, const int32_t* tokens, const int32_t* targets, size_t B,
                    size_t T) {
  MicroBatch& mb = cached(B, T);
  forward(mb, params, tokens, targets, false);
  if (!targets) {
    device_.default_stream().synchronize();
    return 0.0f;
  }
  return loss(mb);
}

float GPT::forward_backward(ParamProvider& params, const int32_t* tokens, const int32_t* targets,
                            size_t B, size_t T, float grad_scale) {
  TZ_CHECK(targets != nullptr, "forward_backward needs targets", "");
  MicroBatch& mb = cached(B, T);
  forward(mb, params, tokens, targets);
  backward(mb, params, grad_scale);
  return loss(mb);
}

size_t GPT::forward_backward_queued(ParamProvider& params, const int32_t* tokens,
                                    const int32_t* targets, size_t B, size_t T, float grad_scale,
                                    float* host_losses) {
  TZ_CHECK(targets != nullptr, "forward_backward needs targets", "");
  MicroBatch& mb = cached(B, T);
  forward(mb, params, tokens, targets);
  backward(mb, params, grad_scale);
  queue_loss_copy(mb, host_losses);
  return mb.B() * mb.T();
}

}  // namespace tierzero::nn
