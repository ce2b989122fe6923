// Outputs never destroy inputs, never leave half files, and are checked before the work (issue
// 28): the core guard and atomic writer directly, then the real binary: report onto its input,
// outputs inside a checkpoint, unwritable --save/--profile/--memory-json/--save-dir refused
// before step 1, prepare-data's stale shards, and --save's rescue when it fails at the end.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "cli_runner.hpp"
#include "scratch_dir.hpp"
#include "tierzero/core/error.hpp"
#include "tierzero/core/output_files.hpp"
#include "tierzero/train/output_paths.hpp"
#include "tierzero/train/run_outputs.hpp"

namespace fs = std::filesystem;
using namespace tierzero;
using namespace tierzero::train;

namespace {

using tierzero::test::RunResult;

RunResult tierzero_cli(const std::string& args) {
  return tierzero::test::run_tierzero(args);
}

std::string dir() {
  return tierzero::testing::scratch_dir("tz_outputs");
}

std::string write_text(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

const char* kTinyConfig = R"({"train_micro_batch_size_per_gpu": 2,
  "tierzero": {"steps": 2, "seq_len": 16, "val_batches": 1,
               "model": {"n_layer": 1, "n_head": 2, "n_embd": 32, "context_length": 16}}})";

std::string tiny_config() {
  static const std::string path = write_text(dir() + "/tiny.json", kTinyConfig);
  return path;
}

// A refused run: exit 1, one error line naming the flag and the path, and no training step.
void expect_refused_before_step_1(const RunResult& r, const std::string& flag,
                                  const std::string& path) {
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("tierzero: error: " + flag + " '" + path + "'"), std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("step "), std::string::npos) << "a step ran first:\n" << r.output;
  EXPECT_EQ(r.output.find("Segmentation"), std::string::npos);
}

// A finished two-step run's profile (made once).
std::string profile_path() {
  static const std::string path = [] {
    const std::string p = dir() + "/run.profile.json";
    const RunResult r = tierzero_cli("train --config " + tiny_config() + " --profile " + p);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return p;
  }();
  return path;
}

// A finished run's training checkpoint directory (made once): DIR/step-00000002.
std::string checkpoint_step_dir() {
  static const std::string path = [] {
    const std::string d = dir() + "/ckpt";
    const RunResult r = tierzero_cli("train --config " + tiny_config() + " --save-dir " + d);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return d + "/step-00000002";
  }();
  return path;
}

// Removes the test's directory when its tests are done.
class RemoveTestDir : public ::testing::Environment {
 public:
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir(), ec);
  }
};
const auto* const kRemoveTestDir = ::testing::AddGlobalTestEnvironment(new RemoveTestDir);

}  // namespace

// --- the core guard and writer ---------------------------------------------------------------

TEST(OutputGuard, SameFileByInodeAndByPath) {
  const std::string a = write_text(dir() + "/same_a.txt", "a");
  const std::string link = dir() + "/same_link.txt";
  fs::remove(link);
  fs::create_hard_link(a, link);
  EXPECT_TRUE(same_file(a, link));                     // two names, one inode
  EXPECT_TRUE(same_file(a, dir() + "/./same_a.txt"));  // another spelling
  EXPECT_FALSE(same_file(a, dir() + "/same_missing.txt"));
  EXPECT_TRUE(same_file(dir() + "/x/../missing", dir() + "/missing"));  // neither exists
}

TEST(OutputGuard, RefusesInputsDirectoriesAndMissingDirectories) {
  const std::string in = write_text(dir() + "/guard_in.txt", "keep me");
  EXPECT_THROW(check_output_file("-o", in, {in}), Error);
  EXPECT_THROW(check_output_file("-o", dir(), {}), Error);  // a directory
  EXPECT_THROW(check_output_file("-o", dir() + "/no/such/dir/out.txt", {}), Error);
  EXPECT_THROW(check_output_file("-o", in + "/below_a_file.txt", {}), Error);
  EXPECT_NO_THROW(check_output_file("-o", dir() + "/guard_out.txt", {in}));
  EXPECT_EQ(read_text(in), "keep me");
  EXPECT_THROW(check_distinct_outputs({{"--a", in}, {"--b", dir() + "/./guard_in.txt"}}), Error);
  EXPECT_THROW(check_output_dir("--save-dir", in), Error);  // a file
  try {
    check_output_file("--profile", in, {in});
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--profile '" + in + "'"), std::string::npos) << e.what();
  }
}

