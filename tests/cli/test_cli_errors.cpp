// The tierzero binary end to end: prepare-data -> train -> save -> eval works, and each kind of
// bad input gives one clear error line and a non-zero exit, never a crash.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "cli_runner.hpp"
#include "scratch_dir.hpp"
#include "tierzero/train/token_shards.hpp"

namespace {

using tierzero::test::RunResult;

// `env` (e.g. "A=1 B=2") is set for the child only.
RunResult tierzero_cli(const std::string& args, const std::string& env = "") {
  return tierzero::test::run_tierzero(args, env.empty() ? "" : "env " + env + " ", " 2>&1", false);
}

std::string dir() {
  return tierzero::testing::scratch_dir("tz_cli");
}

std::string write_file(const std::string& name, const std::string& text) {
  std::string path = dir() + "/" + name;
  std::ofstream(path) << text;
  return path;
}

// A tiny model so each run takes a moment.
const char* kTinyConfig = R"({"train_micro_batch_size_per_gpu": 2,
  "tierzero": {"steps": 2, "seq_len": 16, "val_batches": 2,
               "model": {"n_layer": 1, "n_head": 2, "n_embd": 32, "context_length": 16}}})";

void expect_clean_error(const RunResult& r, const std::string& needle) {
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("tierzero: error: "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(needle), std::string::npos) << r.output;
}

}  // namespace

TEST(Cli, PrepareTrainSaveEvalRoundTrip) {
  std::string text;
  for (int i = 0; i < 400; ++i) text += "the quick brown fox jumps over the lazy dog. ";
  std::string input = write_file("input.txt", text);
  RunResult prep = tierzero_cli("prepare-data " + input + " -o " + dir() + "/data");
  ASSERT_EQ(prep.exit_code, 0) << prep.output;
  std::string cfg = write_file("tiny.json", kTinyConfig);
  RunResult train = tierzero_cli("train --config " + cfg + " --data '" + dir() +
                                 "/data/train_*.bin' --val-data '" + dir() +
                                 "/data/val_*.bin' --save " + dir() + "/model.bin");
  ASSERT_EQ(train.exit_code, 0) << train.output;
  EXPECT_NE(train.output.find("step     2/2"), std::string::npos) << train.output;
  EXPECT_NE(train.output.find("memory summary"), std::string::npos) << train.output;
  RunResult eval = tierzero_cli("eval --config " + cfg + " --load " + dir() +
                                "/model.bin --data '" + dir() + "/data/val_*.bin'");
  ASSERT_EQ(eval.exit_code, 0) << eval.output;
  EXPECT_NE(eval.output.find("\"eval_loss\""), std::string::npos) << eval.output;
}

TEST(Cli, UnknownConfigKey) {
  std::string cfg = write_file("unknown.json", R"({"zero_optimization": {"stagee": 1}})");
  expect_clean_error(tierzero_cli("train --config " + cfg),
                     "unknown key 'zero_optimization.stagee' (did you mean "
                     "'zero_optimization.stage'?)");
}

TEST(Cli, WrongTypeInConfig) {
  std::string cfg = write_file("type.json", R"({"gradient_clipping": "1.0"})");
  expect_clean_error(tierzero_cli("train --config " + cfg), "'gradient_clipping' must be a number");
}

TEST(Cli, OutOfRangeValueInConfig) {
  std::string cfg = write_file("range.json", R"({"optimizer": {"params": {"lr": -1}}})");
  expect_clean_error(tierzero_cli("train --config " + cfg),
                     "'optimizer.params.lr' = -1 is out of range");
}

// Stages 0-3 run on the device tier; offloading is refused up front with what to change.
TEST(Cli, ImpossibleOffloadIsRefusedClearly) {
  std::string stage0 =
      write_file("offload0.json",
                 R"({"zero_optimization": {"stage": 0, "offload_optimizer": {"device": "cpu"}}})");
  expect_clean_error(tierzero_cli("train --config " + stage0),
                     "offload_optimizer needs stage 1, 2 or 3");
  std::string stage2 =
      write_file("offload2.json",
                 R"({"zero_optimization": {"stage": 2, "offload_param": {"device": "cpu"}}})");
  expect_clean_error(tierzero_cli("train --config " + stage2), "offload_param' needs stage 3");
  std::string missing = write_file("offload_missing.json", R"({"zero_optimization": {"stage": 3,
      "offload_optimizer": {"device": "nvme", "nvme_path": "/nonexistent/tz_swap"}},
      "tierzero": {"steps": 1}})");
  expect_clean_error(tierzero_cli("train --config " + missing), "/nonexistent/tz_swap");
  // Gradients on NVMe without the NVMe optimizer would be ignored: refused instead.
  expect_clean_error(tierzero_cli("train --offload-grads nvme --steps 1"),
                     "offload_gradients = nvme needs the optimizer on NVMe");
  std::string opt_cpu = write_file("grads_nvme.json", R"({"zero_optimization": {"stage": 3,
      "offload_optimizer": {"device": "cpu"}}, "tierzero": {"offload_gradients": "nvme"}})");
  expect_clean_error(tierzero_cli("train --config " + opt_cpu),
                     "offload_gradients = nvme needs the optimizer on NVMe");
}

