// The settings the ranks of a job compare at start-up (issue 28), without MPI: what the list
// holds and leaves out, its text form and digest, and the first difference with its message.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "tierzero/core/error.hpp"
#include "tierzero/train/run_settings.hpp"
#include "tierzero/train/token_shards.hpp"

using namespace tierzero;
using namespace tierzero::train;

namespace {

// The first differing setting's name between the defaults and the defaults changed by `change`.
std::string first_changed(const std::function<void(TrainConfig&)>& change) {
  const TrainConfig base = TrainConfig::defaults();
  TrainConfig changed = base;
  change(changed);
  const RunSettings a = run_settings(base), b = run_settings(changed);
  const std::optional<size_t> at = first_difference(a, b);
  return at ? a.at(*at).name : "";
}

struct TempDir {
  TempDir() {
    std::string templ = (std::filesystem::temp_directory_path() / "tz_settings_XXXXXX").string();
    path = ::mkdtemp(templ.data());
  }
  ~TempDir() { std::filesystem::remove_all(path); }
  std::string path;
};

}  // namespace

TEST(RunSettings, BuildFirstAndNamesUnique) {
  const RunSettings s = run_settings(TrainConfig::defaults());
  ASSERT_FALSE(s.empty());
  EXPECT_EQ(s.front().name, "tierzero build");
  std::set<std::string> names;
  for (const RunSetting& x : s) EXPECT_TRUE(names.insert(x.name).second) << x.name;
  for (const char* must : {"tierzero.steps", "zero_optimization.stage", "tierzero.seed",
                           "train_micro_batch_size_per_gpu", "tierzero.tensor_parallel"})
    EXPECT_EQ(names.count(must), 1u) << must;
}

TEST(RunSettings, EverySettingThatMustAgreeIsCompared) {
  const std::vector<std::pair<std::string, std::function<void(TrainConfig&)>>> cases = {
      {"tierzero.steps", [](TrainConfig& c) { c.steps = 301; }},
      {"tierzero.seed", [](TrainConfig& c) { c.seed = 2; }},
      {"tierzero.model.n_layer", [](TrainConfig& c) { c.model.n_layer = 5; }},
      {"tierzero.seq_len", [](TrainConfig& c) { c.seq_len = 32; }},
      {"train_micro_batch_size_per_gpu", [](TrainConfig& c) { c.micro_batch_size = 4; }},
      {"gradient_accumulation_steps", [](TrainConfig& c) { c.gradient_accumulation_steps = 2; }},
      {"optimizer.params.lr", [](TrainConfig& c) { c.optimizer.lr = 1e-4; }},
      {"scheduler.params.warmup_num_steps",
       [](TrainConfig& c) { c.scheduler.warmup_num_steps = 3; }},
      {"bf16.enabled", [](TrainConfig& c) { c.bf16 = true; }},
      {"zero_optimization.stage", [](TrainConfig& c) { c.zero.stage = 3; }},
      {"zero_optimization.offload_optimizer.device",
       [](TrainConfig& c) { c.zero.offload_optimizer.device = "cpu"; }},
      {"zero_optimization.stage3_max_live_parameters",
       [](TrainConfig& c) { c.zero.max_live_parameters = 7; }},
      {"tierzero.device", [](TrainConfig& c) { c.device = "cuda"; }},
      {"tierzero.checkpoint.resume", [](TrainConfig& c) { c.checkpoint.resume = "/ckpt"; }},
      {"tierzero.checkpoint.save_dir", [](TrainConfig& c) { c.checkpoint.save_dir = "/ckpt"; }},
      {"tierzero.activation_checkpointing",
       [](TrainConfig& c) { c.activation_checkpointing = true; }},
      {"tierzero.recompute", [](TrainConfig& c) { c.recompute = "selective"; }},
      {"tierzero.compute_dtype", [](TrainConfig& c) { c.compute_dtype = "fp32"; }},
      {"tierzero.pipeline_parallel", [](TrainConfig& c) { c.pipeline_parallel = 2; }},
      {"tierzero.pipeline_stages",
       [](TrainConfig& c) {
         c.pipeline_stages = {2, 2};
       }},
      {"tierzero.val_batches", [](TrainConfig& c) { c.val_batches = 1; }},
  };
  for (const auto& [name, change] : cases) EXPECT_EQ(first_changed(change), name);
}

