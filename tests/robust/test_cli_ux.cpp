// The first hour of a new user, through the tierzero binary (issue 29): --version, an unknown
// command with a suggestion, error lines without source locations (kept at --log-level debug),
// the train flags people change most reaching the run, eval listing only its own options, plan
// naming its device and leaving no directory behind, estimate saying total and per-rank
// parameters apart, and a resumed run keeping its checkpoint's learning-rate schedule.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>
#include "cli_runner.hpp"
#include "scratch_dir.hpp"

namespace {

using tierzero::test::RunResult;

// The store runs on an MPI singleton even on one rank; Open MPI's start-up allocations are not
// LeakSanitizer-clean (as for the tests labelled mpi).
RunResult tierzero_cli(const std::string& args) {
  return tierzero::test::run_tierzero(args, "env ASAN_OPTIONS=detect_leaks=0 ");
}

std::string dir() {
  return tierzero::testing::scratch_dir("tz_cli_ux");
}

std::string write_file(const std::string& name, const std::string& text) {
  std::string path = dir() + "/" + name;
  std::ofstream(path) << text;
  return path;
}

bool has(const std::string& text, const std::string& needle) {
  return text.find(needle) != std::string::npos;
}

// A tiny model; the cosine schedule's warmup is one step so the schedule's length shows at once.
const char* kTinyConfig = R"({"train_micro_batch_size_per_gpu": 2,
  "scheduler": {"type": "WarmupCosineLR", "params": {"warmup_num_steps": 1}},
  "tierzero": {"steps": 2, "seq_len": 16, "val_batches": 1, "threads": 1,
               "model": {"n_layer": 1, "n_head": 2, "n_embd": 32, "context_length": 16}}})";

// The "lr" of each --metrics line, by step.
std::vector<double> metric_lrs(const std::string& path) {
  std::ifstream f(path);
  std::vector<double> lrs;
  std::string line;
  while (std::getline(f, line))
    if (!line.empty()) lrs.push_back(nlohmann::json::parse(line).at("lr").get<double>());
  return lrs;
}

}  // namespace

TEST(CliUx, VersionIsPrinted) {
  const RunResult r = tierzero_cli("--version");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_TRUE(has(r.output, "tierzero 0.")) << r.output;
  EXPECT_FALSE(has(r.output, "subcommand is required")) << r.output;
}

TEST(CliUx, UnknownCommandSuggestsTheNearest) {
  RunResult r = tierzero_cli("trian --steps 1");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_TRUE(has(r.output, "unknown command 'trian'; did you mean 'train'?")) << r.output;
  EXPECT_FALSE(has(r.output, "subcommand is required")) << r.output;
  r = tierzero_cli("estimat");
  EXPECT_TRUE(has(r.output, "did you mean 'estimate'?")) << r.output;
  r = tierzero_cli("frobnicate");  // nothing near: no suggestion
  EXPECT_NE(r.exit_code, 0);
  EXPECT_TRUE(has(r.output, "unknown command 'frobnicate'")) << r.output;
  EXPECT_FALSE(has(r.output, "did you mean")) << r.output;
}

TEST(CliUx, ErrorsShowTheSourceLocationOnlyAtDebug) {
  const std::string cfg = write_file("unknown.json", R"({"zero_optimization": {"stagee": 1}})");
  RunResult r = tierzero_cli("train --config " + cfg);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(has(r.output, "tierzero: error: config error in '" + cfg +
                                "': unknown key 'zero_optimization.stagee'"))
      << r.output;
  EXPECT_FALSE(has(r.output, ".cpp:")) << r.output;
  r = tierzero_cli("train --config " + cfg + " --log-level debug");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(has(r.output, "unknown key 'zero_optimization.stagee'")) << r.output;
  EXPECT_TRUE(has(r.output, ".cpp:")) << r.output;
}

// --stage, --micro-batch and the offload flags reach the run (its header line says the stage,
// the batch and where the states live); --lr scales every step's learning rate.
TEST(CliUx, TrainFlagsOverrideTheConfig) {
  const std::string cfg = write_file("tiny.json", kTinyConfig);
  const std::string m1 = dir() + "/lr1.jsonl", m2 = dir() + "/lr2.jsonl";
  RunResult r = tierzero_cli("train --config " + cfg +
                             " --stage 3 --micro-batch 3 --offload-param host "
                             "--offload-optimizer cpu --lr 0.01 --metrics " +
                             m1);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(has(r.output, "batch 3 x 16")) << r.output;
  EXPECT_TRUE(has(r.output, "ZeRO stage 3 on 1 rank(s), params on host, optimizer on host"))
      << r.output;
  r = tierzero_cli("train --config " + cfg + " --lr 0.02 --metrics " + m2);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::vector<double> a = metric_lrs(m1), b = metric_lrs(m2);
  ASSERT_EQ(a.size(), 2u);
  ASSERT_EQ(b.size(), 2u);
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_GT(a[i], 0.0);
    EXPECT_NEAR(b[i] / a[i], 2.0, 1e-9) << "step " << i + 1;
  }
  EXPECT_NEAR(a[0], 0.01, 1e-12);  // the first step is the end of the one-step warmup
  // The flags meet the same checks as the config's keys.
  r = tierzero_cli("train --config " + cfg + " --offload-param host --steps 1");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(has(r.output, "offload_param needs stage 3")) << r.output;
  r = tierzero_cli("train --config " + cfg + " --offload-param disk");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_TRUE(has(r.output, "--offload-param")) << r.output;
}

