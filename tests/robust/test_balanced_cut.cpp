// partition_pipeline's balanced cut is found by a binary search per stage (it was a stages x
// blocks x blocks dynamic program, minutes at 100k blocks): here it must pick exactly the cut the
// dynamic program picks, over many models and stage counts, and answer 100k blocks at once.
#include <gtest/gtest.h>

#include <algorithm>
#include <limits>

#include "tierzero/nn/gpt_modules.hpp"
#include "tierzero/nn/param_layout.hpp"
#include "tierzero/nn/pp/pipeline_cut.hpp"
#include "tierzero/nn/pp/pipeline_stage.hpp"

using namespace tierzero;

namespace {

// The dynamic program the cut replaced, verbatim: the least largest-stage load, ties to the
// fewest blocks on the last stage, then the one before it.
std::vector<size_t> reference_counts(const nn::GPTConfig& config, size_t stages) {
  const nn::ParamLayout layout = nn::gpt_param_layout(config);
  const size_t L = config.num_layers;
  const size_t block = layout.units()[layout.unit_index("block.0")].numel;
  const size_t embeddings = layout.units()[layout.unit_index("embeddings")].numel;
  const size_t final_norm = layout.units()[layout.unit_index("final_norm")].numel;
  auto extra = [&](size_t s) {
    size_t e = 0;
    if (s == 0) e += embeddings;
    if (s + 1 == stages) e += embeddings + final_norm;
    return e;
  };
  constexpr size_t kNone = std::numeric_limits<size_t>::max();
  std::vector<std::vector<size_t>> best(stages + 1, std::vector<size_t>(L + 1, kNone));
  std::vector<std::vector<size_t>> take(stages + 1, std::vector<size_t>(L + 1, 0));
  best[0][0] = 0;
  for (size_t s = 1; s <= stages; ++s)
    for (size_t b = s; b <= L; ++b)
      for (size_t k = 1; k <= b - (s - 1); ++k) {
        if (best[s - 1][b - k] == kNone) continue;
        const size_t load = std::max(best[s - 1][b - k], k * block + extra(s - 1));
        if (load < best[s][b]) {
          best[s][b] = load;
          take[s][b] = k;
        }
      }
  std::vector<size_t> counts(stages);
  for (size_t s = stages, b = L; s > 0; --s) {
    counts[s - 1] = take[s][b];
    b -= take[s][b];
  }
  return counts;
}

nn::GPTConfig model(size_t layers, size_t channels, size_t vocab) {
  nn::GPTConfig c;
  c.num_layers = layers;
  c.num_heads = 1;
  c.channels = channels;
  c.vocab_size = vocab;
  c.padded_vocab_size = (vocab + 127) / 128 * 128;
  c.max_seq_len = 8;
  return c;
}

}  // namespace

TEST(BalancedCut, IsTheDynamicProgramsCut) {
  size_t compared = 0;
  for (size_t layers : {1, 2, 3, 5, 8, 13, 24, 40})
    for (size_t channels : {4, 16, 48})
      for (size_t vocab : {1, 64, 500, 5000, 50257}) {
        const nn::GPTConfig c = model(layers, channels, vocab);
        for (size_t stages = 1; stages <= layers; ++stages) {
          std::vector<size_t> got;
          for (const nn::PipelineStage& s : nn::partition_pipeline(c, stages))
            got.push_back(s.num_blocks);
          ASSERT_EQ(got, reference_counts(c, stages))
              << "layers " << layers << ", channels " << channels << ", vocab " << vocab
              << ", stages " << stages;
          ++compared;
        }
      }
  std::printf("%zu cuts identical to the dynamic program's\n", compared);
}

TEST(BalancedCut, HundredThousandBlocks) {
  const nn::GPTConfig c = model(100000, 64, 50257);
  for (size_t stages : {1, 7, 4096}) {
    const std::vector<nn::PipelineStage> st = nn::partition_pipeline(c, stages);
    ASSERT_EQ(st.size(), stages);
    size_t blocks = 0;
    for (const nn::PipelineStage& s : st) blocks += s.num_blocks;
    EXPECT_EQ(blocks, 100000u);
  }
}
