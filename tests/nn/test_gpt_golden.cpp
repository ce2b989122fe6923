// The GPT against PyTorch: a tiny GPT-2's logits, loss, every parameter gradient and five AdamW
// steps (with clipping and per-group weight decay) from tests/fixtures/gpt2_tiny.bin, written by
// tests/reference/make_gpt2_fixture.py. Tolerances follow tests/reference/README.md.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "fixture_reader.hpp"
#include "tierzero/device/device_allocator.hpp"
#include "tierzero/nn/gpt.hpp"
#include "tierzero/train/adamw_optimizer.hpp"

using namespace tierzero;
using tierzero::testing::Fixture;

namespace {

struct Golden {
  Fixture fx = Fixture::load(std::string(TIERZERO_FIXTURE_DIR) + "/gpt2_tiny.bin");
  nn::GPTConfig cfg;
  size_t B = 0, T = 0;
  Golden() {
    const auto& c = fx.get("config").i32;  // V, Vp, maxT, L, NH, C, B, T
    cfg.vocab_size = static_cast<size_t>(c[0]);
    cfg.padded_vocab_size = static_cast<size_t>(c[1]);
    cfg.max_seq_len = static_cast<size_t>(c[2]);
    cfg.num_layers = static_cast<size_t>(c[3]);
    cfg.num_heads = static_cast<size_t>(c[4]);
    cfg.channels = static_cast<size_t>(c[5]);
    B = static_cast<size_t>(c[6]);
    T = static_cast<size_t>(c[7]);
  }
  // Copies fixture tensors named prefix + kind (stacked over layers) into a flat layout buffer.
  void scatter(const nn::ParamLayout& layout, const std::string& prefix, float* flat) const {
    for (const nn::ParamTensor& t : layout.tensors()) {
      const auto& src = fx.get(prefix + nn::param_kind_name(t.kind)).f32;
      const size_t layer = t.layer < 0 ? 0 : static_cast<size_t>(t.layer);
      ASSERT_EQ(src.size() % t.numel, 0u);
      std::copy_n(src.data() + layer * t.numel, t.numel, flat + t.offset);
    }
  }
};

struct ErrorStats {
  double max_abs = 0.0, max_rel = 0.0, ref_max = 0.0;
};

ErrorStats compare(const float* got, const float* want, size_t n) {
  ErrorStats s;
  for (size_t i = 0; i < n; ++i) s.ref_max = std::max(s.ref_max, std::fabs(double{want[i]}));
  for (size_t i = 0; i < n; ++i) {
    double d = std::fabs(double{got[i]} - double{want[i]});
    s.max_abs = std::max(s.max_abs, d);
    s.max_rel = std::max(s.max_rel, d / (std::fabs(double{want[i]}) + 1e-6 * s.ref_max + 1e-30));
  }
  return s;
}

// True for the key-bias slice of qkvb, whose exact gradient is zero (softmax shift invariance).
bool is_key_bias(const nn::ParamTensor& t, size_t i, size_t C) {
  return t.kind == nn::ParamKind::qkvb && i >= C && i < 2 * C;
}

}  // namespace

