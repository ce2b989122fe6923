// GPT-2 forward and backward over the Kernels interface, one unit at a time.
// Backward keeps one running gradient of the residual stream (dresidual): a residual add passes
// its gradient through unchanged, so the branch outputs use dresidual directly as their dout and
// the layernorm backward adds the branch's contribution into it.
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

void GPT::allocate_activations(size_t B, size_t T) {
  if (B == act_B_ && T == act_T_) return;
  acts_ = Activations{};  // release the old set first so the budget sees the real peak
  const size_t L = config_.num_layers, C = config_.channels, NH = config_.num_heads;
  const size_t Vp = config_.padded_vocab_size, BT = B * T;
  activation_bytes_ = 0;
  auto f = [&](size_t n, const char* label) {
    activation_bytes_ += DeviceAllocator::round_size(n * sizeof(float));
    return allocator_.allocate(n * sizeof(float), Category::activation, label);
  };
  Activations& a = acts_;
  a.tokens = allocator_.allocate(BT * sizeof(int32_t), Category::activation, "tokens");
  a.targets = allocator_.allocate(BT * sizeof(int32_t), Category::activation, "targets");
  a.encoded = f(BT * C, "encoded");
  a.ln1 = f(L * BT * C, "ln1");
  a.ln1_mean = f(L * BT, "ln1_mean");
  a.ln1_rstd = f(L * BT, "ln1_rstd");
  a.qkv = f(L * BT * 3 * C, "qkv");
  a.atty = f(L * BT * C, "atty");
  a.att = f(L * B * NH * T * T, "att");
  a.residual2 = f(L * BT * C, "residual2");
  a.ln2 = f(L * BT * C, "ln2");
  a.ln2_mean = f(L * BT, "ln2_mean");
  a.ln2_rstd = f(L * BT, "ln2_rstd");
  a.fch = f(L * BT * 4 * C, "fch");
  a.fch_gelu = f(L * BT * 4 * C, "fch_gelu");
  a.residual3 = f(L * BT * C, "residual3");
  a.proj = f(BT * C, "proj");
  a.lnf = f(BT * C, "lnf");
  a.lnf_mean = f(BT, "lnf_mean");
  a.lnf_rstd = f(BT, "lnf_rstd");
  a.logits = f(BT * Vp, "logits");
  a.losses = f(BT, "losses");
  a.dresidual = f(BT * C, "dresidual");
  a.dln = f(BT * C, "dln");
  a.dqkv = f(BT * 3 * C, "dqkv");
  a.datty = f(BT * C, "datty");
  a.datt = f(B * NH * T * T, "datt");
  a.dfch = f(BT * 4 * C, "dfch");
  a.dfch_gelu = f(BT * 4 * C, "dfch_gelu");
  host_losses_.resize(BT);
  act_B_ = B;
  act_T_ = T;
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
  const size_t C = config_.channels, NH = config_.num_heads, BT = B * T;
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
    const int li = static_cast<int>(l);
    const size_t unit = layout_.block_unit(l);
    const float* p = params.acquire_params(unit);
    const float* residual = l == 0 ? a.encoded.f32() : a.residual3.f32() + (l - 1) * BT * C;
    float* ln1 = a.ln1.f32() + l * BT * C;
    float* qkv = a.qkv.f32() + l * BT * 3 * C;
    float* atty = a.atty.f32() + l * BT * C;
    float* att = a.att.f32() + l * B * NH * T * T;
    float* residual2 = a.residual2.f32() + l * BT * C;
    float* ln2 = a.ln2.f32() + l * BT * C;
    float* fch = a.fch.f32() + l * BT * 4 * C;
    float* fch_gelu = a.fch_gelu.f32() + l * BT * 4 * C;
    float* residual3 = a.residual3.f32() + l * BT * C;

    k_.layernorm_forward(ln1, a.ln1_mean.f32() + l * BT, a.ln1_rstd.f32() + l * BT, residual,
                         tensor(p, ParamKind::ln1w, li), tensor(p, ParamKind::ln1b, li), BT, C);
    k_.matmul_forward(qkv, ln1, tensor(p, ParamKind::qkvw, li), tensor(p, ParamKind::qkvb, li), BT,
                      C, 3 * C);
    k_.attention_forward(atty, att, qkv, B, T, C, NH);
    k_.matmul_forward(a.proj.f32(), atty, tensor(p, ParamKind::attprojw, li),
                      tensor(p, ParamKind::attprojb, li), BT, C, C);
    k_.residual_forward(residual2, residual, a.proj.f32(), BT * C);
    k_.layernorm_forward(ln2, a.ln2_mean.f32() + l * BT, a.ln2_rstd.f32() + l * BT, residual2,
                         tensor(p, ParamKind::ln2w, li), tensor(p, ParamKind::ln2b, li), BT, C);
    k_.matmul_forward(fch, ln2, tensor(p, ParamKind::fcw, li), tensor(p, ParamKind::fcb, li), BT, C,
                      4 * C);
    k_.gelu_forward(fch_gelu, fch, BT * 4 * C);
    k_.matmul_forward(a.proj.f32(), fch_gelu, tensor(p, ParamKind::fcprojw, li),
                      tensor(p, ParamKind::fcprojb, li), BT, 4 * C, C);
    k_.residual_forward(residual3, residual2, a.proj.f32(), BT * C);
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
    float* g = params.acquire_grads(unit);
    const float* residual = l == 0 ? a.encoded.f32() : a.residual3.f32() + (l - 1) * BT * C;
    const float* ln1 = a.ln1.f32() + l * BT * C;
    const float* qkv = a.qkv.f32() + l * BT * 3 * C;
    const float* atty = a.atty.f32() + l * BT * C;
    const float* att = a.att.f32() + l * B * NH * T * T;
    const float* residual2 = a.residual2.f32() + l * BT * C;
    const float* ln2 = a.ln2.f32() + l * BT * C;
    const float* fch = a.fch.f32() + l * BT * 4 * C;
    const float* fch_gelu = a.fch_gelu.f32() + l * BT * 4 * C;
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
                          a.ln2_mean.f32() + l * BT, a.ln2_rstd.f32() + l * BT, BT, C);

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
                          a.ln1_mean.f32() + l * BT, a.ln1_rstd.f32() + l * BT, BT, C);
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
