// The step's host waits (the --metrics line's host_waits, host_waits.hpp): how often the training
// thread blocks on device work, per ZeRO stage on one rank, run through the real binary (each
// stage in its own process: MPI starts once per process). On a GPU each wait drains the queue the
// host had issued ahead, so the counts are held here as they stand, and a new wait in the step
// fails this test and has to be argued for: a step waits to read the loss and the gradient norm
// (docs/streams.md lists each wait and why).
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "cli_runner.hpp"
#include "scratch_dir.hpp"

namespace {

// `offload`: keys added to zero_optimization; `top`: keys added at the top level; `cli`: options
// added to the command. The most waits of any step from `from_step` on (0-based).
size_t max_host_waits(int stage, const std::string& offload, const char* what,
                      const std::string& top = "", size_t from_step = 0,
                      const std::string& cli = "") {
  const std::string d = tierzero::testing::scratch_dir("tz_waits") + "/run";  // removed below
  std::filesystem::create_directories(d);
  const std::string config = d + "/run.json", metrics = d + "/metrics.jsonl";
  std::ofstream(config) << R"({"train_micro_batch_size_per_gpu": 2, "gradient_clipping": 1.0, )"
                        << top << R"(
    "zero_optimization": {"stage": )"
                        << stage << offload << R"(},
    "tierzero": {"steps": 3, "seq_len": 16, "threads": 1, "val_batches": 0,
      "model": {"vocab_size": 257, "n_layer": 2, "n_head": 2, "n_embd": 32,
                "context_length": 16}}})";
  const tierzero::test::RunResult r =
      tierzero::test::run_tierzero("train --config " + config + " --metrics " + metrics + cli,
                                   "env ASAN_OPTIONS=detect_leaks=0 ", " 2>&1", false);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  std::ifstream in(metrics);
  std::string line, seen;
  size_t most = 0, steps = 0;
  while (std::getline(in, line)) {
    const auto waits = nlohmann::json::parse(line).at("host_waits").get<size_t>();
    if (steps >= from_step) most = std::max(most, waits);
    seen += std::to_string(waits) + " ";
    ++steps;
  }
  std::filesystem::remove_all(d);
  std::printf("%s: host waits per step %s\n", what, seen.c_str());
  EXPECT_EQ(steps, 3u);
  return most;
}

}  // namespace

TEST(HostWaits, PerStepOnOneRankStayAsCounted) {
  // The loss and the gradient norm (every unit's sum of squares summed on the device, read once).
  EXPECT_EQ(max_host_waits(0, "", "stage 0"), 2u);
  EXPECT_LE(max_host_waits(1, "", "stage 1"), 2u);
  EXPECT_LE(max_host_waits(2, "", "stage 2"), 2u);
  EXPECT_LE(max_host_waits(3, "", "stage 3"), 2u);
  // bf16 working parameters: the update's rounding into them is in stream order too.
  const std::string bf16 = R"("bf16": {"enabled": true},)";
  EXPECT_LE(max_host_waits(1, "", "stage 1, bf16", bf16), 2u);
  EXPECT_LE(max_host_waits(3, "", "stage 3, bf16", bf16), 2u);
  // Gradient accumulation: the micro-batches' losses are read together, after the last one.
  const std::string accumulate = R"("gradient_accumulation_steps": 3,)";
  EXPECT_LE(max_host_waits(3, "", "stage 3, 3 micro-batches", accumulate), 2u);
  EXPECT_LE(max_host_waits(0, "", "stage 0, 3 micro-batches", accumulate), 2u);
  const std::string host = R"(, "offload_param": {"device": "cpu"},
                              "offload_optimizer": {"device": "cpu"})";
  // The loss, and each bucket's reduced shards copied to the host (one wait per bucket, for those
  // copies alone: they run on the reducer's own stream, so the backward already queued keeps the
  // GPU busy; docs/streams.md). With micro-batches every micro-batch's buckets wait; with NVMe
  // gradient shards as well, before the host writes them there.
  EXPECT_LE(max_host_waits(3, host, "stage 3, parameters and optimizer on the host"), 5u);
  EXPECT_LE(max_host_waits(3, host, "stage 3 on the host, 3 micro-batches", accumulate), 13u);
  const std::string swap = tierzero::testing::scratch_dir("tz_waits") + "/swap";
  std::filesystem::create_directories(swap);
  const std::string nvme = R"(, "offload_param": {"device": "nvme", "nvme_path": ")" + swap +
                           R"("}, "offload_optimizer": {"device": "nvme", "nvme_path": ")" + swap +
                           R"("})";
  // From the second step: the first reads each unit's parameters from NVMe on demand, before
  // the trace that the later steps prefetch by exists.
  EXPECT_LE(max_host_waits(3, nvme, "stage 3, all state on NVMe", "", 1, " --offload-grads nvme"),
            5u);
  std::filesystem::remove_all(swap);
}