TEST(OutputGuard, AtomicWriterLeavesOldFileUntilCommit) {
  const std::string path = write_text(dir() + "/atomic.txt", "old");
  {
    AtomicFileWriter w(path);
    w.write("new but unfinished", 18);
    EXPECT_EQ(read_text(path), "old");
    EXPECT_TRUE(fs::exists(w.temporary()));
  }  // destroyed uncommitted: the temporary goes, the old file stays
  EXPECT_EQ(read_text(path), "old");
  for (const auto& e : fs::directory_iterator(dir()))
    EXPECT_EQ(e.path().string().find(".tmp-"), std::string::npos) << e.path();
  write_file_atomic(path, "new");
  EXPECT_EQ(read_text(path), "new");
  EXPECT_THROW(write_file_atomic(dir() + "/no/such/dir/f.txt", "x"), Error);
}

TEST(OutputGuard, CheckpointDirectoriesAreRecognised) {
  const std::string step = checkpoint_step_dir();
  ASSERT_TRUE(fs::exists(step + "/manifest.json"));
  EXPECT_EQ(enclosing_checkpoint(step + "/report.html"), fs::canonical(step).string());
  EXPECT_FALSE(enclosing_checkpoint(fs::path(step).parent_path() / "latest").empty());
  EXPECT_FALSE(enclosing_checkpoint(fs::path(step).parent_path() / "step-00000009").empty());
  EXPECT_TRUE(enclosing_checkpoint(fs::path(step).parent_path() / "notes.txt").empty());
  EXPECT_TRUE(enclosing_checkpoint(dir() + "/elsewhere.bin").empty());
  EXPECT_THROW(check_output_file("--save", step + "/model.bin", {}), Error);
  EXPECT_THROW(check_output_dir("--save-dir", step), Error);
}

// --- --save's rescue, driven directly (one rank) ---------------------------------------------

