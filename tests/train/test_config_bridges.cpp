// TrainConfig's sections as the lower layers' option structs: the NVMe engine's and streaming
// pipeline's options from DeepSpeed's aio / offload keys, and the GPT's shape.
#include <gtest/gtest.h>

#include "tierzero/core/error.hpp"
#include "tierzero/train/config_bridges.hpp"

using namespace tierzero;
using namespace tierzero::train;

TEST(ConfigBridges, NvmeOptionsFromDeepSpeedConfig) {
  AioConfig aio;
  aio.block_size = 262144;
  aio.queue_depth = 16;
  aio.single_submit = true;
  OffloadConfig off;
  off.device = "nvme";
  off.nvme_path = "/mnt/nvme0,/mnt/nvme1";
  offload::NvmeOptions o = nvme_options_from(aio, off);
  ASSERT_EQ(o.directories.size(), 2u);
  EXPECT_EQ(o.directories[1], "/mnt/nvme1");
  EXPECT_EQ(o.block_size, 262144u);
  EXPECT_EQ(o.queue_depth, 16u);
  EXPECT_TRUE(o.single_submit);
  off.nvme_path.clear();
  EXPECT_THROW(nvme_options_from(aio, off), Error);
}

TEST(ConfigBridges, StreamOptionsFromDeepSpeedConfig) {
  OffloadConfig off;
  off.buffer_count = 5;
  off.buffer_size = 100000000;  // elements
  offload::StreamOptions o = stream_options_from(off, 4);
  EXPECT_EQ(o.buffer_count, 5u);
  EXPECT_EQ(o.buffer_bytes % 4096, 0u);
  EXPECT_GE(o.buffer_bytes, size_t{400000000});
  off.buffer_count = 1;
  EXPECT_THROW(stream_options_from(off, 4), Error);
}

TEST(ConfigBridges, GptShapePadsTheVocabularyAndValidates) {
  ModelShape s;
  s.vocab_size = 257;
  nn::GPTConfig c = gpt_config_from(s);
  EXPECT_EQ(c.padded_vocab_size, 384u);
  s.padded_vocab_size = 320;
  EXPECT_EQ(gpt_config_from(s).padded_vocab_size, 320u);
  s.n_embd = 130;  // not a multiple of n_head = 4
  EXPECT_THROW(gpt_config_from(s), Error);
}
