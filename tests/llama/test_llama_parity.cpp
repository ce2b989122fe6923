// The Llama-family modules against Hugging Face transformers (PyTorch, fp32): a tiny
// LlamaForCausalLM (grouped-query attention, Llama 3 rope scaling, untied head) and a tiny
// Qwen2ForCausalLM (q/k/v biases, tied head) from tests/data/llama/<name>/reference.tzfx, written
// by scripts/reference/make_llama_fixture.py: the logits, the loss, every parameter's gradient
// and 10 AdamW steps' losses and gradient norms. Weights go in, and gradients come out, through
// the Hugging Face name table (train/hf_llama_names), so the table is tested too.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

#include "fixture_reader.hpp"
#include "tierzero/core/error.hpp"
#include "tierzero/device/device_allocator.hpp"
#include "tierzero/nn/gpt.hpp"
#include "tierzero/train/adamw_optimizer.hpp"
#include "tierzero/train/hf_llama_names.hpp"

using namespace tierzero;
using tierzero::testing::Fixture;

namespace {

constexpr size_t kB = 2, kT = 16;

// The models make_llama_fixture.py builds.
nn::GPTConfig fixture_config(const std::string& name) {
  nn::GPTConfig c = nn::GPTConfig::preset("llama-tiny");
  c.vocab_size = c.padded_vocab_size = 256;
  c.max_seq_len = 64;
  c.num_layers = 2, c.num_heads = 4, c.channels = 32;
  c.arch.num_kv_heads = 2;
  c.arch.intermediate_size = 64;
  c.arch.rope_theta = 10000.0;
  c.arch.rope_scaling.original_max_position_embeddings = 16;
  if (name == "qwen2_tiny") {
    c.arch.rope_scaling = nn::RopeScaling{};
    c.arch.norm_eps = 1e-6;
    c.arch.qkv_bias = true;
    c.arch.tie_embeddings = true;
  }
  return c;
}

struct Reference {
  std::string name;
  Fixture fx;
  nn::GPTConfig cfg;
  explicit Reference(const std::string& n)
      : name(n),
        fx(Fixture::load(std::string(TIERZERO_SOURCE_DIR) + "/tests/data/llama/" + n +
                         "/reference.tzfx")),
        cfg(fixture_config(n)) {}