TEST(SaveRescue, FailedSaveGoesToTheFirstRescuePathThatWorks) {
  std::vector<std::string> tried;
  const auto save = [&](const std::string& path) -> std::string {
    tried.push_back(path);
    return tried.size() == 1 ? "disk full" : "";
  };
  const std::string msg = train::save_or_rescue(dir() + "/m.bin", dir(), 0, nullptr, save);
  ASSERT_EQ(tried.size(), 2u);
  EXPECT_EQ(fs::path(tried[1]).parent_path(), fs::path(dir()));  // the save dir first
  EXPECT_NE(tried[1].find("rescue-"), std::string::npos);
  EXPECT_NE(msg.find("saved to '" + tried[1] + "'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("disk full"), std::string::npos) << msg;
  tried.clear();
  EXPECT_EQ(train::save_or_rescue(dir() + "/m.bin", "", 0, nullptr,
                                  [&](const std::string& p) {
                                    tried.push_back(p);
                                    return std::string();
                                  }),
            "");
  EXPECT_EQ(tried.size(), 1u);
  const std::string lost = train::save_or_rescue(
      dir() + "/m.bin", "", 0, nullptr, [](const std::string&) { return std::string("no"); });
  EXPECT_NE(lost.find("lost"), std::string::npos) << lost;
}

// --- the binary ------------------------------------------------------------------------------

TEST(OutputsCli, ReportOntoItsInputIsRefusedAndTheInputKept) {
  const std::string p = profile_path();
  const std::string before = read_text(p);
  ASSERT_FALSE(before.empty());
  const RunResult r = tierzero_cli("report " + p + " -o " + p);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("is also an input"), std::string::npos) << r.output;
  EXPECT_EQ(read_text(p), before);
  const RunResult t = tierzero_cli("report " + p + " -o " + dir() + "/r.html --ranks-json " + p);
  EXPECT_EQ(t.exit_code, 1) << t.output;
  EXPECT_EQ(read_text(p), before);
  EXPECT_FALSE(fs::exists(dir() + "/r.html"));  // refused before anything was written
  const RunResult ok = tierzero_cli("report " + p + " -o " + dir() + "/r.html");
  EXPECT_EQ(ok.exit_code, 0) << ok.output;
}

TEST(OutputsCli, OutputsInsideACheckpointAreRefused) {
  const std::string step = checkpoint_step_dir();
  const RunResult r = tierzero_cli("report " + profile_path() + " -o " + step + "/r.html");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("training checkpoint"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(step + "/r.html"));
  expect_refused_before_step_1(
      tierzero_cli("train --config " + tiny_config() + " --save " + step + "/model.bin"), "--save",
      step + "/model.bin");
  expect_refused_before_step_1(
      tierzero_cli("train --config " + tiny_config() + " --save-dir " + step), "--save-dir", step);
  // At the names this run's own --save-dir uses, new or not, and however the path is written:
  // --save onto its `latest` made it unresumable, --metrics onto its lock file ended empty.
  const std::string fresh = dir() + "/fresh_save_dir";
  expect_refused_before_step_1(tierzero_cli("train --config " + tiny_config() + " --save-dir " +
                                            fresh + " --save " + fresh + "/latest"),
                               "--save", fresh + "/latest");
  expect_refused_before_step_1(tierzero_cli("train --config " + tiny_config() + " --save-dir " +
                                            fresh + " --metrics " + fresh + "/tierzero.lock"),
                               "--metrics", fresh + "/tierzero.lock");
  fs::create_directories(fresh);
  const RunResult relative = tierzero::test::run_tierzero(
      "train --config " + tiny_config() + " --save-dir . --save latest",
      "cd " + fresh + " && env ASAN_OPTIONS=detect_leaks=0 ");
  EXPECT_EQ(relative.exit_code, 1) << relative.output;
  EXPECT_NE(relative.output.find("'latest'"), std::string::npos) << relative.output;
  // Any other name there is the user's.
  const RunResult other =
      tierzero_cli("train --config " + tiny_config() + " --steps 1 --save-dir " + fresh +
                   " --save " + fresh + "/final.bin");
  EXPECT_EQ(other.exit_code, 0) << other.output;
  EXPECT_TRUE(fs::exists(fresh + "/final.bin"));
}

TEST(OutputsCli, UnwritableOutputsAreRefusedBeforeTheFirstStep) {
  const std::string cfg = tiny_config();
  const std::string missing = dir() + "/no_such_dir/out";
  expect_refused_before_step_1(tierzero_cli("train --config " + cfg + " --save " + missing),
                               "--save", missing);
  expect_refused_before_step_1(tierzero_cli("train --config " + cfg + " --profile " + missing),
                               "--profile", missing);
  expect_refused_before_step_1(tierzero_cli("train --config " + cfg + " --memory-json " + missing),
                               "--memory-json", missing);
  expect_refused_before_step_1(tierzero_cli("train --config " + cfg + " --metrics " + missing),
                               "--metrics", missing);
  const std::string file = write_text(dir() + "/a_file", "x");
  expect_refused_before_step_1(tierzero_cli("train --config " + cfg + " --save-dir " + file),
                               "--save-dir", file);
  // Outputs over inputs: the config itself, and two outputs on one file.
  expect_refused_before_step_1(tierzero_cli("train --config " + cfg + " --profile " + cfg),
                               "--profile", cfg);
  const std::string both = dir() + "/both.json";
  const RunResult r =
      tierzero_cli("train --config " + cfg + " --profile " + both + " --memory-json " + both);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("are the same file"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("step "), std::string::npos) << r.output;
  EXPECT_EQ(read_text(cfg), kTinyConfig);
}

// --save's directory disappears while the run trains: the model is saved to the --save-dir as
// rescue-*.bin instead, the run says where and exits 1. The run is held after its first step by
// the --metrics FIFO (this test reads it only after removing the directory), so the removal
// always happens before the end.
TEST(OutputsCli, SaveThatFailsAtTheEndIsRescued) {
  const std::string out_dir = dir() + "/vanishing";
  const std::string save_dir = dir() + "/rescue_ckpt";
  fs::create_directories(out_dir);
  const std::string fifo = dir() + "/metrics.fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const std::string log = dir() + "/rescue.log";
  const std::string cmd = std::string(TIERZERO_BINARY) + " train --config " + tiny_config() +
                          " --steps 400 --save " + out_dir + "/model.bin --save-dir " + save_dir +
                          " --metrics " + fifo + " > " + log + " 2>&1";
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  // Non-blocking, so a run that ends before opening the FIFO is seen (waitpid) instead of
  // waited for.
  const int fd = ::open(fifo.c_str(), O_RDONLY | O_NONBLOCK);
  ASSERT_GE(fd, 0);
  int status = 0;
  bool ended = false;
  const auto read_some = [&](bool whole_line) {
    char buf[4096];
    for (;;) {
      if (::waitpid(pid, &status, WNOHANG) == pid) {
        ended = true;
        return;
      }
      pollfd p{fd, POLLIN, 0};
      if (::poll(&p, 1, 100) <= 0) continue;
      const ssize_t n = ::read(fd, buf, whole_line ? 1 : sizeof buf);
      if (n == 0 && (p.revents & POLLHUP)) return;  // the run closed it: done
      if (whole_line && n == 1 && buf[0] == '\n') return;
    }
  };
  read_some(true);  // step 1 is done, and the run waits on this FIFO from step ~200 on
  ASSERT_FALSE(ended) << read_text(log);
  fs::remove_all(out_dir);
  read_some(false);
  ::close(fd);
  if (!ended) {
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  }
  const std::string output = read_text(log);
  std::printf("%s\n", output.c_str());
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 1) << output;
  const size_t at = output.find("the trained model was saved to '");
  ASSERT_NE(at, std::string::npos) << output;
  // Said once (it was printed as the run ended and again as its error), without source lines.
  size_t times = 0;
  for (size_t p = output.find("could not be written"); p != std::string::npos;
       p = output.find("could not be written", p + 1))
    ++times;
  EXPECT_EQ(times, 1u) << output;
  EXPECT_EQ(output.find("[at "), std::string::npos) << output;
  const size_t begin = at + std::string("the trained model was saved to '").size();
  const std::string rescued = output.substr(begin, output.find('\'', begin) - begin);
  EXPECT_EQ(fs::path(rescued).parent_path(), fs::path(save_dir));
  ASSERT_TRUE(fs::exists(rescued)) << rescued;
  const RunResult eval = tierzero_cli("eval --config " + tiny_config() + " --load " + rescued);
  EXPECT_EQ(eval.exit_code, 0) << eval.output;
}

