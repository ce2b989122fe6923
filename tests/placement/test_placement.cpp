// The one home of config -> placement (train/placement_from_config): the tier names, a node's
// host budget split among its ranks, the NVMe bounce buffers' size, and that the trainer's store
// settings and the estimator's input (estimate and plan) take the same placement and staging from
// a config. The plan's default host budget and the budget it writes are checked against what the
// trainer would give each rank.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "cli_runner.hpp"
#include "scratch_dir.hpp"
#include "tierzero/core/error.hpp"
#include "tierzero/nn/gpt_config.hpp"
#include "tierzero/offload/host_pool.hpp"
#include "tierzero/train/config_bridges.hpp"
#include "tierzero/train/estimate_inputs.hpp"
#include "tierzero/train/placement_from_config.hpp"

namespace {

using namespace tierzero;
using train::TrainConfig;

constexpr size_t kGiB = size_t{1} << 30;

TEST(TierNames, DeepSpeedsAndTierZerosNamesMapToTiers) {
  EXPECT_EQ(train::tier_from_name("none", "k"), Tier::device);
  EXPECT_EQ(train::tier_from_name("device", "k"), Tier::device);
  EXPECT_EQ(train::tier_from_name("cpu", "k"), Tier::host);
  EXPECT_EQ(train::tier_from_name("host", "k"), Tier::host);
  EXPECT_EQ(train::tier_from_name("nvme", "k"), Tier::nvme);
  for (Tier t : {Tier::device, Tier::host, Tier::nvme})
    EXPECT_EQ(train::tier_from_name(train::offload_device_name(t), "k"), t);
  EXPECT_STREQ(train::offload_device_name(Tier::host), "cpu");
}

TEST(TierNames, AnUnknownNameIsAnErrorNamingTheKey) {
  for (const char* bad : {"gpu", "", "CPU", "nvme0"}) {
    try {
      train::tier_from_name(bad, "zero_optimization.offload_param.device");
      ADD_FAILURE() << "'" << bad << "' was accepted";
    } catch (const Error& e) {
      const std::string what = e.what_failed();
      std::printf("%s -> %s\n", bad, e.what());
      EXPECT_NE(what.find("zero_optimization.offload_param.device"), std::string::npos) << what;
      EXPECT_NE(what.find(std::string("\"") + bad + "\""), std::string::npos) << what;
    }
  }
  TrainConfig c = TrainConfig::defaults();
  c.offload_gradients = "none";  // gradients of an NVMe optimizer never stay on the device
  EXPECT_THROW(train::placement_from_config(c), Error);
}

TEST(HostBudget, ANodesBudgetIsSharedEquallyByItsRanks) {
  EXPECT_EQ(train::host_budget_per_rank(10 * kGiB, 4), 10 * kGiB / 4);
  EXPECT_EQ(train::host_budget_per_rank(10 * kGiB, 4), size_t{2684354560});
  EXPECT_EQ(train::host_budget_per_rank(10 * kGiB, 1), 10 * kGiB);
  EXPECT_EQ(train::host_budget_per_rank(10 * kGiB, 0), 10 * kGiB);
  TrainConfig c = TrainConfig::defaults();
  c.host_memory_budget_gb = 10.0;
  EXPECT_EQ(train::node_host_budget_bytes(c), 10 * kGiB);
  EXPECT_EQ(train::store_config_from(c).host_budget_bytes, 10 * kGiB);  // the node's
  c.host_memory_budget_gb = 0.0;  // the default: 80% of the machine
  const size_t physical =
      static_cast<size_t>(sysconf(_SC_PHYS_PAGES)) * static_cast<size_t>(sysconf(_SC_PAGESIZE));
  EXPECT_EQ(train::node_host_budget_bytes(c),
            static_cast<size_t>(0.8 * static_cast<double>(physical)));
}

TEST(NvmeStaging, BounceBuffersAreQueueDepthPoolRoundedBlocks) {
  train::AioConfig aio;
  aio.queue_depth = 16;
  aio.block_size = 262144;
  EXPECT_EQ(train::nvme_bounce_bytes(aio), 16 * offload::HostPool::round_size(262144));
  aio.queue_depth = 3;
  aio.block_size = 12288;  // not a size class: rounded as the pool rounds it
  const size_t rounded = offload::HostPool::round_size(12288);
  EXPECT_GE(rounded, size_t{12288});
  EXPECT_EQ(train::nvme_bounce_bytes(aio), 3 * rounded);
  TrainConfig c = TrainConfig::defaults();
  c.aio = aio;
  c.zero.offload_param.buffer_count = 7;
  c.zero.offload_optimizer.buffer_count = 3;
  const train::NvmeStaging s = train::nvme_staging_from(c);
  EXPECT_EQ(s.bounce_bytes, 3 * rounded);
  EXPECT_EQ(s.param_buffers, 7u);
  EXPECT_EQ(s.optimizer_buffers, 3u);
}

void expect_same_placement(const zero::PlacementConfig& a, const zero::PlacementConfig& b) {
  EXPECT_EQ(a.param.tier, b.param.tier);
  EXPECT_EQ(a.param.ratio, b.param.ratio);
  EXPECT_EQ(a.optimizer.tier, b.optimizer.tier);
  EXPECT_EQ(a.optimizer.ratio, b.optimizer.ratio);
  EXPECT_EQ(a.nvme_chunk_elems, b.nvme_chunk_elems);
  EXPECT_EQ(a.working, b.working);
  EXPECT_EQ(a.nvme_grads, b.nvme_grads);
}

TEST(OneHome, TrainerAndEstimatorTakeTheSamePlacementFromAConfig) {
  const std::vector<std::string> configs = {
      "{}",
      R"({"zero_optimization": {"stage": 3, "offload_param": {"device": "cpu", "ratio": 0.5},
          "offload_optimizer": {"device": "cpu"}}})",
      R"({"bf16": {"enabled": true}, "zero_optimization": {"stage": 3,
          "offload_param": {"device": "nvme", "nvme_path": "/tmp/a", "buffer_count": 3},
          "offload_optimizer": {"device": "nvme", "nvme_path": "/tmp/a", "buffer_count": 6,
                                "buffer_size": 1000000, "ratio": 0.75}},
          "aio": {"block_size": 262144, "queue_depth": 16},
          "tierzero": {"offload_gradients": "nvme"}})",
      R"({"zero_optimization": {"stage": 1, "cpu_offload": true}})",
      R"({"fp16": {"enabled": true}, "zero_optimization": {"stage": 2,
          "offload_optimizer": {"device": "nvme", "nvme_path": "/tmp/b"}}})"};
  const nn::GPTConfig model = nn::GPTConfig::preset("gpt2");
  for (const std::string& text : configs) {
    SCOPED_TRACE(text);
    const TrainConfig c = TrainConfig::parse(text, "test");
    const zero::StoreConfig store = train::store_config_from(c);
    const profile::EstimateInput est =
        train::run_estimate_input(c, model, profile::WorldLayout{}, 1, 64, false, false);
    expect_same_placement(store.placement, est.placement);
    expect_same_placement(store.placement, train::placement_from_config(c));
    EXPECT_EQ(store.stage, est.stage);
    EXPECT_EQ(store.nvme_read_buffers, est.param_staging_buffers);
    EXPECT_EQ(store.optimizer_swap_buffers, est.staging_buffer_count);
    EXPECT_EQ(est.nvme_bounce_bytes, train::nvme_bounce_bytes(c.aio));
    if (!store.nvme.directories.empty()) {  // the store's engine has those bounce buffers
      EXPECT_EQ(est.nvme_bounce_bytes,
                store.nvme.queue_depth * offload::HostPool::round_size(store.nvme.block_size));
    }
    EXPECT_EQ(store.param_persistence_threshold, est.param_persistence_threshold);
    EXPECT_EQ(store.reduce_bucket_elems, est.reduce_bucket_elems);
    EXPECT_EQ(store.reduce_dtype, est.reduce_dtype);
  }
}

