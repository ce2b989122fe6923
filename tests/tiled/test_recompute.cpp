// Selective recompute (the attention's core only) beside none and full: the three modes compute
// bitwise the same losses and gradients over several steps (and make the same ParamProvider
// calls), and the activation bytes the tracker records equal GPT::activation_bytes_for's count in
// every mode, with selective between none and full. Also: the attention keeps no T^2 buffer on
// the CPU (the activation bytes grow linearly in T at a fixed token count per block's attention).
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "recording_params.hpp"
#include "tierzero/core/memory_tracker.hpp"
#include "tierzero/device/device_allocator.hpp"
#include "tierzero/nn/activation_dims.hpp"
#include "tierzero/nn/gpt.hpp"
#include "tierzero/nn/recompute.hpp"
#include "tierzero/train/train_config.hpp"
#include "tiny_gpt.hpp"

using namespace tierzero;
using tierzero::testing::RecordingParams;
using tierzero::testing::tiny_config;
using tierzero::testing::TinyGpt;

namespace {

const nn::Recompute kModes[] = {nn::Recompute::none, nn::Recompute::selective, nn::Recompute::full};

TEST(Recompute, ModesGiveBitwiseEqualLossesAndGradients) {
  const nn::GPTConfig cfg = tiny_config(50, 64, 80, 3, 4, 32);
  // T 70: past one 64-row tile of the tiled attention.
  TinyGpt none(cfg, 2, 70, 31), selective(cfg, 2, 70, 31), full(cfg, 2, 70, 31);
  selective.model.set_recompute(nn::Recompute::selective);
  full.model.set_recompute(nn::Recompute::full);
  ASSERT_TRUE(full.model.activation_checkpointing());
  ASSERT_FALSE(selective.model.activation_checkpointing());
  TinyGpt* runs[] = {&none, &selective, &full};
  const size_t n = none.params.numel();
  for (int step = 0; step < 3; ++step) {
    float loss[3];
    std::vector<std::vector<std::string>> calls;
    for (int m = 0; m < 3; ++m) {
      TinyGpt& g = *runs[m];
      RecordingParams rec(g.params);
      g.params.zero_grads();
      loss[m] = g.model.forward_backward(rec, g.x.data(), g.y.data(), g.B, g.T, 1.0f);
      calls.push_back(rec.calls);
    }
    for (int m = 1; m < 3; ++m) {
      const char* mode = kModes[m].name();
      EXPECT_EQ(std::memcmp(&loss[0], &loss[m], sizeof(float)), 0)
          << "step " << step << " " << mode << ": " << loss[0] << " vs " << loss[m];
      EXPECT_EQ(std::memcmp(none.params.grads(), runs[m]->params.grads(), n * sizeof(float)), 0)
          << "step " << step << ": gradients of " << mode << " differ from none";
      EXPECT_EQ(calls[0], calls[m]) << mode << ": ParamProvider call pattern differs";
    }
    std::printf("step %d: loss %.6f in none, selective and full\n", step, loss[0]);
    for (TinyGpt* g : runs)  // the same SGD step on each, so the next step runs on new weights
      for (size_t i = 0; i < n; ++i) g->params.params()[i] -= 0.05f * g->params.grads()[i];
  }
}

// The activation bytes the tracker records in a fresh allocator for one forward_backward.
size_t tracked_activation_bytes(const nn::GPTConfig& cfg, size_t B, size_t T, nn::Recompute r) {
  MemoryTracker tracker;
  std::unique_ptr<Device> device = make_cpu_device();
  DeviceAllocator alloc(*device, 0, tracker);
  nn::GPT model(cfg, alloc);
  model.set_recompute(r);
  nn::LocalParams params(model.layout(), alloc);
  nn::init_gpt2_params(model.layout(), cfg, 3, params.params());
  std::vector<int32_t> x(B * T);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<int32_t>(i % cfg.vocab_size);
  params.zero_grads();
  model.forward_backward(params, x.data(), x.data(), B, T, 1.0f);
  EXPECT_EQ(tracker.peak(Tier::device, Category::activation),
            tracker.current(Tier::device, Category::activation));
  return tracker.peak(Tier::device, Category::activation);
}

TEST(Recompute, TrackerPeakEqualsThePredictionInEveryMode) {
  struct Shape {
    nn::GPTConfig cfg;
    size_t B, T;
  };
  const Shape shapes[] = {
      {tiny_config(50, 64, 16, 4, 2, 32), 4, 12},
      {tiny_config(257, 384, 128, 4, 4, 256), 2, 128},  // buffers past 1 MiB: MiB size classes
  };
  for (const Shape& s : shapes) {
    size_t peak[3];
    for (int m = 0; m < 3; ++m) {
      peak[m] = tracked_activation_bytes(s.cfg, s.B, s.T, kModes[m]);
      EXPECT_EQ(peak[m], nn::GPT::activation_bytes_for(s.cfg, s.B, s.T, kModes[m]))
          << kModes[m].name() << " L " << s.cfg.num_layers << " T " << s.T;
    }
    std::printf("L %zu C %zu B %zu T %zu: activation peak %zu none, %zu selective, %zu full\n",
                s.cfg.num_layers, s.cfg.channels, s.B, s.T, peak[0], peak[1], peak[2]);
    EXPECT_LT(peak[1], peak[0]);
    EXPECT_LT(peak[2], peak[1]);
  }
}

TEST(Recompute, NoAttentionBufferGrowsWithTSquaredOnTheCpu) {
  // One sequence of T against T/2 sequences of 2: the same tokens, so every per-token buffer is
  // the same; a (B, NH, T, T) buffer would differ by T/2 x.
  const nn::GPTConfig cfg = tiny_config(64, 64, 512, 2, 4, 64);
  const nn::ActivationDims long_seq = nn::ActivationDims::of(cfg, 1, 512);
  const nn::ActivationDims short_seq = nn::ActivationDims::of(cfg, 256, 2);
  EXPECT_EQ(long_seq.attention_saved(), short_seq.attention_saved());
  EXPECT_EQ(long_seq.attention_scratch(), 0u);
  EXPECT_EQ(nn::GPT::activation_bytes_for(cfg, 1, 512, nn::Recompute::none),
            nn::GPT::activation_bytes_for(cfg, 256, 2, nn::Recompute::none));
}

TEST(Recompute, ParsesItsNamesAndRefusesOthers) {
  for (nn::Recompute r : kModes) EXPECT_EQ(nn::Recompute::parse(r.name(), "test"), r);
  EXPECT_EQ(nn::Recompute(true), nn::Recompute(nn::Recompute::full));
  EXPECT_EQ(nn::Recompute(false), nn::Recompute(nn::Recompute::none));
  try {
    nn::Recompute::parse("attention", "tierzero.recompute");
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tierzero.recompute"), std::string::npos) << e.what();
  }
}

TEST(Recompute, ConfigKeyAndActivationCheckpointingAgree) {
  using train::TrainConfig;
  const TrainConfig sel = TrainConfig::parse(R"({"tierzero": {"recompute": "selective"}})", "t");
  EXPECT_EQ(sel.recompute, "selective");
  EXPECT_FALSE(sel.activation_checkpointing);
  // The old switch is full recompute, and the new key says so.
  const TrainConfig ckpt =
      TrainConfig::parse(R"({"tierzero": {"activation_checkpointing": true}})", "t");
  EXPECT_EQ(ckpt.recompute, "full");
  const TrainConfig full = TrainConfig::parse(R"({"tierzero": {"recompute": "full"}})", "t");
  EXPECT_TRUE(full.activation_checkpointing);
  EXPECT_EQ(TrainConfig::defaults().recompute, "none");
  const auto error = [](const char* text) {
    try {
      TrainConfig::parse(text, "t");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  const std::string both =
      error(R"({"tierzero": {"recompute": "selective", "activation_checkpointing": true}})");
  EXPECT_NE(both.find("tierzero.recompute"), std::string::npos) << both;
  const std::string bad = error(R"({"tierzero": {"recompute": "attention"}})");
  EXPECT_NE(bad.find("tierzero.recompute"), std::string::npos) << bad;
  std::printf("both: %s\nunknown: %s\n", both.c_str(), bad.c_str());
}

}  // namespace
