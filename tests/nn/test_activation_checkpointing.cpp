// Activation checkpointing: a checkpointed GPT computes bitwise the same losses, gradients and
// logits as the plain one (the recompute runs the same kernels on the same inputs), makes the same
// ParamProvider calls, and holds fewer activation bytes, exactly activation_bytes_for's count.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "recording_params.hpp"
#include "tierzero/core/memory_tracker.hpp"
#include "tierzero/device/device_allocator.hpp"
#include "tierzero/nn/gpt.hpp"
#include "tiny_gpt.hpp"

using namespace tierzero;
using tierzero::testing::RecordingParams;
using tierzero::testing::tiny_config;
using tierzero::testing::TinyGpt;

namespace {

// Largest |a[i] - b[i]| over n floats; bitwise equality is checked separately with memcmp.
double max_abs_diff(const float* a, const float* b, size_t n) {
  double m = 0.0;
  for (size_t i = 0; i < n; ++i) m = std::max(m, std::fabs(double{a[i]} - double{b[i]}));
  return m;
}

}  // namespace

TEST(ActivationCheckpointing, BitwiseEqualLossGradientsAndLogits) {
  const nn::GPTConfig cfg = tiny_config(50, 64, 16, 4, 2, 32);
  TinyGpt plain(cfg, 4, 12, 21);
  TinyGpt ckpt(cfg, 4, 12, 21);
  ckpt.model.set_activation_checkpointing(true);
  ASSERT_TRUE(ckpt.model.activation_checkpointing());
  ASSERT_FALSE(plain.model.activation_checkpointing());
  const size_t B = plain.B, T = plain.T, n = plain.params.numel();
  RecordingParams rec_plain(plain.params), rec_ckpt(ckpt.params);

  double worst_grad = 0.0, worst_loss = 0.0;
  for (int step = 0; step < 3; ++step) {
    plain.params.zero_grads();
    ckpt.params.zero_grads();
    rec_plain.calls.clear();
    rec_ckpt.calls.clear();
    const float lp =
        plain.model.forward_backward(rec_plain, plain.x.data(), plain.y.data(), B, T, 1.0f);
    const float lc =
        ckpt.model.forward_backward(rec_ckpt, ckpt.x.data(), ckpt.y.data(), B, T, 1.0f);
    worst_loss = std::max(worst_loss, std::fabs(double{lp} - double{lc}));
    worst_grad = std::max(worst_grad, max_abs_diff(plain.params.grads(), ckpt.params.grads(), n));
    EXPECT_EQ(std::memcmp(&lp, &lc, sizeof lp), 0) << "step " << step << ": " << lp << " vs " << lc;
    EXPECT_EQ(std::memcmp(plain.params.grads(), ckpt.params.grads(), n * sizeof(float)), 0)
        << "step " << step;
    EXPECT_EQ(rec_plain.calls, rec_ckpt.calls) << "ParamProvider call pattern differs";
    // The same plain SGD step on both, so the next step runs on new weights.
    for (size_t i = 0; i < n; ++i) {
      plain.params.params()[i] -= 0.05f * plain.params.grads()[i];
      ckpt.params.params()[i] -= 0.05f * ckpt.params.grads()[i];
    }
  }

  // Forward only: evaluate's loss and logits.
  const float ep = plain.model.evaluate(plain.params, plain.x.data(), plain.y.data(), B, T);
  const float ec = ckpt.model.evaluate(ckpt.params, ckpt.x.data(), ckpt.y.data(), B, T);
  const size_t nlogits = B * T * cfg.padded_vocab_size;
  std::vector<float> logits_plain(nlogits), logits_ckpt(nlogits);
  std::memcpy(logits_plain.data(), plain.model.logits(), nlogits * sizeof(float));
  std::memcpy(logits_ckpt.data(), ckpt.model.logits(), nlogits * sizeof(float));
  const double worst_logit = max_abs_diff(logits_plain.data(), logits_ckpt.data(), nlogits);
  EXPECT_EQ(std::memcmp(&ep, &ec, sizeof ep), 0) << ep << " vs " << ec;
  EXPECT_EQ(std::memcmp(logits_plain.data(), logits_ckpt.data(), nlogits * sizeof(float)), 0);
  std::printf(
      "checkpointed vs plain over 3 steps + evaluate: max |dloss| %.3g, max |dgrad| %.3g, "
      "max |dlogit| %.3g\n",
      worst_loss, worst_grad, worst_logit);
  EXPECT_EQ(worst_grad, 0.0);
}

