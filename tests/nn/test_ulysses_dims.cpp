// Ulysses' per-rank extents and volumes without running a model: a rank's slice of every
// sequence and its heads (ActivationDims), the clear errors for what does not divide, the
// activation bytes falling as 1/ulysses, and the analytic all-to-all volume the benchmark checks
// measured traffic against. The end-to-end runs against the one-rank reference are in tests/tp.
#include <gtest/gtest.h>

#include <cstdio>
#include <functional>
#include <string>

#include "tierzero/core/error.hpp"
#include "tierzero/nn/gpt.hpp"
#include "tierzero/nn/sp/ulysses_group.hpp"
#include "tiny_gpt.hpp"

using namespace tierzero;
using tierzero::testing::error_of;
using tierzero::testing::tiny_config;

namespace {

TEST(UlyssesDims, SliceOfEverySequenceAndWholeSequencesOfTheRanksHeads) {
  const nn::GPTConfig c = tiny_config(61, 64, 16, 1, 4, 32);  // C 32, 4 heads
  const nn::ActivationDims one = nn::ActivationDims::of(c, 2, 16);
  EXPECT_EQ(one.T, 16u);
  EXPECT_EQ(one.seq_len, 16u);
  EXPECT_EQ(one.attention_tokens(), one.tokens);
  const nn::ActivationDims u2 = nn::ActivationDims::of(c, 2, 16, 1, false, 2);
  EXPECT_EQ(u2.T, 8u);  // positions 8 r .. 8 r + 7 of each sequence
  EXPECT_EQ(u2.seq_len, 16u);
  EXPECT_EQ(u2.tokens, 16u);
  EXPECT_EQ(u2.stream_tokens, 16u);
  EXPECT_EQ(u2.attention_tokens(), 32u);  // the attention sees whole sequences...
  EXPECT_EQ(u2.local_heads, 2u);          // ...of half the heads
  EXPECT_EQ(u2.local_channels, 16u);
  EXPECT_EQ(u2.local_hidden, 128u);  // the MLP is per token: all its features
  EXPECT_EQ(u2.local_vocab, 64u);
  // The attention's insides hold as many elements as one rank's would over 1/ulysses of it.
  EXPECT_EQ(u2.attention_tokens() * 3 * u2.local_channels, u2.tokens * 3 * c.channels);
}

TEST(UlyssesDims, WhatDoesNotDivideIsAClearError) {
  const nn::GPTConfig c = tiny_config(61, 64, 16, 1, 4, 32);
  std::string e = error_of([&] { (void)nn::ActivationDims::of(c, 1, 12, 1, false, 3); });
  std::printf("%s\n", e.c_str());
  EXPECT_NE(e.find("ulysses_parallel 3 does not divide the model's 4 attention heads"),
            std::string::npos)
      << e;
  e = error_of([&] { (void)nn::ActivationDims::of(c, 1, 14, 1, false, 4); });
  std::printf("%s\n", e.c_str());
  EXPECT_NE(e.find("ulysses_parallel 4 does not divide seq_len 14"), std::string::npos) << e;
  e = error_of([&] { (void)nn::ActivationDims::of(c, 1, 16, 2, false, 2); });
  std::printf("%s\n", e.c_str());
  EXPECT_NE(e.find("with tensor_parallel 2 is not supported"), std::string::npos) << e;
}

TEST(UlyssesDims, ActivationBytesFallAsOneOverUlysses) {
  // GPT-2 small's width and heads at a long sequence, every token's logits kept whole: all of it
  // per token. (In chunks, the default here, the one chunk of logits is the same at every u.)
  nn::GPTConfig c = tiny_config(50257, 50304, 4096, 2, 12, 768);
  c.classifier_chunk_tokens = 4096;
  for (bool ckpt : {false, true}) {
    const size_t one = nn::GPT::activation_bytes_for(c, 1, 4096, ckpt);
    for (size_t u : {2, 4}) {
      const size_t b = nn::GPT::activation_bytes_for(c, 1, 4096, ckpt, 1, false, u);
      const double ratio = static_cast<double>(b) / static_cast<double>(one);
      std::printf("checkpointing %d, ulysses %zu: %zu of %zu bytes, ratio %.4f (1/u %.4f)\n",
                  ckpt ? 1 : 0, u, b, one, ratio, 1.0 / static_cast<double>(u));
      EXPECT_LE(ratio, 1.02 / static_cast<double>(u));
      EXPECT_GE(ratio, 0.98 / static_cast<double>(u));
    }
  }
}

TEST(UlyssesDims, AnalyticAllToAllVolume) {
  const nn::GPTConfig c = tiny_config(61, 64, 16, 3, 4, 32);
  const nn::ActivationDims d = nn::ActivationDims::of(c, 2, 16, 1, false, 2);
  // Per block: qkv (3C) and the heads' output (C) of the rank's 16 tokens, forward and backward,
  // and the heads' output again in the backward (the attention backward reads it).
  const nn::UlyssesTraffic t = nn::expected_ulysses_traffic(3, d, false);
  EXPECT_EQ(t.all_to_all_bytes, 3u * (4 + 5) * 16 * 32 * 4);
  EXPECT_EQ(t.calls, 3u * (2 + 3));
  const nn::UlyssesTraffic ck = nn::expected_ulysses_traffic(3, d, true);  // + the recompute
  EXPECT_EQ(ck.all_to_all_bytes, 3u * (4 + 4 + 5) * 16 * 32 * 4);
  EXPECT_EQ(ck.calls, 3u * (2 + 2 + 3));
  // Selective recompute re-shards only the heads' output again.
  const nn::UlyssesTraffic sel = nn::expected_ulysses_traffic(3, d, nn::Recompute::selective);
  EXPECT_EQ(sel.all_to_all_bytes, 3u * (4 + 1 + 5) * 16 * 32 * 4);
  EXPECT_EQ(sel.calls, 3u * (2 + 1 + 3));
  // Per rank the volume stays constant as the sequence and the group grow together.
  const nn::ActivationDims d4 =
      nn::ActivationDims::of(tiny_config(61, 64, 32, 3, 4, 32), 2, 32, 1, false, 4);
  EXPECT_EQ(nn::expected_ulysses_traffic(3, d4, false).all_to_all_bytes, t.all_to_all_bytes);
  EXPECT_EQ(nn::expected_ulysses_traffic(3, nn::ActivationDims::of(c, 2, 16), false).calls, 0u);
  // 16-bit compute re-shards 16-bit tensors: half the bytes, as many calls.
  const nn::UlyssesTraffic h = nn::expected_ulysses_traffic(
      3, nn::ActivationDims::of(c, 2, 16, 1, false, 2, DType::bf16), false);
  EXPECT_EQ(h.all_to_all_bytes, 3u * (4 + 5) * 16 * 32 * 2);
  EXPECT_EQ(h.calls, t.calls);
  // The grouped layout (4 query heads over 2 kv heads of 8 channels): a qkv row of
  // (4 + 2 * 2) * 8 = 64, heads' outputs of 32.
  nn::GPTConfig gqa = c;
  gqa.arch.num_kv_heads = 2;
  const nn::UlyssesTraffic g =
      nn::expected_ulysses_traffic(3, nn::ActivationDims::of(gqa, 2, 16, 1, false, 2), false);
  EXPECT_EQ(g.all_to_all_bytes, 3u * ((64 + 32) + (64 + 32 + 32)) * 16 * 4);
  EXPECT_EQ(g.calls, t.calls);
}

}  // namespace