TEST(RunSettings, PerNodeSettingsAreLeftOut) {
  EXPECT_EQ(first_changed([](TrainConfig& c) {
              c.threads = 7;
              c.log_level = "debug";
              c.zero.offload_param.nvme_path = "/local/nvme1";
              c.zero.offload_optimizer.nvme_path = "/local/nvme1";
              c.aio.block_size = 4096;
              c.aio.queue_depth = 64;
              c.device_memory_budget_gb = 12.0;
              c.host_memory_budget_gb = 100.0;
              c.ignored_keys = {"tensorboard"};
            }),
            "");
  // Another GPU index is the same backend.
  const auto on = [](const std::string& device) {
    TrainConfig c = TrainConfig::defaults();
    c.device = device;
    return run_settings(c);
  };
  EXPECT_EQ(first_difference(on("cuda:0"), on("cuda:3")), std::nullopt);
  EXPECT_EQ(first_difference(on("cuda"), on("cuda:1")), std::nullopt);
}

TEST(RunSettings, TextRoundTripAndDigest) {
  TrainConfig c = TrainConfig::defaults();
  c.checkpoint.resume = "/a path/with \"quotes\"\nand a newline";
  const RunSettings s = run_settings(c);
  const std::string text = settings_text(s);
  EXPECT_EQ(parse_settings_text(text), s);
  c.steps += 1;
  EXPECT_NE(settings_digest(text), settings_digest(settings_text(run_settings(c))));
  EXPECT_EQ(settings_digest(text), settings_digest(settings_text(s)));
  EXPECT_THROW(parse_settings_text(text.substr(0, text.size() - 1)), Error);  // cut value
  EXPECT_THROW(parse_settings_text(std::string("name") + '\0'), Error);       // no value
}

TEST(RunSettings, FirstDifferenceIsNamedWithBothValues) {
  TrainConfig a = TrainConfig::defaults(), b = a;
  a.steps = 3;
  b.steps = 4;
  b.seed = 9;  // later in the list: not the first difference
  const RunSettings sa = run_settings(a), sb = run_settings(b);
  const std::optional<size_t> at = first_difference(sa, sb);
  ASSERT_TRUE(at.has_value());
  EXPECT_EQ(describe_difference(sa, 0, sb, 1, *at),
            "tierzero.steps (--steps) is 3 on rank 0 but 4 on rank 1");
  a.optimizer.lr = 0.003;
  b = a;
  b.optimizer.lr = 0.0003;
  const RunSettings la = run_settings(a), lb = run_settings(b);
  EXPECT_EQ(describe_difference(la, 0, lb, 2, first_difference(la, lb).value()),
            "optimizer.params.lr is 0.003 on rank 0 but 0.0003 on rank 2");
  // Lists of other lengths or other names: another build.
  RunSettings shorter = sa;
  shorter.pop_back();
  EXPECT_EQ(first_difference(sa, shorter), shorter.size());
  EXPECT_NE(describe_difference(sa, 0, shorter, 1, shorter.size()).find("but not set on rank 1"),
            std::string::npos);
  RunSettings renamed = sa;
  renamed[1].name = "something else";
  EXPECT_NE(describe_difference(sa, 0, renamed, 1, 1).find("another tierzero build"),
            std::string::npos);
}

TEST(RunSettings, DataFilesComparedByNameAndSizeNotDirectory) {
  TempDir d;
  std::filesystem::create_directories(d.path + "/a");
  std::filesystem::create_directories(d.path + "/b");
  std::filesystem::create_directories(d.path + "/c");
  const std::vector<uint16_t> tokens(2000, 7), fewer(1000, 7);
  for (const char* dir : {"/a/", "/b/"}) {
    write_token_shard(d.path + dir + "train_000.bin", tokens.data(), tokens.size());
    write_token_shard(d.path + dir + "train_001.bin", tokens.data(), tokens.size());
  }
  write_token_shard(d.path + "/c/train_000.bin", tokens.data(), tokens.size());
  write_token_shard(d.path + "/c/train_001.bin", fewer.data(), fewer.size());
  const auto on = [&](const std::string& glob) {
    TrainConfig c = TrainConfig::defaults();
    c.train_data = d.path + glob;
    return run_settings(c);
  };
  EXPECT_EQ(first_difference(on("/a/train_*.bin"), on("/b/train_*.bin")), std::nullopt);
  const RunSettings a = on("/a/train_*.bin"), c = on("/c/train_*.bin");
  const std::optional<size_t> at = first_difference(a, c);
  ASSERT_TRUE(at.has_value());
  EXPECT_EQ(describe_difference(a, 0, c, 1, *at),
            "tierzero.train_data file 1 (--data) is \"train_001.bin\" (5024 bytes) on rank 0 "
            "but \"train_001.bin\" (3024 bytes) on rank 1");
  // A glob that matches nothing on one rank is a difference, not an exception.
  const RunSettings none = on("/missing/train_*.bin");
  EXPECT_EQ(describe_difference(a, 0, none, 1, first_difference(a, none).value()),
            "tierzero.train_data files (--data) is 2 on rank 0 but 0 on rank 1");
}