TEST(ActivationCheckpointing, EvaluateAloneAndTogglingMidRun) {
  const nn::GPTConfig cfg = tiny_config(50, 64, 16, 4, 4, 32);
  TinyGpt plain(cfg, 2, 16, 5);
  TinyGpt g(cfg, 2, 16, 5);
  const size_t B = g.B, T = g.T, n = g.params.numel();

  // Forward only, checkpointed from the start (no backward ever ran).
  g.model.set_activation_checkpointing(true);
  const float ep = plain.model.evaluate(plain.params, plain.x.data(), plain.y.data(), B, T);
  const float ec = g.model.evaluate(g.params, g.x.data(), g.y.data(), B, T);
  EXPECT_TRUE(std::isfinite(ec));
  EXPECT_EQ(std::memcmp(&ep, &ec, sizeof ep), 0) << ep << " vs " << ec;
  EXPECT_EQ(g.model.activation_bytes(), nn::GPT::activation_bytes_for(cfg, B, T, true));

  // Switched off and on again with activations allocated: each switch reallocates for (B, T).
  for (bool on : {false, true}) {
    g.model.set_activation_checkpointing(on);
    EXPECT_EQ(g.model.activation_bytes(), nn::GPT::activation_bytes_for(cfg, B, T, on));
    plain.params.zero_grads();
    g.params.zero_grads();
    const float lp =
        plain.model.forward_backward(plain.params, plain.x.data(), plain.y.data(), B, T, 1.0f);
    const float lc = g.model.forward_backward(g.params, g.x.data(), g.y.data(), B, T, 1.0f);
    EXPECT_EQ(std::memcmp(&lp, &lc, sizeof lp), 0) << "checkpointing " << on;
    EXPECT_EQ(std::memcmp(plain.params.grads(), g.params.grads(), n * sizeof(float)), 0)
        << "checkpointing " << on;
  }
}

TEST(ActivationCheckpointing, ActivationBytesForEqualsTheTrackerAndShrinks) {
  struct Shape {
    nn::GPTConfig cfg;
    size_t B, T;
  };
  const Shape shapes[] = {
      {tiny_config(50, 64, 16, 4, 2, 32), 4, 12},
      {tiny_config(100, 128, 32, 6, 4, 64), 3, 17},
      {tiny_config(257, 384, 64, 4, 4, 256), 8, 64},  // buffers past 1 MiB: MiB size classes
  };
  for (const Shape& s : shapes) {
    size_t measured[2] = {0, 0};
    for (bool on : {false, true}) {
      // A fresh allocator and tracker per mode: a cached block may be up to 25% larger than the
      // request, and then the tracker would count the block, not the request's size class.
      MemoryTracker tracker;
      std::unique_ptr<Device> device = make_cpu_device();
      DeviceAllocator alloc(*device, 0, tracker);
      nn::GPT model(s.cfg, alloc);
      model.set_activation_checkpointing(on);
      EXPECT_EQ(tracker.current(Tier::device, Category::activation), 0u);
      nn::LocalParams params(model.layout(), alloc);
      nn::init_gpt2_params(model.layout(), s.cfg, 3, params.params());
      std::vector<int32_t> x(s.B * s.T);
      for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<int32_t>(i % s.cfg.vocab_size);
      params.zero_grads();
      model.forward_backward(params, x.data(), x.data(), s.B, s.T, 1.0f);
      const size_t tracked = tracker.current(Tier::device, Category::activation);
      const size_t predicted = nn::GPT::activation_bytes_for(s.cfg, s.B, s.T, on);
      EXPECT_EQ(tracked, predicted) << "L " << s.cfg.num_layers << " C " << s.cfg.channels << " B "
                                    << s.B << " T " << s.T << " checkpointing " << on;
      EXPECT_EQ(model.activation_bytes(), predicted);
      EXPECT_EQ(tracker.peak(Tier::device, Category::activation), predicted);
      measured[on ? 1 : 0] = tracked;
    }
    std::printf(
        "L %zu NH %zu C %zu Vp %zu B %zu T %zu: activation bytes %zu plain, %zu checkpointed "
        "(%.1f%%)\n",
        s.cfg.num_layers, s.cfg.num_heads, s.cfg.channels, s.cfg.padded_vocab_size, s.B, s.T,
        measured[0], measured[1], 100.0 * double(measured[1]) / double(measured[0]));
    EXPECT_LT(measured[1], measured[0]);
  }
}
