// group_units: several transformer blocks per partition-store unit. The groups must tile the
// layout exactly (every tensor once, at the right offset, decay kept), keep the embeddings and
// the final norm on their own, and name merged blocks by their range.
#include <gtest/gtest.h>

#include "tierzero/core/error.hpp"
#include "tierzero/nn/gpt_modules.hpp"
#include "tierzero/nn/param_layout.hpp"
#include "tierzero/train/store_provider.hpp"

using namespace tierzero;

namespace {

nn::GPTConfig config(size_t layers) {
  nn::GPTConfig c;
  c.vocab_size = 61;
  c.padded_vocab_size = 64;
  c.max_seq_len = 16;
  c.num_layers = layers;
  c.num_heads = 2;
  c.channels = 32;
  return c;
}

TEST(UnitGrouping, MergesBlocksAndTilesTheLayout) {
  const nn::ParamLayout layout = nn::gpt_param_layout(config(5));
  for (size_t per : {1, 2, 3, 5, 8}) {
    const train::UnitGrouping g = train::group_units(layout, per);
    const size_t blocks = 5, groups = (blocks + per - 1) / per;
    ASSERT_EQ(g.specs.size(), 2 + groups) << per;
    EXPECT_EQ(g.specs.front().name, "embeddings");
    EXPECT_EQ(g.specs.back().name, "final_norm");
    if (per == 2) {
      EXPECT_EQ(g.specs[1].name, "blocks.0-1");
      EXPECT_EQ(g.specs[3].name, "block.4");  // the last group holds one block
    }
    // Every nn tensor appears in its store unit at its layout offset minus the unit's start.
    size_t tensors = 0, numel = 0;
    for (size_t s = 0; s < g.specs.size(); ++s) {
      tensors += g.specs[s].tensors.size();
      numel += g.specs[s].numel;
      for (const zero::TensorSpec& t : g.specs[s].tensors) {
        bool found = false;
        for (const nn::ParamTensor& nt : layout.tensors())
          if (nt.offset == g.start[s] + t.offset && nt.numel == t.numel && nt.decay == t.decay)
            found = true;
        EXPECT_TRUE(found) << g.specs[s].name;
      }
    }
    EXPECT_EQ(tensors, layout.tensors().size());
    EXPECT_EQ(numel, layout.total_numel());
    for (size_t u = 0; u < layout.units().size(); ++u)
      EXPECT_EQ(g.start[g.store_unit[u]] + g.offset[u], layout.units()[u].offset);
  }
  EXPECT_THROW(train::group_units(layout, 0), Error);
}

}  // namespace
