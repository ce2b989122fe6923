// `tierzero estimate` and `tierzero plan` end to end with the real binary: the JSON's shape and
// its agreement with the library, the human table, the plan's config file loading as a
// TrainConfig, and bad input giving one clear error line.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>

#include "cli_runner.hpp"
#include "scratch_dir.hpp"
#include "tierzero/train/train_config.hpp"

namespace {

using tierzero::test::RunResult;

// stderr goes to the output too unless `stdout_only`.
RunResult tierzero_cli(const std::string& args, bool stdout_only = false) {
  return tierzero::test::run_tierzero(args, "", stdout_only ? " 2>/dev/null" : " 2>&1", false);
}

std::string dir() {
  return tierzero::testing::scratch_dir("tz_estimate_cli");
}

TEST(EstimateCli, JsonForGpt2Stage0) {
  const RunResult r = tierzero_cli("estimate --model gpt2 --micro-batch 1 --seq 64 --json", true);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json j = nlohmann::json::parse(r.output);
  EXPECT_EQ(j["parameters"], 124475904u);
  const double psi = 124475904.0;
  const auto& dev = j["tiers"]["device"];
  const double state =
      dev["param"].get<double>() + dev["grad"].get<double>() + dev["optimizer"].get<double>();
  std::printf("stage 0 model state %.0f bytes = %.4f bytes per parameter\n", state, state / psi);
  EXPECT_NEAR(state / psi, 16.0, 0.16);
  EXPECT_EQ(j["tiers"]["host"]["param"], 0u);
  EXPECT_GT(j["buffers"]["device"]["activation"].get<size_t>(), 0u);
  ASSERT_EQ(j["table"].size(), 20u);
  EXPECT_EQ(j["table"][1]["valid"], false);
  EXPECT_NE(j["table"][1]["reason"].get<std::string>().find("n/a"), std::string::npos);
  EXPECT_EQ(j["working_dtype"], "fp32");
  EXPECT_EQ(j["compute_dtype"], "fp32");
}

// The report says which dtypes its bytes assume: bf16 working parameters on CUDA compute in bf16
// (tierzero.compute_dtype auto), with fewer activation bytes than the same run computed in fp32.
TEST(EstimateCli, SaysTheWorkingAndComputeDtypes) {
  const auto estimate = [](const std::string& compute, bool json) {
    const std::string cfg = dir() + "/bf16_" + compute + ".json";
    FILE* f = std::fopen(cfg.c_str(), "w");
    EXPECT_NE(f, nullptr);
    std::fprintf(f,
                 R"({"bf16": {"enabled": true}, "zero_optimization": {"stage": 3},
                     "tierzero": {"device": "cuda", "compute_dtype": "%s"}})",
                 compute.c_str());
    std::fclose(f);
    return tierzero_cli(
        "estimate --model gpt2 --micro-batch 2 --seq 128 --config " + cfg + (json ? " --json" : ""),
        json);
  };
  const RunResult text = estimate("auto", false);
  ASSERT_EQ(text.exit_code, 0) << text.output;
  EXPECT_NE(text.output.find("precision working parameters bf16, compute bf16"), std::string::npos)
      << text.output;
  const nlohmann::json half = nlohmann::json::parse(estimate("auto", true).output);
  const nlohmann::json wide = nlohmann::json::parse(estimate("fp32", true).output);
  EXPECT_EQ(half["working_dtype"], "bf16");
  EXPECT_EQ(half["compute_dtype"], "bf16");
  EXPECT_EQ(wide["compute_dtype"], "fp32");
  const size_t a16 = half["buffers"]["device"]["activation"].get<size_t>();
  const size_t a32 = wide["buffers"]["device"]["activation"].get<size_t>();
  std::printf("activation bytes: bf16 compute %zu, fp32 compute %zu\n", a16, a32);
  EXPECT_LT(a16, a32);
}