// A device budget too small for what must be on the device at once is a clear error naming the
// request and the budget, not a crash.
TEST(Cli, DeviceBudgetTooSmallIsAClearError) {
  std::string cfg = write_file("budget.json", kTinyConfig);
  expect_clean_error(tierzero_cli("train --config " + cfg + " --device-mem 100KiB"), "budget");
}

// fp16 with dynamic loss scaling: a start scale so large that the gradients overflow skips those
// steps (nothing updated, said on the progress output), halves the scale, and then trains.
TEST(Cli, Fp16LossScaleOverflowSkipsStepsThenTrains) {
  std::string cfg = write_file("fp16.json", R"({"train_micro_batch_size_per_gpu": 2,
    "fp16": {"enabled": true, "initial_scale_power": 127, "hysteresis": 1},
    "zero_optimization": {"stage": 3},
    "tierzero": {"steps": 40, "seq_len": 16, "val_batches": 2,
                 "model": {"n_layer": 1, "n_head": 2, "n_embd": 32, "context_length": 16}}})");
  // The store runs on an MPI singleton even on one rank, and Open MPI's own start-up allocations
  // are not LeakSanitizer-clean (as for the tests labelled mpi): leak checking is off for this
  // child only; ASan's other checks stay on.
  const RunResult r = tierzero_cli("train --config " + cfg, "ASAN_OPTIONS=detect_leaks=0");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("gradient overflow at loss scale"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("val loss"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("val loss nan"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("step    40/40"), std::string::npos) << r.output;
}

TEST(Cli, MissingConfigAndDataFiles) {
  expect_clean_error(tierzero_cli("train --config /nonexistent/c.json"), "cannot read config file");
  std::string cfg = write_file("tiny2.json", kTinyConfig);
  expect_clean_error(tierzero_cli("train --config " + cfg + " --data '/nonexistent/train_*.bin'"),
                     "no data file matches '/nonexistent/train_*.bin'");
}

TEST(Cli, TruncatedShardBadMagicAndTokenOutOfVocab) {
  std::string cfg = write_file("tiny3.json", kTinyConfig);
  std::vector<uint16_t> tokens(2000, 65);
  std::string trunc = dir() + "/trunc.bin";
  tierzero::train::write_token_shard(trunc, tokens.data(), tokens.size());
  std::filesystem::resize_file(trunc, 3000);
  expect_clean_error(tierzero_cli("train --config " + cfg + " --data " + trunc), "is truncated");

  std::string magic = dir() + "/magic.bin";
  tierzero::train::write_token_shard(magic, tokens.data(), tokens.size());
  {
    std::fstream f(magic, std::ios::in | std::ios::out | std::ios::binary);
    f.write("JUNK", 4);
  }
  expect_clean_error(tierzero_cli("train --config " + cfg + " --data " + magic), "has bad magic");

  tokens[40] = 1000;  // vocab is 257
  std::string big = dir() + "/bigtoken.bin";
  tierzero::train::write_token_shard(big, tokens.data(), tokens.size());
  expect_clean_error(tierzero_cli("train --config " + cfg + " --data " + big),
                     "token id 1000 at token 40 of data shard '" + big + "'");
}

TEST(Cli, TruncatedCheckpoint) {
  std::string ckpt = dir() + "/broken.bin";
  {
    std::ofstream f(ckpt, std::ios::binary);
    int32_t h[256] = {20240326, 3, 16, 257, 1, 2, 32, 384};
    f.write(reinterpret_cast<const char*>(h), sizeof h);
    float some[100] = {};
    f.write(reinterpret_cast<const char*>(some), sizeof some);
  }
  expect_clean_error(tierzero_cli("train --load " + ckpt + " --steps 1"),
                     "checkpoint '" + ckpt + "' is truncated");
}

TEST(Cli, BenchTrainPrintsOneJsonResult) {
  RunResult r = tierzero_cli("bench train --batch 1 --seq 8 --steps 1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // The result line parses as JSON (stderr's table comes before it in the same output).
  const size_t at = r.output.find("{\"bench\"");
  ASSERT_NE(at, std::string::npos) << r.output;
  const nlohmann::json j =
      nlohmann::json::parse(r.output.substr(at, r.output.find('\n', at) - at), nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << r.output;
  EXPECT_EQ(j.value("bench", ""), "train.step") << r.output;
  EXPECT_EQ(j.value("baseline", ""), "sgemm") << r.output;
  EXPECT_TRUE(j.contains("value") && j["value"].is_number()) << r.output;
  EXPECT_TRUE(j.contains("ratio") && j["ratio"].is_number()) << r.output;
}

TEST(Cli, BadCommandLineIsRejected) {
  RunResult r = tierzero_cli("train --steps -3");
  EXPECT_NE(r.exit_code, 0);
  r = tierzero_cli("frobnicate");
  EXPECT_NE(r.exit_code, 0);
}
