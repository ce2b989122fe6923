// ParamLayout units and GPT-2 initialisation statistics.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <vector>

#include "tierzero/core/error.hpp"
#include "tierzero/nn/gpt.hpp"

using namespace tierzero;

TEST(ParamLayout, Gpt2SmallHasTheKnownParameterCountAndUnits) {
  nn::GPTConfig cfg = nn::GPTConfig::preset("gpt2");
  nn::ParamLayout layout = nn::gpt_param_layout(cfg);
  EXPECT_EQ(layout.parameter_count(), 124475904u);  // llm.c's count with Vp = 50304
  ASSERT_EQ(layout.units().size(), 14u);            // embeddings, 12 blocks, final norm
  EXPECT_EQ(layout.units()[0].name, "embeddings");
  EXPECT_EQ(layout.units()[13].name, "final_norm");
  // What a unit is, as fields: its block, and tied for the embeddings the head also uses.
  for (size_t u = 0; u < layout.units().size(); ++u) {
    const nn::ParamUnit& unit = layout.units()[u];
    EXPECT_EQ(unit.block, u >= 1 && u <= 12 ? static_cast<int>(u) - 1 : -1) << unit.name;
    EXPECT_EQ(unit.tied, u == 0) << unit.name;
  }
  size_t covered = 0;
  for (size_t u = 0; u < layout.units().size(); ++u) {
    const nn::ParamUnit& unit = layout.units()[u];
    EXPECT_EQ(unit.offset, covered) << "units are contiguous and in order";
    covered += unit.numel;
    for (size_t ti : unit.tensors) {
      const nn::ParamTensor& t = layout.tensors()[ti];
      EXPECT_EQ(t.unit, u);
      EXPECT_EQ(t.offset % 64, 0u) << t.name() << " is 256-byte aligned";
      EXPECT_GE(t.offset, unit.offset);
      EXPECT_LE(t.offset + t.numel, unit.offset + unit.numel);
    }
  }
  EXPECT_EQ(covered, layout.total_numel());
  EXPECT_EQ(layout.get(nn::ParamKind::qkvw, 5).name(), "block.5.qkvw");
  EXPECT_EQ(layout.get(nn::ParamKind::qkvw, 5).numel, 3u * 768 * 768);
  EXPECT_TRUE(layout.get(nn::ParamKind::fcw, 0).decay);
  EXPECT_FALSE(layout.get(nn::ParamKind::fcb, 0).decay);
  EXPECT_FALSE(layout.get(nn::ParamKind::lnfw).decay);
  EXPECT_THROW(layout.get(nn::ParamKind::qkvw, 12), Error);
  EXPECT_THROW(nn::GPTConfig::preset("gpt5"), Error);
}

TEST(ParamLayout, Gpt2InitialisationStatistics) {
  nn::GPTConfig cfg;
  cfg.vocab_size = 500;
  cfg.padded_vocab_size = 512;
  cfg.max_seq_len = 64;
  cfg.num_layers = 8;
  cfg.num_heads = 4;
  cfg.channels = 128;
  nn::ParamLayout layout = nn::gpt_param_layout(cfg);
  std::vector<float> p(layout.total_numel());
  nn::init_gpt2_params(layout, cfg, 42, p.data());
  auto stats = [&](nn::ParamKind k, int layer) {
    const nn::ParamTensor& t = layout.get(k, layer);
    double s = 0, s2 = 0;
    for (size_t i = 0; i < t.numel; ++i) {
      s += p[t.offset + i];
      s2 += double{p[t.offset + i]} * p[t.offset + i];
    }
    const double n = static_cast<double>(t.numel);
    return std::pair<double, double>{s / n, std::sqrt(s2 / n - (s / n) * (s / n))};
  };
  auto [m_qkv, sd_qkv] = stats(nn::ParamKind::qkvw, 3);
  auto [m_proj, sd_proj] = stats(nn::ParamKind::attprojw, 3);
  auto [m_fcp, sd_fcp] = stats(nn::ParamKind::fcprojw, 7);
  auto [m_wte, sd_wte] = stats(nn::ParamKind::wte, -1);
  const double resid = 0.02 / std::sqrt(2.0 * 8);
  std::printf("std qkvw %.5f (0.02) attprojw %.5f fcprojw %.5f (%.5f) wte %.5f\n", sd_qkv, sd_proj,
              sd_fcp, resid, sd_wte);
  EXPECT_NEAR(sd_qkv, 0.02, 0.0006);
  EXPECT_NEAR(sd_wte, 0.02, 0.0006);
  EXPECT_NEAR(sd_proj, resid, resid * 0.05);
  EXPECT_NEAR(sd_fcp, resid, resid * 0.05);
  EXPECT_NEAR(m_qkv, 0.0, 0.0005);
  EXPECT_EQ(stats(nn::ParamKind::ln1w, 2).first, 1.0);
  EXPECT_EQ(stats(nn::ParamKind::ln1w, 2).second, 0.0);
  EXPECT_EQ(stats(nn::ParamKind::fcb, 2).first, 0.0);
  std::vector<float> q(layout.total_numel());
  nn::init_gpt2_params(layout, cfg, 42, q.data());
  EXPECT_EQ(p, q) << "the same seed gives the same model";
}

// Any range of the flat buffer drawn alone equals the same range of the whole draw, so a rank can
// create only its shard; and the values do not depend on where the range starts or ends.
TEST(ParamLayout, Gpt2InitialisationOfAnyRangeEqualsTheWholeDraw) {
  nn::GPTConfig cfg;
  cfg.vocab_size = 300;
  cfg.padded_vocab_size = 320;
  cfg.max_seq_len = 32;
  cfg.num_layers = 3;
  cfg.num_heads = 4;
  cfg.channels = 64;
  nn::ParamLayout layout = nn::gpt_param_layout(cfg);
  std::vector<float> whole(layout.total_numel());
  nn::init_gpt2_params(layout, cfg, 11, whole.data());
  size_t ranges = 0, mismatches = 0;
  for (size_t begin = 0; begin < layout.total_numel(); begin += 4099) {
    for (size_t n : {size_t{1}, size_t{2}, size_t{333}, size_t{70001}}) {
      const size_t count = std::min(n, layout.total_numel() - begin);
      std::vector<float> part(count, -7.0f);
      nn::init_gpt2_range(layout, cfg, 11, begin, count, part.data());
      mismatches += std::memcmp(part.data(), whole.data() + begin, count * sizeof(float)) != 0;
      ++ranges;
    }
  }
  std::printf("%zu ranges drawn alone, %zu differ from the whole draw\n", ranges, mismatches);
  EXPECT_EQ(mismatches, 0u);
  std::vector<float> other(layout.total_numel());
  nn::init_gpt2_params(layout, cfg, 12, other.data());
  EXPECT_NE(whole, other) << "another seed gives another model";
  EXPECT_THROW(nn::init_gpt2_range(layout, cfg, 11, layout.total_numel(), 1, other.data()), Error);
}