  // Fixture tensors prefix + hf name -> the layout's (one rank: local = full) flat buffer.
  void scatter(const nn::ParamLayout& layout, const std::string& prefix, float* flat) const {
    for (const train::HfLlamaTensor& t : train::hf_llama_tensors(cfg)) {
      const auto& src = fx.get(prefix + t.hf_name).f32;
      ASSERT_EQ(src.size(), t.rows * t.cols) << t.hf_name;
      train::hf_to_full(t, src.data(), flat + layout.get(t.kind, t.layer).offset);
    }
  }
};

double max_abs_diff(const float* a, const float* b, size_t n, double* ref_max) {
  double d = 0.0;
  for (size_t i = 0; i < n; ++i) {
    d = std::max(d, std::fabs(double{a[i]} - double{b[i]}));
    *ref_max = std::max(*ref_max, std::fabs(double{b[i]}));
  }
  return d;
}

void check_forward_backward(const std::string& name) {
  Reference r(name);
  auto dev = make_cpu_device();
  DeviceAllocator alloc(*dev, 0);
  nn::GPT model(r.cfg, alloc);
  nn::LocalParams params(model.layout(), alloc);
  std::fill(params.params(), params.params() + model.layout().total_numel(), 0.0f);
  r.scatter(model.layout(), "w.", params.params());
  const auto& tokens = r.fx.get("tokens").i32;
  const auto& targets = r.fx.get("targets").i32;

  params.zero_grads();
  const float loss = model.forward_backward(params, tokens.data(), targets.data(), kB, kT, 1.0f);
  const float want_loss = r.fx.get("loss").f32[0];
  std::printf("%s loss: tierzero %.7f transformers %.7f abs err %.2e\n", name.c_str(), double{loss},
              double{want_loss}, std::fabs(double{loss} - double{want_loss}));
  EXPECT_NEAR(loss, want_loss, 1e-5);

  // The logits of the forward: evaluate again (forward_backward overwrote them with gradients).
  const float eval_loss = model.evaluate(params, tokens.data(), targets.data(), kB, kT);
  EXPECT_NEAR(eval_loss, want_loss, 1e-5);
  const auto& want_logits = r.fx.get("logits").f32;  // (B, T, V)
  const size_t V = r.cfg.vocab_size, Vp = r.cfg.padded_vocab_size;
  double logit_ref = 0.0, logit_err = 0.0;
  for (size_t row = 0; row < kB * kT; ++row)
    logit_err = std::max(logit_err, max_abs_diff(model.logits() + row * Vp,
                                                 want_logits.data() + row * V, V, &logit_ref));
  std::printf("%s logits: max abs err %.2e (max |ref| %.2e)\n", name.c_str(), logit_err, logit_ref);
  EXPECT_LT(logit_err, 1e-5);

  double worst = 0.0, norm_sq = 0.0;
  for (const train::HfLlamaTensor& t : train::hf_llama_tensors(r.cfg)) {
    std::vector<float> got(t.rows * t.cols);
    train::full_to_hf(t, params.grads() + model.layout().get(t.kind, t.layer).offset, got.data());
    const auto& want = r.fx.get("grad." + t.hf_name).f32;
    double ref_max = 0.0;
    const double err = max_abs_diff(got.data(), want.data(), got.size(), &ref_max);
    for (float g : got) norm_sq += double{g} * g;
    worst = std::max(worst, err / (ref_max + 1e-30));
    std::printf("grad %-44s max abs err %.2e (%.2e of max |ref| %.2e)\n", t.hf_name.c_str(), err,
                err / (ref_max + 1e-30), ref_max);
    EXPECT_LE(err, 1e-4 * ref_max + 1e-9) << t.hf_name;
  }
  const double want_norm = r.fx.get("grad_norm").f32[0];
  std::printf("%s gradients: worst error %.2e of the tensor's max; norm %.7f (transformers %.7f)\n",
              name.c_str(), worst, std::sqrt(norm_sq), want_norm);
  EXPECT_NEAR(std::sqrt(norm_sq), want_norm, 1e-5 * want_norm);
}

void check_adamw_steps(const std::string& name) {
  Reference r(name);
  auto dev = make_cpu_device();
  DeviceAllocator alloc(*dev, 0);
  nn::GPT model(r.cfg, alloc);
  nn::LocalParams params(model.layout(), alloc);
  std::fill(params.params(), params.params() + model.layout().total_numel(), 0.0f);
  r.scatter(model.layout(), "w.", params.params());
  const auto& hp = r.fx.get("hparams").f32;  // lr, beta1, beta2, eps, weight_decay, clip
  train::OptimizerConfig oc;
  oc.lr = hp[0], oc.beta1 = hp[1], oc.beta2 = hp[2], oc.eps = hp[3], oc.weight_decay = hp[4];
  train::AdamWOptimizer opt(oc, model.layout(), alloc);
  const auto& tokens = r.fx.get("tokens").i32;
  const auto& targets = r.fx.get("targets").i32;
  const auto& want_losses = r.fx.get("adamw_losses").f32;
  const auto& want_norms = r.fx.get("adamw_grad_norms").f32;
  ASSERT_EQ(want_losses.size(), 10u);
  for (size_t k = 0; k < want_losses.size(); ++k) {
    params.zero_grads();
    const float loss = model.forward_backward(params, tokens.data(), targets.data(), kB, kT, 1.0f);
    const train::StepStats st = opt.step(params, hp[0], hp[5]);
    std::printf("%s adamw step %zu: loss %.7f (transformers %.7f) grad norm %.7f (%.7f)\n",
                name.c_str(), k + 1, double{loss}, double{want_losses[k]}, st.grad_norm,
                double{want_norms[k]});
    EXPECT_NEAR(loss, want_losses[k], 2e-5 * std::fabs(want_losses[k]) + 1e-5);
    EXPECT_NEAR(st.grad_norm, want_norms[k], 1e-3 * want_norms[k]);
  }
}

}  // namespace

TEST(LlamaParity, LlamaLogitsLossAndEveryGradientMatchTransformers) {
  check_forward_backward("llama_tiny");
}
TEST(LlamaParity, QwenLogitsLossAndEveryGradientMatchTransformers) {
  check_forward_backward("qwen2_tiny");
}
TEST(LlamaParity, LlamaTenAdamWStepsMatchTransformers) {
  check_adamw_steps("llama_tiny");
}
TEST(LlamaParity, QwenTenAdamWStepsMatchTransformers) {
  check_adamw_steps("qwen2_tiny");
}

TEST(LlamaConfig, PresetsBuildAndSplitsAreChecked) {
  for (const char* p :
       {"llama-3.2-1b", "llama-3.1-8b", "qwen2.5-0.5b", "smollm-135m", "llama-tiny"})
    EXPECT_NO_THROW(nn::GPTConfig::preset(p).validate()) << p;
  const nn::GPTConfig c = nn::GPTConfig::preset("llama-tiny");  // 4 heads, 2 kv heads
  try {
    nn::ActivationDims::of(c, 1, 16, 4);
    ADD_FAILURE() << "tp 4 over 2 kv heads was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("n_kv_head 2 is not divisible by tensor_parallel 4"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(nn::ActivationDims::of(c, 1, 16, 1, false, 4), Error);  // ulysses 4 > 2 kv heads
  EXPECT_NO_THROW(nn::ActivationDims::of(c, 1, 16, 2));
  // The 8B's parameter count: 8.03 B as published.
  const size_t n = nn::gpt_parameter_count(nn::GPTConfig::preset("llama-3.1-8b"));
  std::printf("llama-3.1-8b parameters: %zu\n", n);
  EXPECT_NEAR(static_cast<double>(n), 8.03e9, 0.01e9);
}