TEST(CliUx, EvalListsOnlyItsOwnOptions) {
  const RunResult eval = tierzero_cli("eval --help");
  EXPECT_EQ(eval.exit_code, 0);
  for (const char* o : {"--load", "--data", "--batches", "--tp", "--device-mem"})
    EXPECT_TRUE(has(eval.output, o)) << o;
  for (const char* o : {"--save-dir", "--save-every", "--keep-last", "--resume", "--offload-grads",
                        "--lr", "--offload-optimizer", "--steps", "--metrics", "--profile"})
    EXPECT_FALSE(has(eval.output, std::string(o) + " ")) << o << " in\n" << eval.output;
  const RunResult train = tierzero_cli("train --help");
  for (const char* o : {"--save-dir", "--resume", "--reset-lr-schedule", "--lr", "--stage",
                        "--micro-batch", "--offload-param", "--offload-optimizer", "--steps"})
    EXPECT_TRUE(has(train.output, o)) << o;
}

TEST(CliUx, EstimateSaysTotalAndPerRankParametersApart) {
  RunResult r = tierzero_cli("estimate --model gpt2 --ranks 8 --stage 3");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(has(r.output, "124475904 parameters\n")) << r.output;
  EXPECT_FALSE(has(r.output, "parameters per rank (")) << r.output;
  // ceil(124475904 / 8)
  EXPECT_TRUE(has(r.output,
                  "over the 8 ranks of a partition group: a shard of 15559488 "
                  "parameters per rank"))
      << r.output;
  r = tierzero_cli("estimate --model gpt2 --ranks 8 --stage 3 --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json j = nlohmann::json::parse(r.output.substr(r.output.find('{')));
  EXPECT_EQ(j.at("model_parameters"), 124475904u);
  EXPECT_EQ(j.at("shard_parameters"), 15559488u);
}

// plan names the device its step times are for, prints whole sentences, and removes the NVMe
// directory it created for its measurement.
TEST(CliUx, PlanSaysItsDeviceAndCleansUp) {
  const std::string nvme = dir() + "/plan_nvme/swap";
  const RunResult r = tierzero_cli(
      "plan --layers 1 --heads 2 --channels 32 --vocab 257 --context 16 --device-mem 64MiB "
      "--host-mem 1GiB --nvme 1GiB --nvme-path " +
      nvme + " --threads 1 --global-batch 2");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(has(r.output, "device   cpu (assumed: no GPU found") ||
              has(r.output, "device   cuda (assumed: this machine's GPU"))
      << r.output;
  EXPECT_TRUE(has(r.output, "prints this plan's own error\n")) << r.output;
  EXPECT_FALSE(std::filesystem::exists(dir() + "/plan_nvme")) << "plan left its directory";
}

// Resuming with another --steps keeps the checkpoint's schedule (the same learning rates as the
// run that was never interrupted), says so, and --reset-lr-schedule adopts the new one.
TEST(CliUx, ResumeKeepsTheCheckpointsLearningRateSchedule) {
  const std::string cfg = write_file("sched.json", kTinyConfig);
  const std::string ckpt = dir() + "/ckpt";
  const std::string whole = dir() + "/whole.jsonl", kept = dir() + "/kept.jsonl",
                    reset = dir() + "/reset.jsonl";
  RunResult r = tierzero_cli("train --config " + cfg + " --steps 6 --metrics " + whole);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = tierzero_cli("train --config " + cfg + " --steps 6 --save-dir " + ckpt +
                   " --save-every 2 --keep-last 0");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string from = ckpt + "/step-00000002";
  r = tierzero_cli("train --config " + cfg + " --steps 4 --resume " + from + " --metrics " + kept);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(has(r.output, "learning-rate schedule: the checkpoint's, over 6 steps")) << r.output;
  r = tierzero_cli("train --config " + cfg + " --steps 4 --resume " + from +
                   " --reset-lr-schedule --metrics " + reset);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(has(r.output, "learning-rate schedule: this run's, over 4 steps")) << r.output;
  const std::vector<double> w = metric_lrs(whole), k = metric_lrs(kept), n = metric_lrs(reset);
  ASSERT_EQ(w.size(), 6u);
  ASSERT_EQ(k.size(), 2u);  // steps 3 and 4
  ASSERT_EQ(n.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_DOUBLE_EQ(k[i], w[i + 2]) << "step " << i + 3;
    EXPECT_LT(n[i], w[i + 2]) << "step " << i + 3 << ": a 4-step cosine decays sooner";
  }
}

// `--steps 0` over a checkpoint takes no step: the reference path then holds no AdamW moments and
// passes the checkpoint's over; the model it saves is the checkpoint's, bit for bit, on both paths.
TEST(CliUx, ResumeWithNoStepsSavesTheCheckpointsModel) {
  const std::string cfg = write_file("nosteps.json", kTinyConfig);
  for (const std::string stage : {"0", "3"}) {
    const std::string ckpt = dir() + "/nosteps" + stage, trained = ckpt + ".trained.bin",
                      again = ckpt + ".again.bin";
    RunResult r =
        tierzero_cli("train --config " + cfg + " --stage " + stage + " --steps 2 --save-dir " +
                     ckpt + " --save-every 2 --save " + trained);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    r = tierzero_cli("train --config " + cfg + " --stage " + stage + " --steps 0 --resume " + ckpt +
                     "/step-00000002 --save " + again);
    ASSERT_EQ(r.exit_code, 0) << "stage " << stage << ": " << r.output;
    std::ifstream a(trained, std::ios::binary), b(again, std::ios::binary);
    const std::string x((std::istreambuf_iterator<char>(a)), std::istreambuf_iterator<char>());
    const std::string y((std::istreambuf_iterator<char>(b)), std::istreambuf_iterator<char>());
    EXPECT_FALSE(x.empty());
    EXPECT_TRUE(x == y) << "stage " << stage << ": the saved model differs from the checkpoint's";
  }
}

// Flags that cannot mean anything are refused by name before a run starts: a NaN where a number
// is asked (CLI11's ranges let NaN through; --lr nan was silently the config's rate), --resume
// with --load (the checkpoint's weights win), --reset-lr-schedule without --resume, a --model
// shape past the config's limits (it was OOM-killed), and a FIFO given to prepare-data (a hang).
TEST(CliUx, MeaninglessFlagsAreRefusedByName) {
  const std::string cfg = write_file("flags.json", kTinyConfig);
  const auto refused = [](const std::string& args, const std::vector<std::string>& words) {
    const RunResult r = tierzero_cli(args);
    EXPECT_NE(r.exit_code, 0) << args;
    for (const std::string& w : words) EXPECT_TRUE(has(r.output, w)) << w << " in " << r.output;
    EXPECT_FALSE(has(r.output, "tok/s")) << "a step ran: " << r.output;
  };
  refused("train --config " + cfg + " --lr nan", {"--lr", "not a finite number"});
  refused("estimate --model gpt2 --stage 3 --offload-param cpu --offload-param-ratio nan",
          {"--offload-param-ratio", "not a finite number"});
  refused(
      "plan --layers 2 --heads 2 --channels 32 --vocab 257 --context 16 --device-mem 10MiB "
      "--margin -nan",
      {"--margin", "not a finite number"});
  refused("train --config " + cfg + " --resume " + dir() + "/none --load " + dir() + "/none.bin",
          {"--resume", "--load"});
  refused("train --config " + cfg + " --reset-lr-schedule", {"--reset-lr-schedule", "--resume"});
  refused("train --config " + cfg + " --model 99999999999,2,32", {"out of range", "4096"});
  const std::string fifo = dir() + "/input.fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  refused("prepare-data " + fifo + " -o " + dir() + "/fifo_out", {"FIFO"});
  refused("prepare-data " + dir() + " -o " + dir() + "/dir_out", {"is a directory"});
}

// DeepSpeed's train_batch_size sets the global batch: with the micro-batch given, the
// accumulation follows (it was ignored, and the run trained batches a quarter the size).
TEST(CliUx, TrainBatchSizeSetsTheAccumulation) {
  const std::string cfg = write_file("global_batch.json", R"({"train_batch_size": 8,
    "train_micro_batch_size_per_gpu": 2,
    "tierzero": {"steps": 1, "seq_len": 16, "val_batches": 1, "threads": 1,
                 "model": {"n_layer": 1, "n_head": 2, "n_embd": 32, "context_length": 16}}})");
  const RunResult r = tierzero_cli("train --config " + cfg);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(has(r.output, "4 accumulation")) << r.output;
}

// eval --batches past what the data holds averages the batches it holds and says so: the loader
// used to wrap and count batches twice, and a billion batches ran on for minutes.
TEST(CliUx, EvalAveragesAtMostTheDataAndSaysSo) {
  const std::string cfg = write_file("eval_batches.json", kTinyConfig);
  const RunResult r = tierzero_cli("eval --config " + cfg + " --batches 1073741824");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(has(r.output, "1073741824 were asked")) << r.output;
  EXPECT_FALSE(has(r.output, "over 1073741824 batches")) << r.output;
}