// --precision and --device say without a config what the config's bf16 / fp16 and device keys
// say: the same estimate to the byte, and they override a config's.
TEST(EstimateCli, PrecisionAndDeviceFlagsAreTheConfigsKeys) {
  const std::string cfg = dir() + "/bf16_cuda.json";
  std::ofstream(cfg) << R"({"bf16": {"enabled": true}, "zero_optimization": {"stage": 3},
                           "tierzero": {"device": "cuda"}})";
  const std::string base = "estimate --model gpt2 --micro-batch 2 --seq 128 --json";
  const auto totals = [&](const std::string& args) {
    const RunResult r = tierzero_cli(base + " " + args, true);
    EXPECT_EQ(r.exit_code, 0) << args << ": " << r.output;
    const nlohmann::json j = nlohmann::json::parse(r.output);
    return j["working_dtype"].get<std::string>() + " " + j["compute_dtype"].get<std::string>() +
           " " + j["totals"].dump();
  };
  const std::string from_config = totals("--config " + cfg);
  const std::string from_flags = totals("--stage 3 --precision bf16 --device cuda");
  std::printf("config: %s\nflags:  %s\n", from_config.c_str(), from_flags.c_str());
  EXPECT_EQ(from_flags, from_config);
  EXPECT_EQ(from_flags.rfind("bf16 bf16 ", 0), 0u) << from_flags;
  EXPECT_EQ(totals("--config " + cfg + " --device cpu").rfind("bf16 fp32 ", 0), 0u);
  EXPECT_EQ(totals("--config " + cfg + " --precision fp32").rfind("fp32 fp32 ", 0), 0u);
  for (const char* device : {"tpu", "cuda:", "cuda:x", "cudax"}) {
    const RunResult bad = tierzero_cli(base + " --device " + device);
    EXPECT_EQ(bad.exit_code, 1) << bad.output;
    EXPECT_NE(bad.output.find("device '" + std::string(device) + "' is not cpu, cuda or cuda:N"),
              std::string::npos)
        << bad.output;
  }
  EXPECT_EQ(tierzero_cli(base + " --device cuda:1").exit_code, 0);
  // A config's 16-bit compute_dtype is its working type's, and follows --precision.
  const std::string explicit16 = dir() + "/bf16_compute_bf16.json";
  std::ofstream(explicit16) << R"({"bf16": {"enabled": true}, "tierzero": {"device": "cuda",
                                   "compute_dtype": "bf16"}})";
  EXPECT_EQ(totals("--config " + explicit16 + " --precision fp32").rfind("fp32 fp32 ", 0), 0u);
  EXPECT_EQ(totals("--config " + explicit16 + " --precision fp16").rfind("fp16 fp16 ", 0), 0u);
}

TEST(EstimateCli, Stage3OffloadAndLayout) {
  const RunResult r = tierzero_cli(
      "estimate --model gpt2 --ranks 8 --tp 2 --stage 3 --offload-param cpu "
      "--offload-optimizer cpu --micro-batch 2 --seq 128 --checkpointing --json",
      true);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json j = nlohmann::json::parse(r.output);
  EXPECT_EQ(j["world"]["dp"], 4);
  EXPECT_EQ(j["world"]["tp"], 2);
  EXPECT_EQ(j["checkpointing"], true);
  EXPECT_EQ(j["tiers"]["device"]["grad"], 0u);
  EXPECT_GT(j["tiers"]["host"]["optimizer"].get<size_t>(), 0u);
  EXPECT_GT(j["tiers"]["host"]["param"].get<size_t>(), 0u);
  EXPECT_GT(j["buffers"]["device"]["param"].get<size_t>(), 0u);  // live gathers
}