TEST(GptGolden, LogitsLossAndEveryGradientMatchPyTorch) {
  Golden g;
  auto dev = make_cpu_device();
  DeviceAllocator alloc(*dev, 0);
  nn::GPT model(g.cfg, alloc);
  nn::LocalParams params(model.layout(), alloc);
  g.scatter(model.layout(), "", params.params());
  const auto& tokens = g.fx.get("tokens").i32;
  const auto& targets = g.fx.get("targets").i32;

  const float loss = model.evaluate(params, tokens.data(), targets.data(), g.B, g.T);
  const float want_loss = g.fx.get("loss").f32[0];
  std::printf("loss: tierzero %.7f pytorch %.7f abs err %.2e\n", double{loss}, double{want_loss},
              std::fabs(double{loss} - double{want_loss}));
  EXPECT_NEAR(loss, want_loss, 1e-5);

  const auto& want_logits = g.fx.get("logits").f32;  // (B, T, V)
  const size_t V = g.cfg.vocab_size, Vp = g.cfg.padded_vocab_size;
  std::vector<float> got_logits(g.B * g.T * V);
  for (size_t r = 0; r < g.B * g.T; ++r)
    std::copy_n(model.logits() + r * Vp, V, got_logits.data() + r * V);
  ErrorStats ls = compare(got_logits.data(), want_logits.data(), got_logits.size());
  std::printf("logits: max_abs %.2e max_rel %.2e\n", ls.max_abs, ls.max_rel);
  EXPECT_LT(ls.max_abs, 1e-5);

  params.zero_grads();
  const float loss2 = model.forward_backward(params, tokens.data(), targets.data(), g.B, g.T, 1.0f);
  EXPECT_NEAR(loss2, want_loss, 1e-5);
  std::vector<float> want_grads(model.layout().total_numel(), 0.0f);
  g.scatter(model.layout(), "grad.", want_grads.data());
  double norm_sq = 0.0;
  for (const nn::ParamTensor& t : model.layout().tensors()) {
    const float* got = params.grads() + t.offset;
    const float* want = want_grads.data() + t.offset;
    std::vector<float> got_c(got, got + t.numel), want_c(want, want + t.numel);
    for (size_t i = 0; i < t.numel; ++i) {
      norm_sq += double{got[i]} * got[i];
      if (is_key_bias(t, i, g.cfg.channels)) {
        EXPECT_LT(std::fabs(got[i]), 1e-6) << t.name() << " key bias grad must be ~0";
        got_c[i] = want_c[i] = 0.0f;
      }
    }
    ErrorStats s = compare(got_c.data(), want_c.data(), t.numel);
    std::printf("grad %-18s max_abs %.2e (%.2e of max|ref| %.2e)\n", t.name().c_str(), s.max_abs,
                s.max_abs / (s.ref_max + 1e-30), s.ref_max);
    EXPECT_LE(s.max_abs, 1e-4 * s.ref_max + 1e-9) << t.name();
  }
  const double want_norm = g.fx.get("grad_norm").f32[0];
  std::printf("grad norm: tierzero %.7f pytorch %.7f\n", std::sqrt(norm_sq), want_norm);
  EXPECT_NEAR(std::sqrt(norm_sq), want_norm, 1e-5 * want_norm);
  const nn::ParamTensor& wte = model.layout().get(nn::ParamKind::wte);
  for (size_t i = V * g.cfg.channels; i < wte.numel; ++i)
    ASSERT_EQ(params.grads()[wte.offset + i], 0.0f) << "padded wte rows get no gradient";
}

TEST(GptGolden, FiveAdamWStepsMatchPyTorch) {
  Golden g;
  auto dev = make_cpu_device();
  DeviceAllocator alloc(*dev, 0);
  nn::GPT model(g.cfg, alloc);
  nn::LocalParams params(model.layout(), alloc);
  g.scatter(model.layout(), "", params.params());
  const auto& hp = g.fx.get("hparams").f32;  // lr, beta1, beta2, eps, weight_decay, clip
  train::OptimizerConfig oc;
  oc.lr = hp[0];
  oc.beta1 = hp[1];
  oc.beta2 = hp[2];
  oc.eps = hp[3];
  oc.weight_decay = hp[4];
  train::AdamWOptimizer opt(oc, model.layout(), alloc);
  const auto& tokens = g.fx.get("tokens").i32;
  const auto& targets = g.fx.get("targets").i32;
  const auto& want_losses = g.fx.get("adamw_losses").f32;
  const auto& want_norms = g.fx.get("grad_norms_adamw").f32;
  for (size_t k = 0; k < want_losses.size(); ++k) {
    params.zero_grads();
    float loss = model.forward_backward(params, tokens.data(), targets.data(), g.B, g.T, 1.0f);
    train::StepStats st = opt.step(params, hp[0], hp[5]);
    std::printf("adamw step %zu: loss %.7f (pytorch %.7f) grad norm %.7f (pytorch %.7f)\n", k + 1,
                double{loss}, double{want_losses[k]}, st.grad_norm, double{want_norms[k]});
    EXPECT_NEAR(loss, want_losses[k], 1e-5 * std::fabs(want_losses[k]) + 1e-5);
    EXPECT_NEAR(st.grad_norm, want_norms[k], 1e-4 * want_norms[k]);
  }
  std::vector<float> want(model.layout().total_numel(), 0.0f);
  g.scatter(model.layout(), "after5.", want.data());
  for (const nn::ParamTensor& t : model.layout().tensors()) {
    double max_abs = 0.0, key_bias_abs = 0.0;
    for (size_t i = 0; i < t.numel; ++i) {
      double d = std::fabs(double{params.params()[t.offset + i]} - want[t.offset + i]);
      if (is_key_bias(t, i, g.cfg.channels))
        key_bias_abs = std::max(key_bias_abs, d);
      else
        max_abs = std::max(max_abs, d);
    }
    std::printf("after 5 steps %-18s max_abs %.2e\n", t.name().c_str(), max_abs);
    EXPECT_LT(max_abs, 2e-5) << t.name();
    EXPECT_LT(key_bias_abs, 1e-3) << t.name() << " key bias (noise-driven, see README)";
  }
}
