// The block's last residual add left to the next module's norm (GPT::set_residual_fusion, on by
// default) against the reference, which adds it in a pass of its own: the same losses, gradients,
// logits and evaluation loss, bit for bit, for GPT-2 (LayerNorm) and the Llama family (RMSNorm),
// each with its fused kernel, in every recompute mode, with micro-batches accumulated and
// with a model of one block (whose sum the final norm writes).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "tierzero/nn/recompute.hpp"
#include "tiny_gpt.hpp"

using namespace tierzero;
using tierzero::testing::tiny_config;
using tierzero::testing::TinyGpt;

namespace {

struct Pass {
  std::vector<float> losses;  // per micro-batch
  float eval = 0.0f;
  std::vector<float> grads;   // (numel) accumulated over the micro-batches
  std::vector<float> logits;  // (B, T, Vp) of the evaluation
};

Pass run(const nn::GPTConfig& cfg, bool fuse, nn::Recompute recompute, size_t micro_batches) {
  const size_t B = 3, T = 11;
  TinyGpt g(cfg, B, T, 5);
  g.model.set_residual_fusion(fuse);
  g.model.set_recompute(recompute);
  g.params.zero_grads();
  Pass p;
  for (size_t m = 0; m < micro_batches; ++m) {
    std::rotate(g.x.begin(), g.x.begin() + 1, g.x.end());  // another batch each time
    p.losses.push_back(g.model.forward_backward(g.params, g.x.data(), g.y.data(), B, T, 0.5f));
  }
  p.grads.assign(g.params.grads(), g.params.grads() + g.params.numel());
  p.eval = g.model.evaluate(g.params, g.x.data(), g.y.data(), B, T);
  const size_t n = B * T * cfg.padded_vocab_size;
  p.logits.resize(n);
  g.device->copy(p.logits.data(), g.model.logits(), n * sizeof(float), CopyKind::device_to_host,
                 g.device->default_stream());
  g.device->default_stream().synchronize();
  return p;
}

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double m = 0.0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(double{a[i]} - double{b[i]}));
  return m;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

void expect_bitwise(const nn::GPTConfig& cfg, const char* what, size_t micro_batches = 1) {
  for (const char* mode : {"none", "selective", "full"}) {
    const nn::Recompute recompute = nn::Recompute::parse(mode, "test");
    const Pass ref = run(cfg, false, recompute, micro_batches);
    const Pass fused = run(cfg, true, recompute, micro_batches);
    std::printf(
        "%s, recompute %s, %zu micro-batch(es): fused vs separate residual add: loss %.7f vs "
        "%.7f, eval %.7f vs %.7f, max abs err gradients %.2e, logits %.2e\n",
        what, mode, micro_batches, double{fused.losses.back()}, double{ref.losses.back()},
        double{fused.eval}, double{ref.eval}, max_abs_diff(fused.grads, ref.grads),
        max_abs_diff(fused.logits, ref.logits));
    EXPECT_TRUE(same_bits(fused.losses, ref.losses)) << what << " " << mode;
    EXPECT_EQ(fused.eval, ref.eval) << what << " " << mode;
    EXPECT_TRUE(same_bits(fused.grads, ref.grads)) << what << " " << mode;
    EXPECT_TRUE(same_bits(fused.logits, ref.logits)) << what << " " << mode;
    // Not a vacuous pass: the run trained something.
    EXPECT_GT(*std::max_element(ref.grads.begin(), ref.grads.end()), 0.0f);
    EXPECT_TRUE(std::isfinite(ref.eval) && ref.eval > 0.0f);
  }
}

}  // namespace

TEST(ResidualFusion, Gpt2IsTheSeparateAddBitwise) {
  expect_bitwise(tiny_config(50, 64, 16, 3, 2, 32), "gpt2, 3 blocks");
}

TEST(ResidualFusion, AccumulatedMicroBatchesAreTheSeparateAddBitwise) {
  expect_bitwise(tiny_config(50, 64, 16, 2, 2, 32), "gpt2, 2 blocks", 3);
}

TEST(ResidualFusion, OneBlockIntoTheFinalNormIsTheSeparateAddBitwise) {
  expect_bitwise(tiny_config(50, 64, 16, 1, 2, 32), "gpt2, 1 block");
}

TEST(ResidualFusion, LlamaIsTheSeparateAddBitwise) {
  nn::GPTConfig cfg = nn::GPTConfig::preset("llama-tiny");
  cfg.max_seq_len = 16;
  expect_bitwise(cfg, "llama-tiny");
}