TEST(EstimateCli, PipelineStagesHoldTheirBlocksAndTheSchedulesMicroBatches) {
  // gpt2 in 4 stages: the worst rank holds about a quarter of the blocks plus the embeddings
  // (first stage, or the tied copy on the last). Its activations are its blocks' times the
  // micro-batches its schedule keeps in flight: GPipe all 8 of the step, 1F1B at most p = 4.
  const std::string cfg = dir() + "/pp.json";
  FILE* f = std::fopen(cfg.c_str(), "w");
  ASSERT_NE(f, nullptr);
  std::fputs(R"({"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 8,
    "tierzero": {"seq_len": 64, "pipeline_parallel": 4}})",
             f);
  std::fclose(f);
  const std::string base = "estimate --model gpt2 --micro-batch 1 --seq 64 --json --config " + cfg;
  const RunResult one = tierzero_cli(base + " --pp 1", true);
  const RunResult pp = tierzero_cli(base, true);
  ASSERT_EQ(one.exit_code, 0) << one.output;
  ASSERT_EQ(pp.exit_code, 0) << pp.output;
  const nlohmann::json j1 = nlohmann::json::parse(one.output);
  const nlohmann::json j4 = nlohmann::json::parse(pp.output);
  EXPECT_EQ(j4["world"]["pp"], 4);
  const auto p1 = j1["parameters"].get<double>(), p4 = j4["parameters"].get<double>();
  std::printf("parameters: whole %.0f, worst of 4 stages %.0f (%.3f)\n", p1, p4, p4 / p1);
  // 12 blocks of 7.1 M and 38.6 M of embeddings: a 3-block stage with them is ~0.48 of gpt2.
  EXPECT_GT(p4 / p1, 0.25);
  EXPECT_LT(p4 / p1, 0.55);

  std::string text;
  {
    std::ifstream in(cfg);
    text.assign(std::istreambuf_iterator<char>(in), {});
  }
  // The same config with more tierzero keys, estimated.
  const auto estimate_with = [&](const std::string& name, const std::string& keys) {
    std::string config = text;
    config.insert(config.find("\"pipeline_parallel\""), keys);
    const std::string path = dir() + "/" + name + ".json";
    {
      std::ofstream out(path);
      out << config;
    }
    const RunResult r = tierzero_cli(
        "estimate --model gpt2 --micro-batch 1 --seq 64 --json --config " + path, true);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return nlohmann::json::parse(r.output);
  };
  const nlohmann::json jg = estimate_with("pp_gpipe", "\"pipeline_schedule\": \"gpipe\", ");
  const auto a1 = j1["buffers"]["device"]["activation"].get<double>();
  const auto a4 = j4["buffers"]["device"]["activation"].get<double>();
  const auto ag = jg["buffers"]["device"]["activation"].get<double>();
  std::printf("activations: one rank %.0f, 1f1b worst stage %.0f, gpipe worst stage %.0f\n", a1, a4,
              ag);
  EXPECT_GT(ag, a4);
  EXPECT_NE(a4, a1);

  // Interleaved, 2 chunks per rank (8 virtual stages of 1-2 blocks): each chunk keeps its own
  // micro-batches and scratch, more than 1F1B's one chunk holds, fewer than GPipe's all 8.
  const nlohmann::json ji = estimate_with(
      "pp_interleaved", "\"pipeline_schedule\": \"interleaved\", \"pipeline_virtual_stages\": 2, ");
  const auto ai = ji["buffers"]["device"]["activation"].get<double>();
  const auto pi = ji["parameters"].get<double>();
  std::printf("interleaved (v 2): activations %.0f, parameters of the largest rank %.0f\n", ai, pi);
  EXPECT_GT(ai, a4);
  EXPECT_LT(ai, ag);
  EXPECT_GT(pi / p1, 0.25);
  EXPECT_LT(pi / p1, 0.55);

  const RunResult bad = tierzero_cli("estimate --model gpt2 --pp 13 --json");
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.output.find("pipeline_parallel 13 exceeds the model's 12"), std::string::npos)
      << bad.output;
}

TEST(EstimateCli, HumanTableAndConfigFile) {
  const std::string cfg = dir() + "/ds.json";
  FILE* f = std::fopen(cfg.c_str(), "w");
  ASSERT_NE(f, nullptr);
  std::fputs(R"({"train_micro_batch_size_per_gpu": 2,
    "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}},
    "tierzero": {"seq_len": 32, "model": {"n_layer": 2, "n_head": 2, "n_embd": 64,
                                          "context_length": 32}}})",
             f);
  std::fclose(f);
  const RunResult r = tierzero_cli("estimate --config " + cfg + " --ranks 2");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::printf("%s", r.output.c_str());
  EXPECT_NE(r.output.find("stage 2, offload_param none, offload_optimizer cpu"), std::string::npos);
  EXPECT_NE(r.output.find("n/a: "), std::string::npos);
  EXPECT_NE(r.output.find("host"), std::string::npos);
}

TEST(EstimateCli, BadInputIsOneClearError) {
  RunResult r = tierzero_cli("estimate --model gpt2 --stage 1 --offload-param cpu");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("tierzero: error: "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("needs stage 3"), std::string::npos) << r.output;
  r = tierzero_cli("estimate --model gpt5");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("unknown model preset"), std::string::npos) << r.output;
  r = tierzero_cli("estimate --ranks 6 --tp 4");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("not a multiple"), std::string::npos) << r.output;
}

