// GPT-2 forward and backward over the Kernels interface, one unit at a time.
// Backward keeps one running gradient of the residual stream (dresidual): a residual add passes
// its gradient through unchanged, so the branch outputs use dresidual directly as their dout and
// the layernorm backward adds the branch's contribution into it.
// With activation checkpointing the per-block internals live in one layer's scratch, rebuilt by
// block_forward in the backward from the block's input (residual3 of the block before).
#include "tierzero/nn/gpt.hpp"

#include <cmath>

#include "tierzero/core/error.hpp"

namespace tierzero::nn {

GPT::GPT(const GPTConfig& config, DeviceAllocator& allocator)
    : config_(config),
      layout_(config),
      allocator_(allocator),
      device_(allocator.device()),
      k_(device_.kernels()) {
  const size_t ws = k_.workspace_bytes();
  if (ws > 0) {
    workspace_ = allocator_.allocate(ws, Category::workspace, "kernel workspace");
    k_.set_workspace(workspace_.data(), ws);
  }
  k_.set_stream(device_.default_stream().native());
}

std::vector<GPT::ActivationSpec> GPT::activation_specs(const GPTConfig& config, size_t B, size_t T,
                                                       bool checkpointing) {
  const size_t L = config.num_layers, C = config.channels, NH = config.num_heads;
  const size_t Vp = config.padded_vocab_size, BT = B * T;
  const size_t Ls = checkpointing ? 1 : L;  // layers of block internals kept at once
  constexpr size_t f = sizeof(float);
  using A = Activations;
  return {
      {&A::tokens, BT * sizeof(int32_t), "tokens"},
      {&A::targets, BT * sizeof(int32_t), "targets"},
      {&A::encoded, BT * C * f, "encoded"},
      {&A::ln1, Ls * BT * C * f, "ln1"},
      {&A::ln1_mean, Ls * BT * f, "ln1_mean"},
      {&A::ln1_rstd, Ls * BT * f, "ln1_rstd"},
      {&A::qkv, Ls * BT * 3 * C * f, "qkv"},
      {&A::atty, Ls * BT * C * f, "atty"},
      {&A::att, Ls * B * NH * T * T * f, "att"},
      {&A::residual2, Ls * BT * C * f, "residual2"},
      {&A::ln2, Ls * BT * C * f, "ln2"},
      {&A::ln2_mean, Ls * BT * f, "ln2_mean"},
      {&A::ln2_rstd, Ls * BT * f, "ln2_rstd"},
      {&A::fch, Ls * BT * 4 * C * f, "fch"},
      {&A::fch_gelu, Ls * BT * 4 * C * f, "fch_gelu"},
      {&A::residual3, L * BT * C * f, checkpointing ? "residual3 (checkpoints)" : "residual3"},
      {&A::proj, BT * C * f, "proj"},
      {&A::lnf, BT * C * f, "lnf"},
      {&A::lnf_mean, BT * f, "lnf_mean"},
      {&A::lnf_rstd, BT * f, "lnf_rstd"},
      {&A::logits, BT * Vp * f, "logits"},
      {&A::losses, BT * f, "losses"},
      {&A::dresidual, BT * C * f, "dresidual"},
      {&A::dln, BT * C * f, "dln"},
      {&A::dqkv, BT * 3 * C * f, "dqkv"},
      {&A::datty, BT * C * f, "datty"},
      {&A::datt, B * NH * T * T * f, "datt"},
      {&A::dfch, BT * 4 * C * f, "dfch"},
      {&A::dfch_gelu, BT * 4 * C * f, "dfch_gelu"},
  };
}

size_t GPT::activation_bytes_for(const GPTConfig& config, size_t B, size_t T, bool checkpointing) {
  size_t total = 0;
  for (const ActivationSpec& a : activation_specs(config, B, T, checkpointing))
    total += DeviceAllocator::round_size(a.bytes);
  return total;
}

void GPT::allocate_activations(size_t B, size_t T) {
  if (B == act_B_ && T == act_T_) return;
  acts_ = Activations{};  // release the old set first so the budget sees the real peak
  activation_bytes_ = 0;
  act_B_ = act_T_ = 0;  // until the new set is complete (an allocation may throw)
  for (const ActivationSpec& a : activation_specs(config_, B, T, checkpointing_)) {
    acts_.*a.member = allocator_.allocate(a.bytes, Category::activation, a.label);
    activation_bytes_ += DeviceAllocator::round_size(a.bytes);
  }
  host_losses_.resize(B * T);
  act_B_ = B;
  act_T_ = T;
}

void GPT::set_activation_checkpointing(bool on) {
  if (on == checkpointing_) return;
  checkpointing_ = on;
  if (act_B_ == 0) return;  // nothing allocated yet: the first batch allocates in this mode
  const size_t B = act_B_, T = act_T_;
  act_B_ = act_T_ = 0;  // force the reallocation for the same shape
  allocate_activations(B, T);
}

void GPT::prepare(const int32_t* tokens, const int32_t* targets, size_t B, size_t T) {
  TZ_CHECK(B > 0 && T > 0, "empty batch", "");
  TZ_CHECK(T <= config_.max_seq_len,
           "sequence length " + std::to_string(T) + " exceeds the model's context length " +
               std::to_string(config_.max_seq_len),
           "lower seq_len or use a model with a longer context");
  const size_t V = config_.vocab_size;
  for (size_t i = 0; i < B * T; ++i) {
    bool bad_tok = tokens[i] < 0 || static_cast<size_t>(tokens[i]) >= V;
    bool bad_tgt = targets && (targets[i] < 0 || static_cast<size_t>(targets[i]) >= V);
    if (bad_tok || bad_tgt)
      TZ_THROW("token id " + std::to_string(bad_tok ? tokens[i] : targets[i]) + " at batch row " +
                   std::to_string(i / T) + ", position " + std::to_string(i % T) +
                   " is outside the vocabulary [0, " + std::to_string(V) + ")",
               "the data was tokenized for a different vocabulary");
  }
  allocate_activations(B, T);
  Stream& s = device_.default_stream();
  device_.copy(acts_.tokens.data(), tokens, B * T * sizeof(int32_t), CopyKind::host_to_device, s);
  if (targets)
    device_.copy(acts_.targets.data(), targets, B * T * sizeof(int32_t), CopyKind::host_to_device,
                 s);
}

void GPT::forward(ParamProvider& params, size_t B, size_t T) {
  const size_t C = config_.channels, BT = B * T;
  Activations& a = acts_;
  auto tensor = [&](const float* unit_base, ParamKind kind, int layer) {
    const ParamTensor& t = layout_.get(kind, layer);
    return unit_base + (t.offset - layout_.units()[t.unit].offset);
  };

  const size_t emb = layout_.embeddings_unit();
  const float* e = params.acquire_params(emb);
  k_.encoder_forward(a.encoded.f32(), static_cast<const int32_t*>(a.tokens.data()),
                     tensor(e, ParamKind::wte, -1), tensor(e, ParamKind::wpe, -1), B, T, C);
  params.release_params(emb);

  for (size_t l = 0; l < config_.num_layers; ++l) {
    const size_t unit = layout_.block_unit(l);
    block_forward(params.acquire_params(unit), l, B, T, /*write_output=*/true);
    params.release_params(unit);
  }

  const size_t fin = layout_.final_norm_unit();
  const float* f = params.acquire_params(fin);
  const float* last = a.residual3.f32() + (config_.num_layers - 1) * BT * C;
  k_.layernorm_forward(a.lnf.f32(), a.lnf_mean.f32(), a.lnf_rstd.f32(), last,
                       tensor(f, ParamKind::lnfw, -1), tensor(f, ParamKind::lnfb, -1), BT, C);
  params.release_params(fin);

  // Tied head: logits = lnf @ wte^T.
  const float* e2 = params.acquire_params(emb);
  k_.matmul_forward(a.logits.f32(), a.lnf.f32(), tensor(e2, ParamKind::wte, -1), nullptr, BT, C,
                    config_.padded_vocab_size);
  params.release_params(emb);
}

void GPT::block_forward(const float* p, size_t l, size_t B, size_t T, bool write_output) {
  const size_t C = config_.channels, NH = config_.num_heads, BT = B * T;
  const int li = static_cast<int>(l);
  const size_t sl = slot(l);
  Activations& a = acts_;
  auto tensor = [&](const float* unit_base, ParamKind kind, int layer) {
    const ParamTensor& t = layout_.get(kind, layer);
    return unit_base + (t.offset - layout_.units()[t.unit].offset);
  };
  const float* residual = l == 0 ? a.encoded.f32() : a.residual3.f32() + (l - 1) * BT * C;
  float* ln1 = a.ln1.f32() + sl * BT * C;
  float* qkv = a.qkv.f32() + sl * BT * 3 * C;
  float* atty = a.atty.f32() + sl * BT * C;
  float* att = a.att.f32() + sl * B * NH * T * T;
  float* residual2 = a.residual2.f32() + sl * BT * C;
  float* ln2 = a.ln2.f32() + sl * BT * C;
  float* fch = a.fch.f32() + sl * BT * 4 * C;
  float* fch_gelu = a.fch_gelu.f32() + sl * BT * 4 * C;

  k_.layernorm_forward(ln1, a.ln1_mean.f32() + sl * BT, a.ln1_rstd.f32() + sl * BT, residual,
                       tensor(p, ParamKind::ln1w, li), tensor(p, ParamKind::ln1b, li), BT, C);
  k_.matmul_forward(qkv, ln1, tensor(p, ParamKind::qkvw, li), tensor(p, ParamKind::qkvb, li), BT, C,
                    3 * C);
  k_.attention_forward(atty, att, qkv, B, T, C, NH);
  k_.matmul_forward(a.proj.f32(), atty, tensor(p, ParamKind::attprojw, li),
                    tensor(p, ParamKind::attprojb, li), BT, C, C);
  k_.residual_forward(residual2, residual, a.proj.f32(), BT * C);
  k_.layernorm_forward(ln2, a.ln2_mean.f32() + sl * BT, a.ln2_rstd.f32() + sl * BT, residual2,
                       tensor(p, ParamKind::ln2w, li), tensor(p, ParamKind::ln2b, li), BT, C);
  k_.matmul_forward(fch, ln2, tensor(p, ParamKind::fcw, li), tensor(p, ParamKind::fcb, li), BT, C,
                    4 * C);
  k_.gelu_forward(fch_gelu, fch, BT * 4 * C);
  if (!write_output) return;
  k_.matmul_forward(a.proj.f32(), fch_gelu, tensor(p, ParamKind::fcprojw, li),
                    tensor(p, ParamKind::fcprojb, li), BT, 4 * C, C);
  k_.residual_forward(a.residual3.f32() + l * BT * C, residual2, a.proj.f32(), BT * C);
}

void GPT::backward(ParamProvider& params, size_t B, size_t T) {
  const size_t C = config_.channels, NH = config_.num_heads, BT = B * T;
  const size_t Vp = config_.padded_vocab_size;
  Activations& a = acts_;
  Stream& s = device_.default_stream();
  auto tensor = [&](auto* unit_base, ParamKind kind, int layer) {
    const ParamTensor& t = layout_.get(kind, layer);
    return unit_base + (t.offset - layout_.units()[t.unit].offset);
  };
  auto zero = [&](DeviceBuffer& b, size_t n) { device_.fill_zero(b.data(), n * sizeof(float), s); };

  // Head: logits now hold dlogits; dwte += dlogits^T lnf, dln = dlogits wte.
  const size_t emb = layout_.embeddings_unit();
  {
    const float* e = params.acquire_params(emb);
    float* ge = params.acquire_grads(emb);
    zero(a.dln, BT * C);
    k_.matmul_backward(a.dln.f32(), tensor(ge, ParamKind::wte, -1), nullptr, a.logits.f32(),
                       a.lnf.f32(), tensor(e, ParamKind::wte, -1), BT, C, Vp);
    params.release_params(emb);
  }
  {
    const size_t fin = layout_.final_norm_unit();
    const float* f = params.acquire_params(fin);
    float* gf = params.acquire_grads(fin);
    zero(a.dresidual, BT * C);
    const float* last = a.residual3.f32() + (config_.num_layers - 1) * BT * C;
    k_.layernorm_backward(a.dresidual.f32(), tensor(gf, ParamKind::lnfw, -1),
                          tensor(gf, ParamKind::lnfb, -1), a.dln.f32(), last,
                          tensor(f, ParamKind::lnfw, -1), a.lnf_mean.f32(), a.lnf_rstd.f32(), BT,
                          C);
    params.release_params(fin);
    params.grads_done(fin);
  }

  for (size_t li1 = config_.num_layers; li1 > 0; --li1) {
    const size_t l = li1 - 1;
    const int li = static_cast<int>(l);
    const size_t unit = layout_.block_unit(l);
    const float* p = params.acquire_params(unit);
    // Checkpointed: rebuild the block's internals from its input, inside this acquisition.
    if (checkpointing_) block_forward(p, l, B, T, /*write_output=*/false);
    float* g = params.acquire_grads(unit);
    const size_t sl = slot(l);
    const float* residual = l == 0 ? a.encoded.f32() : a.residual3.f32() + (l - 1) * BT * C;
    const float* ln1 = a.ln1.f32() + sl * BT * C;
    const float* qkv = a.qkv.f32() + sl * BT * 3 * C;
    const float* atty = a.atty.f32() + sl * BT * C;
    const float* att = a.att.f32() + sl * B * NH * T * T;
    const float* residual2 = a.residual2.f32() + sl * BT * C;
    const float* ln2 = a.ln2.f32() + sl * BT * C;
    const float* fch = a.fch.f32() + sl * BT * 4 * C;
    const float* fch_gelu = a.fch_gelu.f32() + sl * BT * 4 * C;
    float* dres = a.dresidual.f32();

    // MLP branch: residual3 = residual2 + fcproj(gelu(fc(ln2(residual2)))).
    zero(a.dfch_gelu, BT * 4 * C);
    k_.matmul_backward(a.dfch_gelu.f32(), tensor(g, ParamKind::fcprojw, li),
                       tensor(g, ParamKind::fcprojb, li), dres, fch_gelu,
                       tensor(p, ParamKind::fcprojw, li), BT, 4 * C, C);
    zero(a.dfch, BT * 4 * C);
    k_.gelu_backward(a.dfch.f32(), fch, a.dfch_gelu.f32(), BT * 4 * C);
    zero(a.dln, BT * C);
    k_.matmul_backward(a.dln.f32(), tensor(g, ParamKind::fcw, li), tensor(g, ParamKind::fcb, li),
                       a.dfch.f32(), ln2, tensor(p, ParamKind::fcw, li), BT, C, 4 * C);
    k_.layernorm_backward(dres, tensor(g, ParamKind::ln2w, li), tensor(g, ParamKind::ln2b, li),
                          a.dln.f32(), residual2, tensor(p, ParamKind::ln2w, li),
                          a.ln2_mean.f32() + sl * BT, a.ln2_rstd.f32() + sl * BT, BT, C);

    // Attention branch: residual2 = residual + attproj(attention(qkv(ln1(residual)))).
    zero(a.datty, BT * C);
    k_.matmul_backward(a.datty.f32(), tensor(g, ParamKind::attprojw, li),
                       tensor(g, ParamKind::attprojb, li), dres, atty,
                       tensor(p, ParamKind::attprojw, li), BT, C, C);
    zero(a.dqkv, BT * 3 * C);
    k_.attention_backward(a.dqkv.f32(), a.datt.f32(), a.datty.f32(), qkv, att, B, T, C, NH);
    zero(a.dln, BT * C);
    k_.matmul_backward(a.dln.f32(), tensor(g, ParamKind::qkvw, li), tensor(g, ParamKind::qkvb, li),
                       a.dqkv.f32(), ln1, tensor(p, ParamKind::qkvw, li), BT, C, 3 * C);
    k_.layernorm_backward(dres, tensor(g, ParamKind::ln1w, li), tensor(g, ParamKind::ln1b, li),
                          a.dln.f32(), residual, tensor(p, ParamKind::ln1w, li),
                          a.ln1_mean.f32() + sl * BT, a.ln1_rstd.f32() + sl * BT, BT, C);
    params.release_params(unit);
    params.grads_done(unit);
  }

  float* ge = params.acquire_grads(emb);
  k_.encoder_backward(tensor(ge, ParamKind::wte, -1), tensor(ge, ParamKind::wpe, -1),
                      a.dresidual.f32(), static_cast<const int32_t*>(a.tokens.data()), B, T, C);
  params.grads_done(emb);
}

float GPT::mean_loss(size_t n) {
  Stream& s = device_.default_stream();
  device_.copy(host_losses_.data(), acts_.losses.data(), n * sizeof(float),
               CopyKind::device_to_host, s);
  s.synchronize();
  double sum = 0.0;
  for (size_t i = 0; i < n; ++i) sum += static_cast<double>(host_losses_[i]);
  const double mean = sum / static_cast<double>(n);
  if (!std::isfinite(mean))
    TZ_THROW("loss is not finite (" + std::to_string(mean) + ")",
             "lower the learning rate or enable gradient_clipping");
  return static_cast<float>(mean);
}

float GPT::evaluate(ParamProvider& params, const int32_t* tokens, const int32_t* targets, size_t B,
                    size_t T) {
  prepare(tokens, targets, B, T);
  forward(params, B, T);
  if (!targets) {
    device_.default_stream().synchronize();
    return 0.0f;
  }
  k_.softmax_xent_forward(acts_.losses.f32(), acts_.logits.f32(),
                          static_cast<const int32_t*>(acts_.targets.data()), B * T,
                          config_.vocab_size, config_.padded_vocab_size);
  return mean_loss(B * T);
}

float GPT::forward_backward(ParamProvider& params, const int32_t* tokens, const int32_t* targets,
                            size_t B, size_t T, float grad_scale) {
  TZ_CHECK(targets != nullptr, "forward_backward needs targets", "");
  prepare(tokens, targets, B, T);
  forward(params, B, T);
  const float dloss = grad_scale / static_cast<float>(B * T);
  k_.softmax_xent_forward_backward(acts_.logits.f32(), acts_.losses.f32(), acts_.logits.f32(),
                                   static_cast<const int32_t*>(acts_.targets.data()), dloss, B * T,
                                   config_.vocab_size, config_.padded_vocab_size);
  backward(params, B, T);
  return mean_loss(B * T);
}

}  // namespace tierzero::nn
