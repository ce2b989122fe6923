// Token shards and the DataLoader: round trip, rank striding, and every bad-input case
// (missing file, bad magic, truncated shard, token id >= vocab) with its clear error.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "scratch_dir.hpp"
#include "tierzero/core/error.hpp"
#include "tierzero/train/byte_tokenizer.hpp"
#include "tierzero/train/data_loader.hpp"
#include "tierzero/train/synthetic_corpus.hpp"

using namespace tierzero;
using namespace tierzero::train;

namespace {

std::string temp_dir() {
  return tierzero::testing::scratch_dir("tz_data");
}

std::vector<uint16_t> iota_tokens(size_t n, uint16_t mod) {
  std::vector<uint16_t> t(n);
  for (size_t i = 0; i < n; ++i) t[i] = static_cast<uint16_t>(i % mod);
  return t;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    std::printf("error: %s\n", e.what());
    return e.what();
  }
  return "";
}

}  // namespace

TEST(TokenShards, WriteReadRoundTripAndRankStride) {
  const std::string path = temp_dir() + "/rt_000.bin";
  auto tokens = iota_tokens(1000, 250);
  write_token_shard(path, tokens.data(), tokens.size());
  EXPECT_EQ(std::filesystem::file_size(path), 1024u + 2000u);
  std::vector<std::unique_ptr<TokenShard>> shards;
  shards.push_back(open_token_shard(path));
  EXPECT_EQ(shards[0]->size(), 1000u);

  // Two ranks, B=2, T=4: rank 1 starts at 8 and both advance by 16.
  auto open = [&] {
    std::vector<std::unique_ptr<TokenShard>> s;
    s.push_back(open_token_shard(path));
    return s;
  };
  DataLoader r0(open(), 2, 4, 257, 0, 2), r1(open(), 2, 4, 257, 1, 2);
  int32_t x[8], y[8];
  r0.next_batch(x, y);
  EXPECT_EQ(x[0], 0);
  EXPECT_EQ(y[7], 8);
  r1.next_batch(x, y);
  EXPECT_EQ(x[0], 8);
  EXPECT_EQ(y[0], 9);
  r1.next_batch(x, y);
  EXPECT_EQ(x[0], 24);
}

TEST(TokenShards, WrapsToTheNextShardAndAroundTheEpoch) {
  auto a = iota_tokens(21, 100), b = iota_tokens(21, 100);
  for (auto& t : b) t = static_cast<uint16_t>(t + 100);
  std::vector<std::unique_ptr<TokenShard>> s;
  s.push_back(make_memory_shard("a", a));
  s.push_back(make_memory_shard("b", b));
  DataLoader dl(std::move(s), 1, 10, 257);
  int32_t x[10], y[10];
  dl.next_batch(x, y);
  EXPECT_EQ(x[0], 0);
  dl.next_batch(x, y);
  EXPECT_EQ(x[0], 10);
  dl.next_batch(x, y);
  EXPECT_EQ(x[0], 100);  // next shard
  dl.next_batch(x, y);
  dl.next_batch(x, y);
  EXPECT_EQ(x[0], 0);  // new epoch
  EXPECT_EQ(dl.batches_per_epoch(), 4u);
}

TEST(TokenShards, MissingFileIsAClearError) {
  std::string e = error_of([] { open_token_shards("/nonexistent/tz/train_*.bin"); });
  EXPECT_NE(e.find("no data file matches '/nonexistent/tz/train_*.bin'"), std::string::npos);
  e = error_of([] { open_token_shard("/nonexistent/shard.bin"); });
  EXPECT_NE(e.find("cannot open data shard '/nonexistent/shard.bin'"), std::string::npos);
}

TEST(TokenShards, BadMagicIsAClearError) {
  const std::string path = temp_dir() + "/badmagic.bin";
  auto tokens = iota_tokens(100, 50);
  write_token_shard(path, tokens.data(), tokens.size());
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    int32_t wrong = 20240326;  // a checkpoint's magic
    f.write(reinterpret_cast<const char*>(&wrong), 4);
  }
  std::string e = error_of([&] { open_token_shard(path); });
  EXPECT_NE(e.find("bad magic 20240326"), std::string::npos) << e;
  EXPECT_NE(e.find(path), std::string::npos) << e;
}

TEST(TokenShards, TruncatedShardIsAClearError) {
  const std::string path = temp_dir() + "/trunc.bin";
  auto tokens = iota_tokens(100, 50);
  write_token_shard(path, tokens.data(), tokens.size());
  std::filesystem::resize_file(path, 1024 + 150);
  std::string e = error_of([&] { open_token_shard(path); });
  EXPECT_NE(e.find("is truncated: header says 100 tokens (1224 bytes) but the file has 1174"),
            std::string::npos)
      << e;
  std::filesystem::resize_file(path, 500);
  e = error_of([&] { open_token_shard(path); });
  EXPECT_NE(e.find("shorter than the 1024-byte header"), std::string::npos) << e;
}

TEST(TokenShards, TokenIdAtOrAboveVocabIsAClearError) {
  const std::string path = temp_dir() + "/bigtok.bin";
  auto tokens = iota_tokens(100, 50);
  tokens[13] = 300;
  write_token_shard(path, tokens.data(), tokens.size());
  std::vector<std::unique_ptr<TokenShard>> s;
  s.push_back(open_token_shard(path));
  DataLoader dl(std::move(s), 2, 8, 257);
  int32_t x[16], y[16];
  std::string e = error_of([&] { dl.next_batch(x, y); });
  EXPECT_NE(e.find("token id 300 at token 13 of data shard '" + path + "'"), std::string::npos)
      << e;
  EXPECT_NE(e.find(">= the vocabulary size 257"), std::string::npos) << e;
}

TEST(TokenShards, ShardSmallerThanABatchIsAClearError) {
  std::vector<std::unique_ptr<TokenShard>> s;
  s.push_back(make_memory_shard("tiny", iota_tokens(10, 5)));
  std::string e = error_of([&] { DataLoader dl(std::move(s), 2, 8, 257); });
  EXPECT_NE(e.find("fewer than one batch needs (17"), std::string::npos) << e;
}

TEST(SyntheticCorpus, IsDeterministicStructuredAndInVocab) {
  auto a = synthetic_corpus(50000), b = synthetic_corpus(50000);
  EXPECT_EQ(a, b);
  for (uint16_t t : a) ASSERT_LT(t, kByteVocabSize);
  const double h = unigram_entropy(a, static_cast<size_t>(kByteVocabSize));
  std::printf("unigram entropy of the built-in corpus: %.4f nats\n", h);
  EXPECT_GT(h, 2.0);
  EXPECT_LT(h, 4.0);
  EXPECT_NE(byte_detokenize(a).find("count:"), std::string::npos);
}