TEST(PlanCli, WritesALoadableConfigThatFits) {
  const std::string cal = dir() + "/cal.json";
  FILE* f = std::fopen(cal.c_str(), "w");
  ASSERT_NE(f, nullptr);
  std::fputs(R"({"gemm_gflops": 100, "copy_gbps": 10, "adam_cpu_gbps": 10})", f);
  std::fclose(f);
  const std::string out = dir() + "/plan.json";
  const RunResult r = tierzero_cli(
      "plan --model gpt2 --device-mem 2GiB --host-mem 16GiB --ranks 1 "
      "--seq 256 --global-batch 8 --calibration " +
      cal + " -o " + out);
  std::printf("%s", r.output.c_str());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("chosen"), std::string::npos);
  EXPECT_NE(r.output.find("would not fit"), std::string::npos);
  const tierzero::train::TrainConfig c = tierzero::train::TrainConfig::load(out);
  EXPECT_EQ(c.model.n_layer, 12);
  EXPECT_EQ(c.seq_len, 256);
  EXPECT_EQ(c.micro_batch_size * c.gradient_accumulation_steps, 8);
  EXPECT_DOUBLE_EQ(c.device_memory_budget_gb, 2.0);
}

// The written config carries the recompute mode the planner chose, and the search reaches all
// three: a 4-layer C 256 model at T 1024 (activations dominate) chooses full recompute at a small
// device budget, none at a roomy one, and just below the smallest budget at which it chooses none
// (bisected), selective recompute — no recompute no longer fits, and selective runs no GEMM again.
TEST(PlanCli, WritesTheChosenRecomputeMode) {
  const std::string cal = dir() + "/cal_recompute.json";
  FILE* f = std::fopen(cal.c_str(), "w");
  ASSERT_NE(f, nullptr);
  std::fputs(R"({"gemm_gflops": 100, "copy_gbps": 10, "adam_cpu_gbps": 10})", f);
  std::fclose(f);
  const std::string out = dir() + "/plan_recompute.json";
  auto chosen = [&](size_t device_bytes, const std::string& only = "") {
    std::filesystem::remove(out);
    const RunResult r = tierzero_cli(
        "plan --layers 4 --heads 4 --channels 256 --vocab 256 --context 1024 --seq 1024 "
        "--global-batch 1 --host-mem 1GiB --ranks 1 --calibration " +
        cal + " --device-mem " + std::to_string(device_bytes) + " -o " + out +
        (only.empty() ? "" : " --recompute " + only));
    EXPECT_EQ(r.exit_code, 0) << r.output;
    const tierzero::train::TrainConfig c = tierzero::train::TrainConfig::load(out);
    // The mode the output names is the one written, and the config is consistent.
    const size_t at = r.output.find("chosen ");
    const std::string line = r.output.substr(at, r.output.find('\n', at) - at);
    const std::string said = line.find("selective recompute") != std::string::npos ? "selective"
                             : line.find("no recompute") != std::string::npos      ? "none"
                                                                                   : "full";
    EXPECT_EQ(c.recompute, said) << line;
    EXPECT_EQ(c.activation_checkpointing, c.recompute == "full");
    return c.recompute;
  };
  size_t lo = size_t{90} << 20, hi = size_t{240} << 20;
  ASSERT_EQ(chosen(lo), "full");
  ASSERT_EQ(chosen(hi), "none");
  while (hi - lo > 4096) {  // chosen(hi) is none, chosen(lo) is not
    const size_t mid = lo + (hi - lo) / 2;
    (chosen(mid) == "none" ? hi : lo) = mid;
  }
  std::printf("no recompute chosen from %zu B of device memory; at %zu B: %s\n", hi, lo,
              chosen(lo).c_str());
  EXPECT_EQ(chosen(lo), "selective");
  // --recompute holds the search to one mode, even where another would be chosen.
  EXPECT_EQ(chosen(hi, "selective"), "selective");
  EXPECT_EQ(chosen(hi, "full"), "full");
}

