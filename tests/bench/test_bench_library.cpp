// The benchmarks as a library: each runs in this process at a tiny size, and its result struct
// and JSON line must agree with each other and with what was asked. Rates are only checked to be
// measured (positive and finite): benchmarks are not timed tests.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "tierzero/bench/adam.hpp"
#include "tierzero/bench/crc.hpp"
#include "tierzero/bench/io.hpp"
#include "tierzero/bench/model_products.hpp"
#include "tierzero/bench/results.hpp"
#include "tierzero/bench/train_step.hpp"
#include "tierzero/core/error.hpp"
#include "tierzero/device/device_allocator.hpp"
#include "tierzero/nn/gpt.hpp"
#include "tierzero/offload/crc32c.hpp"

namespace tierzero::bench {
namespace {

bool measured(double rate) {
  return std::isfinite(rate) && rate > 0.0;
}

// The fields every result line starts with, in order, and a finite positive value and baseline.
void expect_common_fields(const nlohmann::ordered_json& j, const std::string& name) {
  const char* keys[] = {"bench", "value", "unit", "baseline", "baseline_value", "ratio"};
  auto it = j.begin();
  for (const char* key : keys) {
    ASSERT_NE(it, j.end()) << j.dump();
    EXPECT_EQ(it.key(), key) << j.dump();
    ++it;
  }
  EXPECT_EQ(j["bench"], name);
  ASSERT_TRUE(j["value"].is_number()) << j.dump();
  ASSERT_TRUE(j["baseline_value"].is_number()) << j.dump();
  EXPECT_TRUE(measured(j["value"].get<double>())) << j.dump();
  EXPECT_TRUE(measured(j["baseline_value"].get<double>())) << j.dump();
  EXPECT_TRUE(measured(j["ratio"].get<double>())) << j.dump();
  // The line as printed parses back to the same object.
  EXPECT_EQ(nlohmann::ordered_json::parse(j.dump()), j);
}

TEST(BenchLibrary, CrcCountsTheBytesAskedAndAgreesWithTheChecksum) {
  if (!offload::crc32c_isal_available()) GTEST_SKIP() << "built without ISA-L: no baseline";
  BenchCrcOptions o;
  o.mib = 2;
  o.repeats = 2;
  const BenchCrcResult r = bench_crc(o);
  EXPECT_EQ(r.bytes, size_t{2} << 20);
  EXPECT_EQ(r.repeats, 2);
  EXPECT_FALSE(r.kernel.empty());
  EXPECT_TRUE(measured(r.gbps));
  EXPECT_TRUE(measured(r.isal_gbps));  // the ceiling was measured
  EXPECT_GE(r.gbps, r.median_gbps);    // best run >= median run
  EXPECT_GE(r.isal_gbps, r.isal_median_gbps);
  ASSERT_EQ(r.report.results.size(), 1u);
  EXPECT_TRUE(r.report.passed);
  const nlohmann::ordered_json& j = r.report.results[0];
  expect_common_fields(j, "crc32c");
  EXPECT_EQ(j["bytes"], r.bytes);
  EXPECT_EQ(j["repeats"], r.repeats);
  EXPECT_EQ(j["crc"], r.crc);
  EXPECT_EQ(j["kernel"], r.kernel);
  EXPECT_EQ(j["value"], round_to(r.gbps, 3));
  EXPECT_EQ(j["baseline_value"], round_to(r.isal_gbps, 3));
}

TEST(BenchLibrary, AdamUpdatesTheParamsAskedAndPassesItsCheck) {
  BenchAdamOptions o;
  o.params = 100003;  // not a multiple of the threads' blocks
  o.threads = 2;
  o.repeats = 2;
  o.peer = "none";
  const BenchAdamResult r = bench_adam(o);
  EXPECT_EQ(r.params, o.params);
  EXPECT_EQ(r.threads, 2);
  EXPECT_FALSE(r.isa.empty());
  EXPECT_TRUE(measured(r.step_s));
  EXPECT_TRUE(measured(r.triad_s));
  EXPECT_TRUE(measured(r.adam_gbps));
  EXPECT_TRUE(measured(r.triad_gbps));  // the ceiling was measured
  // The rates are the bytes counted per parameter (30) and per element (12) over the times.
  EXPECT_NEAR(r.adam_gbps, 30.0 * 100003 / r.step_s / 1e9, 1e-9 * r.adam_gbps);
  EXPECT_NEAR(r.triad_gbps, 12.0 * 100003 / r.triad_s / 1e9, 1e-9 * r.triad_gbps);
  EXPECT_GE(r.checked_elements, size_t{4099});
  EXPECT_TRUE(r.report.passed);
  EXPECT_EQ(r.report.exit_code(), 0);
  ASSERT_EQ(r.report.results.size(), 1u);
  const nlohmann::ordered_json& j = r.report.results[0];
  expect_common_fields(j, "adam.cpu");
  EXPECT_EQ(j["params"], o.params);
  EXPECT_EQ(j["bytes_per_param"], 30);
  EXPECT_EQ(j["checked"], true);
  EXPECT_EQ(j["value"], round_to(r.adam_gbps, 3));
  EXPECT_EQ(j["baseline_value"], round_to(r.triad_gbps, 3));
}

bool python_has_torch() {
  return std::system("python3 -c 'import torch' > /dev/null 2>&1") == 0;
}

TEST(BenchLibrary, AdamMeasuresTorchFusedAdamWAtEqualBytes) {
  if (!python_has_torch()) GTEST_SKIP() << "python3 cannot import torch (the peer)";
  BenchAdamOptions o;
  o.params = 100003;
  o.threads = 2;
  o.repeats = 2;
  o.peer = "torch";
  const BenchAdamResult r = bench_adam(o);
  EXPECT_TRUE(r.report.passed);  // ours bitwise, torch's parameters finite and changed
  EXPECT_TRUE(measured(r.fp32_step_s));
  EXPECT_TRUE(measured(r.peer_step_s));
  EXPECT_NE(r.peer.find("torch"), std::string::npos) << r.peer;
  ASSERT_EQ(r.report.results.size(), 2u);
  const nlohmann::ordered_json& j = r.report.results[1];
  expect_common_fields(j, "adam.cpu_vs_torch");
  EXPECT_EQ(j["bytes_per_param"], 28);
  EXPECT_EQ(j["checked"], true);
  EXPECT_EQ(j["value"], round_to(100003 / r.fp32_step_s / 1e9, 4));
  EXPECT_EQ(j["baseline_value"], round_to(100003 / r.peer_step_s / 1e9, 4));
  std::printf("ours fp32 %.3f ms, torch fused %.3f ms\n", r.fp32_step_s * 1e3, r.peer_step_s * 1e3);
}

TEST(BenchLibrary, AdamGoesOnWithoutAPeerThatCannotRunUnlessItWasRequired) {
  BenchAdamOptions o;
  o.params = 4099;
  o.threads = 1;
  o.repeats = 1;
  o.python = "/bin/false";  // starts, then ends before saying it is ready
  const BenchAdamResult r = bench_adam(o);
  EXPECT_TRUE(r.report.passed);
  EXPECT_EQ(r.report.results.size(), 1u);
  EXPECT_TRUE(r.peer.empty());
  o.peer = "torch";
  o.python = "/nonexistent/python3";
  try {
    bench_adam(o);
    ADD_FAILURE() << "a required peer that cannot start was not an error";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("torch peer cannot run"), std::string::npos) << what;
    EXPECT_NE(what.find("/nonexistent/python3"), std::string::npos) << what;
  }
}

bool fio_on_path() {
  return std::system("fio --version > /dev/null 2>&1") == 0;
}

TEST(BenchLibrary, IoMovesTheBytesAskedAndMeasuresFio) {
  if (!fio_on_path()) GTEST_SKIP() << "no fio on PATH: the io benchmark's baseline";
  BenchIoOptions o;  // dir left empty: the benchmark picks /var/tmp or . on a real disk
  o.size = size_t{4} << 20;
  o.block = size_t{1} << 20;
  o.queue_depth = 4;
  o.repeats = 1;
  o.stream_buffers = 2;
  o.stream_buffer_bytes = size_t{1} << 20;
  const BenchIoResult r = bench_io(o);
  EXPECT_EQ(r.bytes, o.size);
  for (double rate : {r.write_Bps, r.read_Bps, r.stream_Bps, r.fio_write_Bps, r.fio_read_Bps})
    EXPECT_TRUE(measured(rate)) << rate;
  // The engine wrote the swap once per repeat, the streamed tensor once to start and once per
  // repeat (write-back), and read both once per repeat: nothing more, nothing lost.
  EXPECT_EQ(r.engine_bytes_written, (2 * o.repeats + 1) * o.size);
  EXPECT_EQ(r.engine_bytes_read, 2 * o.repeats * o.size);
  // The raw engine (checksums off) moved its own swap once each way per repeat.
  for (double rate : {r.raw_write_Bps, r.raw_read_Bps}) EXPECT_TRUE(measured(rate)) << rate;
  EXPECT_EQ(r.raw_engine_bytes_written, o.repeats * o.size);
  EXPECT_EQ(r.raw_engine_bytes_read, o.repeats * o.size);
  ASSERT_EQ(r.report.results.size(), 5u);
  const char* names[] = {"io.write", "io.read", "io.stream", "io.write_raw", "io.read_raw"};
  for (size_t i = 0; i < 5; ++i) {
    const nlohmann::ordered_json& j = r.report.results[i];
    expect_common_fields(j, names[i]);
    EXPECT_EQ(j["size"], o.size);
    EXPECT_EQ(j["block"], o.block);
    EXPECT_EQ(j["direct"], r.direct);
  }
  EXPECT_EQ(r.report.results[0]["value"], round_to(r.write_Bps / 1e9, 4));
  EXPECT_EQ(r.report.results[1]["baseline_value"], round_to(r.fio_read_Bps / 1e9, 4));
  EXPECT_EQ(r.report.results[4]["value"], round_to(r.raw_read_Bps / 1e9, 4));
  EXPECT_EQ(r.report.results[4]["baseline_value"], round_to(r.fio_read_Bps / 1e9, 4));
  EXPECT_EQ(r.report.results[4]["checksums"], false);
}

TEST(BenchLibrary, ReportAppendsAndFailsWhenOnePartFailed) {
  BenchReport a, b;
  a.results.push_back(bench_result("x", 1.0, "u", "y", 2.0, 0.5));
  b.results.push_back(bench_result("z", 1.0, "u", "y", 2.0, 0.5));
  b.passed = false;
  a.append(b);
  ASSERT_EQ(a.results.size(), 2u);
  EXPECT_EQ(a.results[1]["bench"], "z");
  EXPECT_FALSE(a.passed);
  EXPECT_EQ(a.exit_code(), 1);
}

// The model's forward products as bench train times them with 16-bit products on a GPU (fp32
// against native 16-bit operands): the shapes the model computes, the classifier in its chunks
// of rows, both ways measured (on the CPU gemm_16bit widens its operands: the plumbing, not the
// speed); a type that is not 16-bit is an error.
TEST(BenchLibrary, ModelProductsAreTheForwardShapesTimedBothWays) {
  nn::GPTConfig cfg = nn::GPTConfig::preset("gpt2");
  cfg.num_layers = 2;
  cfg.channels = 64;
  cfg.num_heads = 4;
  cfg.vocab_size = 300;
  cfg.padded_vocab_size = 384;
  // 32 rows; the head 7 at a time over the padded vocabulary: 4 chunks and a tail of 4 rows.
  std::vector<ModelProduct> p = model_products(cfg, 2, 16, 7);
  ASSERT_EQ(p.size(), 6u);
  const size_t want[6][4] = {{32, 192, 64, 2}, {32, 64, 64, 2}, {32, 256, 64, 2},
                             {32, 64, 256, 2}, {7, 384, 64, 4}, {4, 384, 64, 1}};
  for (size_t i = 0; i < p.size(); ++i) {
    EXPECT_EQ(p[i].m, want[i][0]) << p[i].name;
    EXPECT_EQ(p[i].n, want[i][1]) << p[i].name;
    EXPECT_EQ(p[i].k, want[i][2]) << p[i].name;
    EXPECT_EQ(p[i].per_step, want[i][3]) << p[i].name;
  }
  std::unique_ptr<Device> dev = make_device("cpu", 1);
  DeviceAllocator alloc(*dev, 0);
  time_model_products(*dev, alloc, DType::bf16, p, 1);
  for (const ModelProduct& q : p) {
    EXPECT_TRUE(measured(q.fp32_operands_s)) << q.name;
    EXPECT_TRUE(measured(q.native_s)) << q.name;
  }
  EXPECT_TRUE(measured(native_speedup(p)));
  std::printf("products, 16-bit operands speedup on the CPU (widened there): %.3f\n",
              native_speedup(p));
  EXPECT_THROW(time_model_products(*dev, alloc, DType::f32, p, 1), Error);
}

// bench train --batch 0 steps the largest micro-batch whose step fits the device budget: its
// peak predicted from a step at one sequence and the model's exact activation count is the
// tracked peak of the step that ran, within the budget, and one sequence more would not fit.
TEST(BenchLibrary, TrainFindsTheLargestMicroBatchThatFits) {
  BenchTrainStepOptions o;
  o.model = "llama-tiny";
  o.seq = 64;
  o.steps = 1;
  o.threads = 1;
  o.batch = 1;
  const BenchTrainStepResult one = bench_train_step(o);
  ASSERT_GT(one.peak_bytes, 0u);
  const nn::GPTConfig cfg = nn::GPTConfig::preset(o.model);
  auto act = [&](size_t B) {
    return nn::GPT::activation_bytes_for(cfg, B, 64, nn::Recompute::none);
  };
  // Room for 5 sequences and half of a sixth.
  const size_t fixed = one.peak_bytes - act(1);
  o.device_mem = static_cast<int64_t>(fixed + act(5) + (act(6) - act(5)) / 2);
  o.batch = 0;
  const BenchTrainStepResult fit = bench_train_step(o);
  std::printf("budget %zu: micro-batch %zu, peak %zu predicted, %zu measured, %zu at one more\n",
              fit.fit_budget, fit.batch, fit.fit_predicted_peak, fit.peak_bytes, fit.fit_next_peak);
  EXPECT_EQ(fit.fit_budget, static_cast<size_t>(o.device_mem));
  EXPECT_EQ(fit.batch, 5u);
  EXPECT_EQ(fit.fit_retries, 0);
  EXPECT_EQ(fit.peak_bytes, fit.fit_predicted_peak);
  EXPECT_LE(fit.peak_bytes, fit.fit_budget);
  EXPECT_GT(fit.fit_next_peak, fit.fit_budget);
  EXPECT_EQ(fit.report.results.at(0)["batch_fit"]["predicted_peak_bytes"], fit.fit_predicted_peak);
  EXPECT_EQ(fit.report.results.at(0)["batch_fit"]["predicted_batch"], 5u);
  // A budget that one sequence's step does not fit is a clear error.
  o.device_mem = static_cast<int64_t>(one.peak_bytes / 2);
  try {
    (void)bench_train_step(o);
    ADD_FAILURE() << "a budget below one sequence's step was accepted";
  } catch (const Error& e) {
    std::printf("%s\n", e.what());
    EXPECT_NE(std::string(e.what()).find("does not fit"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tierzero::bench
