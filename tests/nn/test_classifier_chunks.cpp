// The classifier in chunks (GPTConfig::classifier_chunk_tokens) against whole logits, the
// reference: the same losses and gradients to rounding (errors printed) for GPT-2 and an untied
// Llama head, with every recompute mode and a last chunk that is only part full; the micro-batch
// holds one chunk of logits, and its bytes are what the estimator's count says; a training
// forward leaves the loss to the backward and says so.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "tierzero/nn/activation_dims.hpp"
#include "tierzero/nn/recompute.hpp"
#include "tiny_gpt.hpp"

using namespace tierzero;
using tierzero::testing::TinyGpt;

namespace {

struct Pass {
  float loss = 0.0f;
  float eval = 0.0f;
  std::vector<float> grads;
};

Pass run(const nn::GPTConfig& cfg, size_t chunk, nn::Recompute recompute, size_t B, size_t T) {
  nn::GPTConfig c = cfg;
  c.classifier_chunk_tokens = chunk;
  TinyGpt g(c, B, T, 11);
  g.model.set_recompute(recompute);
  g.params.zero_grads();
  Pass p;
  p.loss = g.model.forward_backward(g.params, g.x.data(), g.y.data(), B, T, 0.75f);
  p.grads.assign(g.params.grads(), g.params.grads() + g.params.numel());
  p.eval = g.model.evaluate(g.params, g.x.data(), g.y.data(), B, T);
  return p;
}

void expect_same(const nn::GPTConfig& cfg, nn::Recompute recompute, const char* what) {
  const size_t B = 3, T = 11, chunk = 7;  // 33 tokens: four chunks of 7 and one of 5
  const Pass whole = run(cfg, 0, recompute, B, T);
  const Pass chunked = run(cfg, chunk, recompute, B, T);
  double max_abs = 0.0, ref_max = 0.0;
  for (size_t i = 0; i < whole.grads.size(); ++i) {
    max_abs = std::max(max_abs, std::fabs(double{chunked.grads[i]} - whole.grads[i]));
    ref_max = std::max(ref_max, std::fabs(double{whole.grads[i]}));
  }
  std::printf(
      "%s, recompute %s: chunks of %zu vs whole logits: loss %.7f vs %.7f, eval %.7f vs "
      "%.7f, gradients max abs err %.2e (max |grad| %.2e)\n",
      what, recompute.name(), chunk, double{chunked.loss}, double{whole.loss}, double{chunked.eval},
      double{whole.eval}, max_abs, ref_max);
  EXPECT_GT(ref_max, 0.0);
  EXPECT_LT(max_abs, 1e-5 * ref_max);
  EXPECT_NEAR(chunked.loss, whole.loss, 1e-6 * std::fabs(whole.loss));
  EXPECT_NEAR(chunked.eval, whole.eval, 1e-6 * std::fabs(whole.eval));
  EXPECT_NEAR(chunked.eval, chunked.loss, 1e-6 * std::fabs(whole.loss));
}

}  // namespace

TEST(ClassifierChunks, MatchWholeLogitsGpt2) {
  const nn::GPTConfig cfg = tierzero::testing::tiny_config(50, 64, 16, 2, 2, 32);
  for (const char* mode : {"none", "selective", "full"})
    expect_same(cfg, nn::Recompute::parse(mode, "test"), "gpt2");
}

TEST(ClassifierChunks, MatchWholeLogitsUntiedLlamaHead) {
  nn::GPTConfig cfg = nn::GPTConfig::preset("llama-tiny");
  cfg.max_seq_len = 16;
  expect_same(cfg, nn::Recompute::parse("none", "test"), "llama-tiny (untied head)");
}

TEST(ClassifierChunks, MicroBatchHoldsOneChunkAsCounted) {
  nn::GPTConfig cfg = tierzero::testing::tiny_config(50, 64, 16, 2, 2, 32);
  const size_t B = 3, T = 11, tokens = B * T;
  const size_t whole = nn::GPT::activation_bytes_for(cfg, B, T, nn::Recompute(false));
  cfg.classifier_chunk_tokens = 7;
  const nn::ActivationDims d = nn::ActivationDims::of(cfg, B, T);
  EXPECT_EQ(d.logits_rows, 7u);
  EXPECT_TRUE(d.chunked_logits());
  TinyGpt g(cfg, B, T, 3);
  g.model.evaluate(g.params, g.x.data(), g.y.data(), B, T);
  const size_t counted = nn::GPT::activation_bytes_for(cfg, B, T, nn::Recompute(false));
  std::printf("activations: whole logits %zu bytes, chunks of 7 tokens %zu (allocated %zu)\n",
              whole, counted, g.model.activation_bytes());
  EXPECT_EQ(g.model.activation_bytes(), counted);
  // The logits were (33, 64) fp32 and are (7, 64) now; the rest rounds the same.
  const size_t saved = (tokens - 7) * 64 * sizeof(float);
  EXPECT_LE(whole - counted, saved + 512);
  EXPECT_GE(whole - counted, saved - 512);
  EXPECT_EQ(g.model.logits(), nullptr);  // no whole block of logits to show

  // A chunk at least the micro-batch keeps the whole logits (and shows them).
  cfg.classifier_chunk_tokens = tokens;
  EXPECT_FALSE(nn::ActivationDims::of(cfg, B, T).chunked_logits());
}

TEST(ClassifierChunks, AutomaticChunkIsABudgetOfWholeTiles) {
  nn::GPTConfig cfg = nn::GPTConfig::preset("gpt2");
  const nn::ActivationDims small = nn::ActivationDims::of(cfg, 1, 64);
  EXPECT_FALSE(small.chunked_logits());  // 64 tokens' logits fit the budget
  const nn::ActivationDims big = nn::ActivationDims::of(cfg, 8, 1024);
  std::printf(
      "gpt2, B 8, T 1024: logits in chunks of %zu tokens (%.1f MiB) instead of %zu "
      "(%.1f MiB)\n",
      big.logits_rows, static_cast<double>(big.logits_rows * big.local_vocab) * 4.0 / (1 << 20),
      big.tokens, static_cast<double>(big.tokens * big.local_vocab) * 4.0 / (1 << 20));
  EXPECT_TRUE(big.chunked_logits());
  EXPECT_EQ(big.logits_rows % 64, 0u);
  EXPECT_LE(big.logits_rows * big.local_vocab * sizeof(float), nn::kClassifierChunkBytes);
  EXPECT_GT((big.logits_rows + 64) * big.local_vocab * sizeof(float), nn::kClassifierChunkBytes);
  // Under tensor parallelism each rank's columns are fewer, so its chunk has more rows.
  EXPECT_GE(nn::ActivationDims::of(cfg, 8, 1024, 2).logits_rows, 2 * big.logits_rows - 64);
}

TEST(ClassifierChunks, TrainingForwardLeavesTheLossToTheBackward) {
  nn::GPTConfig cfg = tierzero::testing::tiny_config(50, 64, 16, 2, 2, 32);
  cfg.classifier_chunk_tokens = 5;
  TinyGpt g(cfg, 2, 8, 5);
  nn::MicroBatch mb = g.model.make_micro_batch(2, 8);
  g.model.forward(mb, g.params, g.x.data(), g.y.data());
  const std::string error = tierzero::testing::error_of([&] { (void)g.model.loss(mb); });
  std::printf("loss before the backward: %s\n", error.c_str());
  EXPECT_NE(error.find("chunks"), std::string::npos);
  g.model.backward(mb, g.params, 1.0f);
  EXPECT_TRUE(std::isfinite(g.model.loss(mb)));
}
