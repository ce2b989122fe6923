// Pipeline stages without any communication: partition_pipeline's cuts (balanced by parameters,
// or as listed, and its errors), the stage and chunk layouts, and the stages of a model run one
// after the other in one process (the activation handed forward, its gradient handed back) giving
// bitwise the whole model's loss and block gradients (the tied embedding's within rounding), for
// contiguous stages and for interleaved chunks sharing one layout through UnitOffsetProvider.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "tierzero/core/error.hpp"
#include "tierzero/nn/gpt.hpp"
#include "tierzero/nn/pp/pipeline_cut.hpp"
#include "tierzero/nn/pp/pipeline_stage.hpp"
#include "tiny_gpt.hpp"

using namespace tierzero;
using tierzero::testing::tiny_config;
using tierzero::testing::TinyGpt;

namespace {

size_t stage_params(const nn::GPTConfig& c, const nn::PipelineStage& s) {
  return nn::stage_param_layout(c, s, {}).parameter_count();
}

TEST(PipelineStages, BalancedCutMinimisesTheLargestStage) {
  const nn::GPTConfig c = nn::GPTConfig::preset("gpt2");
  for (size_t p : {1u, 2u, 3u, 4u, 6u, 12u}) {
    const std::vector<nn::PipelineStage> st = nn::partition_pipeline(c, p);
    ASSERT_EQ(st.size(), p);
    size_t next = 0, worst = 0;
    for (size_t i = 0; i < p; ++i) {
      EXPECT_EQ(st[i].stage, i);
      EXPECT_EQ(st[i].stages, p);
      EXPECT_EQ(st[i].first_block, next);
      EXPECT_GE(st[i].num_blocks, 1u);
      next += st[i].num_blocks;
      worst = std::max(worst, stage_params(c, st[i]));
    }
    EXPECT_EQ(next, c.num_layers);
    // No other cut of 12 blocks into p runs has a smaller largest stage (checked for p = 2, 3 by
    // trying every cut).
    if (p == 2 || p == 3) {
      std::vector<std::vector<size_t>> cuts;
      const size_t L = c.num_layers;
      for (size_t a = 1; a < L; ++a) {
        if (p == 2) cuts.push_back({a, L - a});
        for (size_t b = 1; p == 3 && a + b < L; ++b) cuts.push_back({a, b, L - a - b});
      }
      size_t best = SIZE_MAX;
      for (const std::vector<size_t>& counts : cuts) {
        size_t w = 0;
        for (const nn::PipelineStage& s : nn::partition_pipeline(c, p, counts))
          w = std::max(w, stage_params(c, s));
        best = std::min(best, w);
      }
      std::printf("gpt2 in %zu stages: largest stage %zu parameters, best possible %zu\n", p, worst,
                  best);
      EXPECT_EQ(worst, best);
    }
  }
}

TEST(PipelineStages, ListedCutsAndTheirErrors) {
  const nn::GPTConfig c = tiny_config(64, 128, 8, 5, 2, 16);
  const std::vector<nn::PipelineStage> st = nn::partition_pipeline(c, 3, {1, 3, 1});
  EXPECT_EQ(st[1].first_block, 1u);
  EXPECT_EQ(st[1].num_blocks, 3u);
  EXPECT_EQ(st[2].str(), "stage 2 of 3: blocks 4-4 + final norm and head");
  const auto message = [&](size_t p, std::vector<size_t> counts) {
    try {
      nn::partition_pipeline(c, p, counts);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message(6, {}).find("exceeds the model's 5 transformer blocks"), std::string::npos);
  EXPECT_NE(message(0, {}).find("0"), std::string::npos);
  EXPECT_NE(message(2, {2, 2}).find("sum to 4"), std::string::npos);
  EXPECT_NE(message(2, {5, 0}).find("pipeline_stages"), std::string::npos);
  EXPECT_NE(message(2, {1, 2, 2}).find("pipeline_stages"), std::string::npos);
}

TEST(PipelineStages, ChunkLayoutsKeepEveryTensorsPlaceInItsUnit) {
  // Interleaved: 2 ranks x 2 chunks over 4 blocks; rank 0 holds virtual stages 0 and 2, rank 1
  // holds 1 and 3 (the last, with the embeddings' tied copy).
  const nn::GPTConfig c = tiny_config(64, 128, 8, 4, 2, 16);
  const std::vector<nn::PipelineStage> v = nn::partition_pipeline(c, 4);
  for (size_t rank = 0; rank < 2; ++rank) {
    const std::vector<nn::PipelineStage> chunks = {v[rank], v[rank + 2]};
    const nn::ParamLayout all = nn::chunks_param_layout(c, chunks, {});
    const std::vector<size_t> first = nn::chunk_unit_offsets(c, chunks);
    size_t units = 0;
    for (size_t k = 0; k < chunks.size(); ++k) {
      const nn::ParamLayout own = nn::stage_param_layout(c, chunks[k], {});
      EXPECT_EQ(first[k], units);
      units += own.units().size();
      for (const nn::ParamTensor& t : own.tensors()) {
        const nn::ParamTensor* there = all.find(t.kind, t.layer);
        ASSERT_NE(there, nullptr) << t.name();
        EXPECT_EQ(there->unit, first[k] + t.unit) << t.name();
        EXPECT_EQ(all.offset_in_unit(*there), own.offset_in_unit(t)) << t.name();
        EXPECT_EQ(all.units()[there->unit].numel, own.units()[t.unit].numel) << t.name();
        EXPECT_EQ(all.units()[there->unit].block, own.units()[t.unit].block) << t.name();
        EXPECT_EQ(all.units()[there->unit].tied, own.units()[t.unit].tied) << t.name();
      }
      // A chunk's units carry its blocks' indices; the embeddings' unit (or its copy on the
      // last stage) is the tied one.
      size_t blocks = 0, tied = 0;
      for (const nn::ParamUnit& u : own.units()) {
        if (u.block >= 0) {
          EXPECT_TRUE(chunks[k].holds_block(static_cast<size_t>(u.block))) << u.name;
          EXPECT_EQ(u.name, "block." + std::to_string(u.block));
          ++blocks;
        }
        if (u.tied) {
          EXPECT_EQ(u.name, "embeddings");
          ++tied;
        }
      }
      EXPECT_EQ(blocks, chunks[k].num_blocks);
      EXPECT_EQ(tied, chunks[k].first() || chunks[k].last() ? 1u : 0u);
    }
    EXPECT_EQ(all.units().size(), units);
  }
}

// The whole model's loss and gradients, and the same model's stages (contiguous, or 2 ranks x 2
// interleaved chunks) run in pipeline order in one process with the boundary tensors copied.
struct Split {
  float loss = 0.0f;
  std::vector<float> wte_grad, block_grads;  // wte summed over its copies; every block's qkvw
};

// The tied wte's gradient is the head's part plus the embedding's: the whole model adds the
// embedding's rows onto the head's one position at a time, the stages add the two sums, so they
// differ by rounding only. Prints the largest difference.
void expect_close(const std::vector<float>& a, const std::vector<float>& b, const char* what) {
  ASSERT_EQ(a.size(), b.size());
  double worst = 0.0;
  for (size_t i = 0; i < a.size(); ++i)
    worst = std::max(worst, std::fabs(static_cast<double>(a[i]) - static_cast<double>(b[i])));
  std::printf("%s: max abs difference %.3g over %zu values\n", what, worst, a.size());
  EXPECT_LT(worst, 1e-7);
}

std::vector<float> grad_of(const nn::ParamLayout& layout, const float* grads, nn::ParamKind kind,
                           int layer) {
  const nn::ParamTensor& t = layout.get(kind, layer);
  return std::vector<float>(grads + t.offset, grads + t.offset + t.numel);
}

Split run_stages(TinyGpt& g, const std::vector<nn::PipelineStage>& order) {
  // One model, layout and parameters per virtual stage, in forward order.
  std::vector<std::unique_ptr<nn::GPT>> models;
  std::vector<std::unique_ptr<nn::LocalParams>> params;
  std::vector<nn::MicroBatch> mbs;
  for (const nn::PipelineStage& st : order) {
    nn::ModelParallel mp;
    mp.pipeline = st;
    models.push_back(std::make_unique<nn::GPT>(g.cfg, g.alloc, mp));
    params.push_back(std::make_unique<nn::LocalParams>(models.back()->layout(), g.alloc));
    nn::init_gpt2_params(models.back()->layout(), g.cfg, 5, params.back()->params());
    params.back()->zero_grads();
    mbs.push_back(models.back()->make_micro_batch(g.B, g.T));
  }
  const size_t n = order.size(), elems = g.B * g.T * g.cfg.channels;
  for (size_t k = 0; k < n; ++k) {
    if (k > 0) std::memcpy(mbs[k].stage_input(), mbs[k - 1].stage_output(), elems * sizeof(float));
    models[k]->forward(mbs[k], *params[k], g.x.data(), g.y.data());
  }
  Split r;
  for (size_t k = n; k-- > 0;) {
    if (k + 1 < n) std::memcpy(mbs[k].dresidual(), mbs[k + 1].dresidual(), elems * sizeof(float));
    models[k]->backward(mbs[k], *params[k], 1.0f);
    if (k + 1 == n) r.loss = models[k]->loss(mbs[k]);
  }
  r.wte_grad.assign(g.cfg.padded_vocab_size * g.cfg.channels, 0.0f);
  for (size_t k = 0; k < n; k += std::max<size_t>(n - 1, 1)) {  // first and last (once when one)
    const std::vector<float> w =
        grad_of(models[k]->layout(), params[k]->grads(), nn::ParamKind::wte, -1);
    for (size_t i = 0; i < w.size(); ++i) r.wte_grad[i] += w[i];
  }
  for (size_t l = 0; l < g.cfg.num_layers; ++l)
    for (size_t k = 0; k < n; ++k)
      if (order[k].holds_block(l)) {
        const std::vector<float> b = grad_of(models[k]->layout(), params[k]->grads(),
                                             nn::ParamKind::qkvw, static_cast<int>(l));
        r.block_grads.insert(r.block_grads.end(), b.begin(), b.end());
      }
  return r;
}

TEST(PipelineStages, StagesInSequenceAreTheWholeModelBitwise) {
  TinyGpt g(tiny_config(64, 128, 8, 4, 2, 16), 2, 8, 5);
  const Split whole = run_stages(g, nn::partition_pipeline(g.cfg, 1));
  for (size_t p : {2u, 4u}) {
    const Split split = run_stages(g, nn::partition_pipeline(g.cfg, p));
    std::printf("%zu stages: loss %.9g vs whole %.9g\n", p, static_cast<double>(split.loss),
                static_cast<double>(whole.loss));
    EXPECT_EQ(split.loss, whole.loss);
    expect_close(split.wte_grad, whole.wte_grad, "tied wte gradient, stages vs whole");
    EXPECT_EQ(split.block_grads, whole.block_grads);
  }
}

TEST(PipelineStages, InterleavedChunksThroughOneLayoutAreTheWholeModelBitwise) {
  // 2 ranks x 2 chunks: rank r's chunks share one LocalParams over chunks_param_layout, each
  // model seeing its own units through a UnitOffsetProvider, and one scratch.
  TinyGpt g(tiny_config(64, 128, 8, 4, 2, 16), 2, 8, 5);
  const Split whole = run_stages(g, nn::partition_pipeline(g.cfg, 1));
  const std::vector<nn::PipelineStage> v = nn::partition_pipeline(g.cfg, 4);
  struct Rank {
    std::vector<nn::PipelineStage> chunks;
    std::unique_ptr<nn::ParamLayout> layout;
    std::unique_ptr<nn::LocalParams> params;
    std::vector<size_t> first;
  };
  std::vector<Rank> ranks(2);
  for (size_t r = 0; r < 2; ++r) {
    ranks[r].chunks = {v[r], v[r + 2]};
    ranks[r].layout =
        std::make_unique<nn::ParamLayout>(nn::chunks_param_layout(g.cfg, ranks[r].chunks, {}));
    ranks[r].params = std::make_unique<nn::LocalParams>(*ranks[r].layout, g.alloc);
    nn::init_gpt2_params(*ranks[r].layout, g.cfg, 5, ranks[r].params->params());
    ranks[r].params->zero_grads();
    ranks[r].first = nn::chunk_unit_offsets(g.cfg, ranks[r].chunks);
  }
  // Virtual stage k = chunk * 2 + rank.
  std::vector<std::unique_ptr<nn::GPT>> models;
  std::vector<std::unique_ptr<nn::UnitOffsetProvider>> views;
  std::vector<nn::MicroBatch> mbs;
  for (size_t k = 0; k < 4; ++k) {
    nn::ModelParallel mp;
    mp.pipeline = v[k];
    models.push_back(std::make_unique<nn::GPT>(g.cfg, g.alloc, mp));
    Rank& r = ranks[k % 2];
    views.push_back(std::make_unique<nn::UnitOffsetProvider>(*r.params, r.first[k / 2]));
    mbs.push_back(models.back()->make_micro_batch(g.B, g.T));
  }
  // A rank's chunks share one scratch (as the trainer has them).
  models[2]->share_scratch(*models[0]);
  models[3]->share_scratch(*models[1]);
  const size_t elems = g.B * g.T * g.cfg.channels;
  for (size_t k = 0; k < 4; ++k) {
    if (k > 0) std::memcpy(mbs[k].stage_input(), mbs[k - 1].stage_output(), elems * sizeof(float));
    models[k]->forward(mbs[k], *views[k], g.x.data(), g.y.data());
  }
  float loss = 0.0f;
  for (size_t k = 4; k-- > 0;) {
    if (k < 3) std::memcpy(mbs[k].dresidual(), mbs[k + 1].dresidual(), elems * sizeof(float));
    models[k]->backward(mbs[k], *views[k], 1.0f);
    if (k == 3) loss = models[k]->loss(mbs[k]);
  }
  EXPECT_EQ(loss, whole.loss);
  std::vector<float> wte(g.cfg.padded_vocab_size * g.cfg.channels, 0.0f);
  for (size_t r = 0; r < 2; ++r) {
    const std::vector<float> w =
        grad_of(*ranks[r].layout, ranks[r].params->grads(), nn::ParamKind::wte, -1);
    for (size_t i = 0; i < w.size(); ++i) wte[i] += w[i];
  }
  expect_close(wte, whole.wte_grad, "tied wte gradient, chunks vs whole");
  std::vector<float> blocks;
  for (size_t l = 0; l < 4; ++l) {
    const Rank& r = ranks[l % 2];
    const std::vector<float> b =
        grad_of(*r.layout, r.params->grads(), nn::ParamKind::qkvw, static_cast<int>(l));
    blocks.insert(blocks.end(), b.begin(), b.end());
  }
  EXPECT_EQ(blocks, whole.block_grads);
}

}  // namespace
