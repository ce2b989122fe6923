// llm.c checkpoints: bit-exact round trip, llm.c's byte order of tensors, and clear errors for
// a truncated file and a bad magic, with the previous checkpoint left intact.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "scratch_dir.hpp"
#include "tierzero/core/error.hpp"
#include "tierzero/nn/gpt.hpp"
#include "tierzero/train/checkpoint.hpp"

using namespace tierzero;

namespace {

nn::GPTConfig tiny() {
  nn::GPTConfig c;
  c.vocab_size = 61;
  c.padded_vocab_size = 64;
  c.max_seq_len = 16;
  c.num_layers = 2;
  c.num_heads = 4;
  c.channels = 32;
  return c;
}

std::string temp_path(const std::string& name) {
  return tierzero::testing::scratch_dir("tz_ckpt") + "/" + name;
}

}  // namespace

TEST(Checkpoint, RoundTripIsBitExactAndInLlmcOrder) {
  nn::GPTConfig c = tiny();
  nn::ParamLayout layout = nn::gpt_param_layout(c);
  std::vector<float> p(layout.total_numel());
  nn::init_gpt2_params(layout, c, 5, p.data());
  for (size_t i = 0; i < p.size(); ++i) p[i] += static_cast<float>(i % 97) * 1e-3f;
  const std::string path = temp_path("model.bin");
  train::save_checkpoint(path, c, layout, p.data());
  EXPECT_EQ(std::filesystem::file_size(path), 1024 + layout.parameter_count() * 4);

  // llm.c order: after wte and wpe come ln1w of every layer, then ln1b of every layer, ...
  std::ifstream f(path, std::ios::binary);
  int32_t h[256];
  f.read(reinterpret_cast<char*>(h), sizeof h);
  EXPECT_EQ(h[0], 20240326);
  EXPECT_EQ(h[1], 3);
  EXPECT_EQ(h[2], 16);
  EXPECT_EQ(h[3], 61);
  EXPECT_EQ(h[7], 64);
  f.seekg(static_cast<std::streamoff>(1024 + (64 * 32 + 16 * 32 + 32) * 4));  // ln1w of layer 1
  float v;
  f.read(reinterpret_cast<char*>(&v), 4);
  EXPECT_EQ(v, p[layout.get(nn::ParamKind::ln1w, 1).offset]);

  nn::GPTConfig c2 = train::read_checkpoint_config(path);
  EXPECT_EQ(c2.num_layers, 2u);
  EXPECT_EQ(c2.padded_vocab_size, 64u);
  std::vector<float> q(layout.total_numel(), -1.0f);
  train::load_checkpoint(path, layout, q.data());
  for (const nn::ParamTensor& t : layout.tensors())
    EXPECT_EQ(std::memcmp(p.data() + t.offset, q.data() + t.offset, t.numel * 4), 0) << t.name();
}

TEST(Checkpoint, TruncatedFileIsAClearError) {
  nn::GPTConfig c = tiny();
  nn::ParamLayout layout = nn::gpt_param_layout(c);
  std::vector<float> p(layout.total_numel(), 0.5f);
  const std::string path = temp_path("trunc.bin");
  train::save_checkpoint(path, c, layout, p.data());
  std::filesystem::resize_file(path, std::filesystem::file_size(path) - 100);
  try {
    train::read_checkpoint_config(path);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    std::printf("error: %s\n", e.what());
    EXPECT_NE(std::string(e.what()).find("is truncated"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos);
  }
  std::filesystem::resize_file(path, 100);
  EXPECT_THROW(train::read_checkpoint_config(path), Error);
}

TEST(Checkpoint, BadMagicAndVersionAreClearErrors) {
  const std::string path = temp_path("magic.bin");
  {
    std::ofstream f(path, std::ios::binary);
    int32_t h[256] = {20240520, 1, 100};  // a data shard, not a checkpoint
    f.write(reinterpret_cast<const char*>(h), sizeof h);
  }
  try {
    train::read_checkpoint_config(path);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("bad magic 20240520"), std::string::npos) << e.what();
  }
  {
    std::ofstream f(path, std::ios::binary);
    int32_t h[256] = {20240326, 5, 16, 61, 2, 4, 32, 64};
    f.write(reinterpret_cast<const char*>(h), sizeof h);
  }
  try {
    train::read_checkpoint_config(path);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("version 5 (bf16 weights)"), std::string::npos)
        << e.what();
  }
}

TEST(Checkpoint, FailedSaveLeavesThePreviousCheckpointIntact) {
  nn::GPTConfig c = tiny();
  nn::ParamLayout layout = nn::gpt_param_layout(c);
  std::vector<float> p(layout.total_numel(), 0.25f);
  const std::string path = temp_path("keep.bin");
  train::save_checkpoint(path, c, layout, p.data());
  const auto size = std::filesystem::file_size(path);
  // A directory where the temporary file should go makes the save fail.
  std::filesystem::create_directories(path + ".tmp");
  EXPECT_THROW(train::save_checkpoint(path, c, layout, p.data()), Error);
  std::filesystem::remove(path + ".tmp");
  EXPECT_EQ(std::filesystem::file_size(path), size);
  EXPECT_NO_THROW(train::read_checkpoint_config(path));
}