// --precision plans the working parameters' type and writes it; the compute dtype follows the
// device as `tierzero train` picks it (16-bit on CUDA, fp32 on the CPU). The plan's device bytes
// for its choice are what `tierzero estimate` counts for the config it wrote, in each precision
// (on CUDA the activations and gathered units in 16 bits), and 16-bit working parameters let a
// tight device budget take a larger micro-batch than fp32's.
TEST(PlanCli, PlansAndWritesTheAskedPrecision) {
  const std::string cal = dir() + "/cal_precision.json";
  std::ofstream(cal) << R"({"gemm_gflops": 100, "copy_gbps": 10, "adam_cpu_gbps": 10})";
  const std::string out = dir() + "/plan_precision.json";
  struct Case {
    const char *device, *precision, *compute;
  };
  std::map<std::string, size_t> micro;
  for (const Case& k :
       {Case{"cpu", "fp32", "fp32"}, Case{"cpu", "bf16", "fp32"}, Case{"cuda", "fp32", "fp32"},
        Case{"cuda", "bf16", "bf16"}, Case{"cuda", "fp16", "fp16"}}) {
    const std::string what = std::string(k.device) + " " + k.precision;
    std::filesystem::remove(out);
    const RunResult r = tierzero_cli(
        "plan --model gpt2 --seq 512 --global-batch 16 --device-mem 3GiB --host-mem 8GiB "
        "--recompute none --calibration " +
            cal + " --device " + k.device + " --precision " + k.precision + " --json -o " + out,
        true);
    ASSERT_EQ(r.exit_code, 0) << what << ": " << r.output;
    const nlohmann::json j = nlohmann::json::parse(r.output);
    EXPECT_EQ(j["precision"]["working"], k.precision) << what;
    EXPECT_EQ(j["precision"]["compute"], k.compute) << what;
    const nlohmann::json config = nlohmann::json::parse(std::ifstream(out));
    EXPECT_EQ(config.value("/bf16/enabled"_json_pointer, false), std::string(k.precision) == "bf16")
        << what;
    EXPECT_EQ(config.value("/fp16/enabled"_json_pointer, false), std::string(k.precision) == "fp16")
        << what;
    const RunResult e = tierzero_cli("estimate --config " + out + " --json", true);
    ASSERT_EQ(e.exit_code, 0) << what << ": " << e.output;
    const nlohmann::json est = nlohmann::json::parse(e.output);
    EXPECT_EQ(est["compute_dtype"], k.compute) << what;
    const size_t planned = j["chosen"]["tiers"]["device"]["need"].get<size_t>();
    std::printf("%-10s chosen %s: device %zu B planned, %zu B estimated\n", what.c_str(),
                j["chosen"]["describe"].get<std::string>().c_str(), planned,
                est["totals"]["device"].get<size_t>());
    EXPECT_EQ(planned, est["totals"]["device"].get<size_t>()) << what;
    micro[what] = j["chosen"]["micro_batch"].get<size_t>();
  }
  EXPECT_GT(micro["cuda bf16"], micro["cuda fp32"]);
  const RunResult bad = tierzero_cli("plan --model gpt2 --device-mem 3GiB --precision fp8");
  EXPECT_NE(bad.exit_code, 0) << bad.output;
  EXPECT_NE(bad.output.find("--precision"), std::string::npos) << bad.output;
  // A device no run has is refused before anything is written, not written into the config.
  const RunResult tpu =
      tierzero_cli("plan --model gpt2 --device-mem 3GiB --calibration " + cal + " --device tpu");
  EXPECT_EQ(tpu.exit_code, 1) << tpu.output;
  EXPECT_NE(tpu.output.find("device 'tpu' is not cpu, cuda or cuda:N"), std::string::npos)
      << tpu.output;
}

TEST(PlanCli, NothingFitsIsOneClearError) {
  const RunResult r = tierzero_cli("plan --model gpt2-xl --device-mem 64MiB --host-mem 64MiB");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("tierzero: error: no configuration"), std::string::npos) << r.output;
}

}  // namespace

// Shapes whose bytes pass 64 bits are refused, not summed into a wrapped total (a model-state
// total of 686701.9 TiB beside device rows of millions of TiB each).
TEST(EstimateCli, BeyondSixtyFourBitsIsAnError) {
  const RunResult r = tierzero_cli(
      "estimate --layers 100000 --heads 100000 --channels 1000000 --vocab 100000000 --context "
      "10000000 --micro-batch 1073741824 --seq 10000000");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("beyond what the estimate counts"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("TiB"), std::string::npos) << r.output;
  // GPT-2 XL is nowhere near it.
  EXPECT_EQ(tierzero_cli("estimate --model gpt2-xl --micro-batch 8 --seq 1024").exit_code, 0);
}