TEST(OutputsCli, PrepareDataReplacesItsOwnShardsAndRefusesOthers) {
  std::string text;
  for (int i = 0; i < 800; ++i) text += "the quick brown fox jumps over the lazy dog. ";
  const std::string input = write_text(dir() + "/corpus.txt", text);  // ~36k tokens
  const std::string data = dir() + "/data";
  ASSERT_EQ(
      tierzero_cli("prepare-data " + input + " -o " + data + " --shard-tokens 4096").exit_code, 0);
  EXPECT_TRUE(fs::exists(data + "/train_000007.bin"));
  // Fewer, larger shards: the earlier run's train_000001.. must not stay for a glob to mix in.
  ASSERT_EQ(
      tierzero_cli("prepare-data " + input + " -o " + data + " --shard-tokens 100000").exit_code,
      0);
  std::vector<std::string> shards;
  for (const auto& e : fs::directory_iterator(data))
    if (e.path().extension() == ".bin") shards.push_back(e.path().filename().string());
  std::sort(shards.begin(), shards.end());
  EXPECT_EQ(shards, (std::vector<std::string>{"train_000000.bin", "val_000000.bin"}));
  // A shard it did not write: refused, named, nothing removed.
  write_text(data + "/train_000042.bin", "someone else's");
  const RunResult r = tierzero_cli("prepare-data " + input + " -o " + data);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("train_000042.bin"), std::string::npos) << r.output;
  EXPECT_TRUE(fs::exists(data + "/train_000000.bin"));
  EXPECT_EQ(read_text(data + "/train_000042.bin"), "someone else's");
  fs::remove(data + "/train_000042.bin");

  // A run that fails part way (as on a full disk: here its second shard cannot be created)
  // leaves the earlier dataset and manifest exactly as they were: it wrote the new val shard
  // over the old one and left new and old shards side by side, the manifest naming both.
  const std::string manifest = read_text(data + "/tierzero-prepare-data.json");
  const std::string old_train = read_text(data + "/train_000000.bin");
  const std::string old_val = read_text(data + "/val_000000.bin");
  fs::create_directories(data + "/.staging-train_000001.bin");  // blocks the second shard
  const RunResult failed =
      tierzero_cli("prepare-data " + input + " -o " + data + " --shard-tokens 8192");
  EXPECT_EQ(failed.exit_code, 1) << failed.output;
  EXPECT_NE(failed.output.find("unchanged"), std::string::npos) << failed.output;
  fs::remove(data + "/.staging-train_000001.bin");
  std::vector<std::string> after;
  for (const auto& e : fs::directory_iterator(data)) after.push_back(e.path().filename().string());
  std::sort(after.begin(), after.end());
  EXPECT_EQ(after, (std::vector<std::string>{"tierzero-prepare-data.json", "train_000000.bin",
                                             "val_000000.bin"}));
  EXPECT_EQ(read_text(data + "/tierzero-prepare-data.json"), manifest);
  EXPECT_TRUE(read_text(data + "/train_000000.bin") == old_train);
  EXPECT_TRUE(read_text(data + "/val_000000.bin") == old_val);
}
