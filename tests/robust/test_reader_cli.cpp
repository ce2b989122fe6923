// The readers' refusals through the real binary: a FIFO or a directory named as --config,
// --data, --val-data, --load or a report input fails promptly with one clear line (each run is
// guarded by `timeout`, so a blocking open fails the test instead of hanging it); a config with
// 1e400 names the line; a forged model file is refused; a validation shard with a token outside
// the vocabulary stops the run at start-up, before any training step.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

#include "cli_runner.hpp"
#include "scratch_dir.hpp"
#include "tierzero/train/token_shards.hpp"

namespace {

using tierzero::test::RunResult;

// Runs the binary under `timeout 120`: exit 124 means it blocked.
RunResult tierzero_cli(const std::string& args) {
  return tierzero::test::run_tierzero(args, "timeout 120 ");
}

const std::string& dir() {
  return tierzero::testing::scratch_dir("tz_reader_cli");
}

std::string write_file(const std::string& name, const std::string& text) {
  const std::string path = dir() + "/" + name;
  std::ofstream(path) << text;
  return path;
}

std::string make_fifo(const std::string& name) {
  const std::string path = dir() + "/" + name;
  ::unlink(path.c_str());
  EXPECT_EQ(::mkfifo(path.c_str(), 0600), 0) << std::strerror(errno);
  return path;
}

// Tokens below `vocab` (a shard long enough for a few tiny batches); `bad_at` puts `bad` there.
std::string write_shard(const std::string& name, size_t vocab, size_t bad_at = SIZE_MAX,
                        uint16_t bad = 0) {
  std::vector<uint16_t> t(4096);
  for (size_t i = 0; i < t.size(); ++i) t[i] = static_cast<uint16_t>((i * 31) % vocab);
  if (bad_at < t.size()) t[bad_at] = bad;
  const std::string path = dir() + "/" + name;
  tierzero::train::write_token_shard(path, t.data(), t.size());
  return path;
}

const char* kTinyConfig = R"({"train_micro_batch_size_per_gpu": 2,
  "tierzero": {"steps": 2, "seq_len": 16, "val_batches": 2,
               "model": {"n_layer": 1, "n_head": 2, "n_embd": 32, "context_length": 16,
                         "vocab_size": 300, "padded_vocab_size": 320}}})";

void expect_clean_error(const RunResult& r, std::initializer_list<const char*> needles) {
  EXPECT_EQ(r.exit_code, 1) << r.output;  // not 124: it did not block
  EXPECT_NE(r.output.find("tierzero: error: "), std::string::npos) << r.output;
  for (const char* n : needles) EXPECT_NE(r.output.find(n), std::string::npos) << n;
}

TEST(ReaderCli, FifoAsConfigOrDataIsRefusedPromptly) {
  const std::string fifo = make_fifo("input.fifo");
  const std::string cfg = write_file("tiny.json", kTinyConfig);
  const std::string shard = write_shard("train_000.bin", 300);
  expect_clean_error(tierzero_cli("train --config " + fifo), {"config file", "FIFO"});
  expect_clean_error(tierzero_cli("train --config " + cfg + " --data " + fifo),
                     {"data shard", "FIFO"});
  expect_clean_error(
      tierzero_cli("train --config " + cfg + " --data " + shard + " --val-data " + fifo),
      {"data shard", "FIFO"});
  expect_clean_error(tierzero_cli("train --config " + cfg + " --data " + shard + " --load " + fifo),
                     {"checkpoint", "FIFO"});
  expect_clean_error(tierzero_cli("report " + fifo + " -o " + dir() + "/r.html"),
                     {"profile", "FIFO"});
}

TEST(ReaderCli, DirectoryAsConfigIsRefusedClearly) {
  expect_clean_error(tierzero_cli("train --config " + dir()),
                     {"config file", "is a directory, not a regular file"});
}

TEST(ReaderCli, ConfigNumberOverflowNamesTheLine) {
  const std::string cfg = write_file("overflow.json", "{\n  \"gradient_clipping\": 1e400\n}\n");
  expect_clean_error(tierzero_cli("train --config " + cfg), {"overflow.json", "line 2", "1e400"});
}

TEST(ReaderCli, ForgedModelFileIsRefused) {
  // A valid header claiming a billion layers in a file of 1 MB.
  std::vector<int32_t> header(256, 0);
  const int32_t fields[] = {20240326, 3, 16, 300, 1000000000, 2, 32, 320};
  std::memcpy(header.data(), fields, sizeof fields);
  const std::string path = dir() + "/forged.bin";
  {
    std::ofstream out(path, std::ios::binary);
    out.write(reinterpret_cast<const char*>(header.data()), 1024);
    const std::string zeros(1 << 20, '\0');
    out.write(zeros.data(), static_cast<std::streamsize>(zeros.size()));
  }
  const std::string cfg = write_file("tiny_load.json", kTinyConfig);
  const std::string shard = write_shard("train_load.bin", 300);
  expect_clean_error(tierzero_cli("train --config " + cfg + " --data " + shard + " --load " + path),
                     {"forged.bin", "truncated"});
}

TEST(ReaderCli, OutOfRangeValidationTokenStopsTheRunBeforeTraining) {
  const std::string cfg = write_file("tiny_val.json", kTinyConfig);
  const std::string train = write_shard("train_ok.bin", 300);
  const std::string val = write_shard("val_bad.bin", 300, 37, 65000);
  const RunResult r =
      tierzero_cli("train --config " + cfg + " --data " + train + " --val-data " + val);
  expect_clean_error(r, {"val_bad.bin", "65000", "at token 37", "vocabulary size 300"});
  EXPECT_EQ(r.output.find("step     1/2"), std::string::npos) << "a step ran first:\n" << r.output;
}

}  // namespace