// The streamed writer (units in any order, as a rank saving unit by unit does) makes the same file
// as save_checkpoint, and ModelFileRanges reads any range of the flat buffer as load_checkpoint
// would (padding zero), without reading the whole file.
TEST(Checkpoint, StreamedWriteAndRangeReadsMatchTheWholeFileFunctions) {
  nn::GPTConfig c = tiny();
  nn::ParamLayout layout = nn::gpt_param_layout(c);
  std::vector<float> p(layout.total_numel());
  nn::init_gpt2_params(layout, c, 9, p.data());
  const std::string whole = temp_path("whole.bin"), streamed = temp_path("streamed.bin");
  train::save_checkpoint(whole, c, layout, p.data());
  {
    train::ModelFileWriter w(streamed, c, layout);
    for (size_t u = layout.units().size(); u-- > 0;) {  // last unit first
      const nn::ParamUnit& unit = layout.units()[u];
      w.write(unit.offset, unit.numel, p.data() + unit.offset);
    }
    EXPECT_FALSE(std::filesystem::exists(streamed)) << "visible before commit";
    w.commit();
  }
  std::ifstream a(whole, std::ios::binary), b(streamed, std::ios::binary);
  const std::string bytes_a((std::istreambuf_iterator<char>(a)), std::istreambuf_iterator<char>());
  const std::string bytes_b((std::istreambuf_iterator<char>(b)), std::istreambuf_iterator<char>());
  EXPECT_EQ(bytes_a.size(), bytes_b.size());
  EXPECT_TRUE(bytes_a == bytes_b) << "the streamed file differs from save_checkpoint's";

  std::vector<float> full(layout.total_numel(), 0.0f);
  train::load_checkpoint(whole, layout, full.data());
  train::ModelFileRanges ranges(streamed, layout);
  size_t checked = 0;
  for (size_t begin = 0; begin < layout.total_numel(); begin += 777) {
    const size_t n = std::min<size_t>(1500, layout.total_numel() - begin);
    std::vector<float> got(n, -1.0f);
    ranges.read(begin, n, got.data());
    EXPECT_EQ(std::memcmp(got.data(), full.data() + begin, n * sizeof(float)), 0)
        << "range [" << begin << ", " << begin + n << ")";
    checked += n;
  }
  std::printf("checked %zu elements over %zu ranges\n", checked, layout.total_numel() / 777 + 1);
}

// read_runs (a tensor-parallel rank's pieces: a part of every row) equals reading each run by
// itself, for blocks smaller than, equal to and larger than the runs' span, with gaps between runs
// wider than a block (blocks there are skipped).
TEST(Checkpoint, RunsReadInBlocksEqualRunByRunReads) {
  nn::GPTConfig c = tiny();
  nn::ParamLayout layout = nn::gpt_param_layout(c);
  std::vector<float> p(layout.total_numel());
  nn::init_gpt2_params(layout, c, 11, p.data());
  const std::string path = temp_path("runs.bin");
  train::save_checkpoint(path, c, layout, p.data());
  train::ModelFileRanges file(path, layout);
  const nn::ParamTensor& t = *layout.find(nn::ParamKind::fcprojw, 1);  // (C, 4C)
  size_t cases = 0, differ = 0;
  for (size_t width : {1u, 7u, 64u})  // elements of each row kept
    for (size_t stride : {width, size_t{128}, size_t{1000}}) {
      std::vector<train::ModelRanges::Run> runs;
      size_t at = 0;
      for (size_t f = 0; f + width <= t.numel; f += stride) {
        runs.push_back({t.offset + f, at, width});
        at += width;
      }
      std::vector<float> want(at, 0.0f), scratch;  // (kept) fp32
      for (const auto& r : runs) file.read(r.full, r.n, want.data() + r.at);
      for (size_t block : {size_t{1}, size_t{5}, size_t{100}, size_t{4096}, size_t{1} << 22}) {
        std::vector<float> got(at, -1.0f);  // (kept) fp32
        file.read_runs(runs, got.data(), scratch, block);
        ++cases;
        differ += got != want;
      }
    }
  std::printf("read_runs: %zu cases, %zu differ from run-by-run reads\n", cases, differ);
  EXPECT_EQ(differ, 0u);
}

// A writer that is never committed leaves neither the file nor its temporary behind.
TEST(Checkpoint, UncommittedStreamedWriteLeavesNothing) {
  nn::GPTConfig c = tiny();
  nn::ParamLayout layout = nn::gpt_param_layout(c);
  const std::string path = temp_path("abandoned.bin");
  {
    train::ModelFileWriter w(path, c, layout);
    std::vector<float> p(layout.units()[0].numel, 0.5f);
    w.write(0, p.size(), p.data());
  }
  EXPECT_FALSE(std::filesystem::exists(path));
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
}