// The trainer refuses gradients on NVMe unless the optimizer is there too at stage 2 or 3, and so
// does the estimator on the same config.
TEST(OneHome, TheEstimatorRefusesWhatTheTrainerRefuses) {
  for (const char* text : {
           R"({"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}},
               "tierzero": {"offload_gradients": "nvme"}})",
           R"({"zero_optimization": {"stage": 1,
                 "offload_optimizer": {"device": "nvme", "nvme_path": "/tmp/x"}},
               "tierzero": {"offload_gradients": "nvme"}})"}) {
    SCOPED_TRACE(text);
    const TrainConfig c = TrainConfig::parse(text, "test");
    EXPECT_THROW(train::check_offload_gradients(c), Error);
    EXPECT_THROW(
        profile::estimate(train::run_estimate_input(c, nn::GPTConfig::preset("gpt2"),
                                                    profile::WorldLayout{}, 1, 64, false, false)),
        Error);
  }
  TrainConfig ok = TrainConfig::parse(
      R"({"zero_optimization": {"stage": 2,
            "offload_optimizer": {"device": "nvme", "nvme_path": "/tmp/x"}},
          "tierzero": {"offload_gradients": "nvme"}})",
      "test");
  EXPECT_NO_THROW(train::check_offload_gradients(ok));
  EXPECT_NO_THROW(profile::estimate(train::run_estimate_input(
      ok, nn::GPTConfig::preset("gpt2"), profile::WorldLayout{}, 1, 64, false, false)));
}

std::string temp_dir() {
  return tierzero::testing::scratch_dir("tz_placement");
}

// plan used to assume each rank had the whole machine's memory, while the trainer gives a rank
// its share of 80% of it; and the budget it fitted never reached the config it wrote.
TEST(PlanHostBudget, IsWhatTheTrainerGivesEachRank) {
  const std::string cal = temp_dir() + "/cal.json";
  FILE* f = std::fopen(cal.c_str(), "w");
  ASSERT_NE(f, nullptr);
  std::fputs(R"({"gemm_gflops": 100, "copy_gbps": 10, "adam_cpu_gbps": 10})", f);
  std::fclose(f);
  const std::string model =
      "plan --layers 2 --heads 4 --channels 64 --vocab 257 --context 32 --device-mem 1GiB "
      "--device cpu --calibration " +
      cal;
  const test::RunResult r = test::run_tierzero(model + " --ranks 4", "", " 2>&1", true);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const size_t share =
      train::host_budget_per_rank(train::node_host_budget_bytes(TrainConfig::defaults()), 4);
  EXPECT_NE(r.output.find(", host " + format_bytes(share) + ","), std::string::npos)
      << "expected the host budget " << format_bytes(share);

  const std::string out = temp_dir() + "/plan.json";
  const test::RunResult w =
      test::run_tierzero(model + " --ranks 4 --ranks-per-node 2 --host-mem 1GiB -o " + out);
  ASSERT_EQ(w.exit_code, 0) << w.output;
  const TrainConfig planned = TrainConfig::load(out);
  EXPECT_EQ(planned.host_memory_budget_gb, 2.0);  // the node's: two ranks of 1 GiB
  EXPECT_EQ(train::host_budget_per_rank(train::store_config_from(planned).host_budget_bytes, 2),
            kGiB);
  std::filesystem::remove_all(temp_dir());
}

}  // namespace
