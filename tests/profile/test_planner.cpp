// The planner and its calibration: a roomy budget keeps everything on the device at stage 0, a
// small one forces sharding or offload and the choice fits, nothing fitting is reported, and the
// calibration file's two forms parse while malformed ones fail with the line named.
#include <gtest/gtest.h>

#include <cstdio>
#include <map>
#include <string>
#include <utility>

#include "tierzero/core/error.hpp"
#include "tierzero/nn/gpt.hpp"
#include "tierzero/nn/gpt_config.hpp"
#include "tierzero/nn/gpt_modules.hpp"
#include "tierzero/nn/param_layout.hpp"
#include "tierzero/profile/planner.hpp"
#include "tierzero/train/estimate_inputs.hpp"
#include "tierzero/train/store_provider.hpp"

namespace tierzero::profile {
namespace {

constexpr size_t GiB = size_t{1} << 30;

PlanRequest gpt2_request(size_t device, size_t host, size_t nvme, int dp = 1,
                         const char* preset = "gpt2") {
  PlanRequest r;
  r.base.units = train::units_from_layout(nn::gpt_param_layout(nn::GPTConfig::preset(preset)));
  r.base.world.dp = dp;
  r.seq_len = 1024;
  r.target_global_batch = 8;
  r.budget = {device, host, nvme};
  // A stand-in activation model: 100 MiB per sequence, 80 with selective recompute, a quarter
  // with checkpointing (full recompute).
  r.activation_bytes = [](size_t b, RecomputeMode m) {
    return b *
           (m == RecomputeMode::full        ? 25
            : m == RecomputeMode::selective ? 80
                                            : 100) *
           (size_t{1} << 20);
  };
  return r;
}

TEST(Planner, RoomyBudgetKeepsEverythingOnTheDevice) {
  const PlanResult p = plan(gpt2_request(80 * GiB, 64 * GiB, 0));
  ASSERT_TRUE(p.found);
  std::printf("chose: %s, %.3f s/step\n", p.best.describe().c_str(), p.best.time.total_s);
  EXPECT_EQ(p.best.stage, 0);
  EXPECT_EQ(p.best.placement.optimizer.tier, Tier::device);
  EXPECT_EQ(p.best.recompute, RecomputeMode::none);
  EXPECT_EQ(p.best.micro_batch, 8u);
}

TEST(Planner, SmallDeviceForcesOffloadAndTheChoiceFits) {
  const PlanRequest req = gpt2_request(2 * GiB, 16 * GiB, 0);
  const PlanResult p = plan(req);
  ASSERT_TRUE(p.found);
  std::printf("chose: %s; device %zu of %zu\n", p.best.describe().c_str(),
              p.best.estimate.tier_total(Tier::device), req.budget[0]);
  EXPECT_LE(static_cast<double>(p.best.estimate.tier_total(Tier::device)),
            0.9 * static_cast<double>(2 * GiB));
  EXPECT_GT(p.best.estimate.tier_total(Tier::host), 0u);   // something had to move
  EXPECT_NE(p.best.placement.optimizer.tier, Tier::nvme);  // no NVMe budget given
  ASSERT_FALSE(p.rejected.empty());
  for (const Candidate& c : p.rejected) EXPECT_FALSE(c.fits);
}

// GPT-2 medium (5.6 GB of state) on a 4 GiB device and a 2 GiB host, with room on NVMe: neither
// holds the optimizer states, and the host cannot hold the gradient shards (1.4 GB) beside the
// NVMe pipeline's slots, so only the gradients on NVMe too fit, and the planner finds that.
TEST(Planner, SmallHostPutsTheGradientsOnNvme) {
  PlanRequest req = gpt2_request(4 * GiB, 2 * GiB, 32 * GiB, 1, "gpt2-medium");
  req.base.placement.nvme_chunk_elems = size_t{1} << 26;  // DeepSpeed's 1e8-ish default
  const PlanResult p = plan(req);
  for (const Candidate& c : p.rejected)
    std::printf("rejected: %s: %s needs %zu\n", c.describe().c_str(), tier_name(c.overflow),
                c.overflow_bytes);
  ASSERT_TRUE(p.found);
  std::printf("chose: %s; host %zu of %zu\n", p.best.describe().c_str(),
              p.best.estimate.tier_total(Tier::host), req.budget[1]);
  EXPECT_TRUE(p.best.grads_on_nvme());
  // The request's large chunk's slots do not fit beside the rest: the planner's smaller one does.
  EXPECT_EQ(p.best.placement.nvme_chunk_elems, kSmallNvmeChunk);
  EXPECT_LE(static_cast<double>(p.best.estimate.tier_total(Tier::host)),
            0.9 * static_cast<double>(req.budget[1]));
  // Gradients on NVMe cost time: with a roomy host they are not chosen.
  const PlanResult roomy = plan(gpt2_request(4 * GiB, 64 * GiB, 32 * GiB, 1, "gpt2-medium"));
  ASSERT_TRUE(roomy.found);
  EXPECT_FALSE(roomy.best.grads_on_nvme()) << roomy.best.describe();
}

// The chosen batch is at least the one asked, rounded up to dp x micro x accumulation at the
// chosen micro-batch (the planner ranks by time per token, so it may choose a larger micro-batch
// over an exact one): with dp 2 a target of 3 took accumulation 1 at micro 1, 2 sequences a step.
TEST(Planner, GlobalBatchIsAtLeastTheTarget) {
  for (const auto& [target, dp] : {std::pair<size_t, int>{3, 2}, {32, 3}, {8, 1}, {7, 4}}) {
    PlanRequest req = gpt2_request(80 * GiB, 64 * GiB, 0, dp);
    req.target_global_batch = target;
    const PlanResult p = plan(req, 100);
    ASSERT_TRUE(p.found);
    const size_t got = static_cast<size_t>(dp) * p.best.micro_batch * p.best.accumulation;
    std::printf("target %zu on dp %d: %s, %zu sequences per step\n", target, dp,
                p.best.describe().c_str(), got);
    EXPECT_GE(got, target);
    // The accumulation is the least that reaches the target at that micro-batch.
    EXPECT_LT(got - static_cast<size_t>(dp) * p.best.micro_batch, target);
    for (const Candidate& c : p.rejected)
      EXPECT_GE(static_cast<size_t>(dp) * c.micro_batch * c.accumulation, target);
  }
}

TEST(Planner, NothingFits) {
  const PlanResult p = plan(gpt2_request(size_t{1} << 20, size_t{1} << 20, 0));
  EXPECT_FALSE(p.found);
  EXPECT_EQ(p.fitting, 0u);
  EXPECT_GT(p.considered, 0u);
}

TEST(Planner, TimeModelParts) {
  PlanRequest req = gpt2_request(80 * GiB, 64 * GiB, 0);
  req.rates.gemm_gflops = 1000.0;
  Candidate c;
  c.stage = 0;
  c.micro_batch = 8;
  c.accumulation = 1;
  EstimateInput in = req.base;
  c.estimate = estimate(in);
  const StepTime t = predict_step_time(req, c);
  const double flops = 6.0 * 124475904.0 * 8 * 1024;
  EXPECT_NEAR(t.compute_s, flops / 1e12, 1e-9);
  EXPECT_EQ(t.transfer_s, 0.0);  // one rank, nothing offloaded
  c.recompute = RecomputeMode::full;
  EXPECT_NEAR(predict_step_time(req, c).compute_s, flops / 1e12 * 8.0 / 6.0, 1e-9);
}

// bf16 / fp16 working parameters are gathered, fetched and sent back after the update as their
// 16-bit copy, and gradients are reduced in the reductions' communication type (fp32 where MPI
// widens it on the host): each stage's transfer and optimizer time are the formulas of
// docs/estimator.md at those element sizes, the optimizer on the host (its updated slice copied
// back unless the parameters live there too; stages 1-2 all-gather it after the step).
TEST(Planner, TransfersCountTheWorkingAndReductionTypes) {
  PlanRequest req = gpt2_request(80 * GiB, 64 * GiB, 0, 4);
  req.rates.comm_gbps = 10.0;
  req.rates.copy_gbps = 20.0;
  req.rates.adam_cpu_gbps = 5.0;
  std::map<std::string, double> seen;
  for (const bool widening : {false, true})
    for (const int stage : {1, 2, 3})
      for (const DType working : {DType::f32, DType::bf16, DType::f16})
        for (const DType reduce : {DType::f32, DType::bf16}) {
          req.base.reduce_dtype = reduce;
          req.base.host_widening = widening;
          Candidate c;
          c.stage = stage;
          c.micro_batch = 1;
          c.placement = req.base.placement;
          c.placement.working = working;
          c.placement.optimizer = {Tier::host, 1.0};
          if (stage == 3) c.placement.param = {Tier::host, 1.0};  // fetched in both passes
          EstimateInput in = req.base;
          in.stage = stage;
          in.placement = c.placement;
          c.estimate = estimate(in);
          const double full = static_cast<double>(c.estimate.full_elems);
          const double shard = static_cast<double>(c.estimate.shard_elems);
          const double p = static_cast<double>(dtype_size(working));
          const double g = widening ? 4.0 : static_cast<double>(dtype_size(reduce));
          const double ring = 3.0 / 4.0, comm = 10e9, copy = 20e9;
          const double grad_shard_to_host = shard * 4.0 / copy;
          const double transfer = stage == 3
                                      ? 2.0 * full * p * ring / comm + 2.0 * shard * p / copy +
                                            full * g * ring / comm + grad_shard_to_host
                                  : stage == 2 ? full * g * ring / comm + grad_shard_to_host
                                               : 2.0 * full * g * ring / comm + grad_shard_to_host;
          const double optimizer = shard * 30.0 / 5e9 + (stage == 3 ? 0.0 : shard * p / copy) +
                                   (stage == 3 ? 0.0 : full * p * ring / comm);
          const StepTime t = predict_step_time(req, c);
          const std::string what = "stage " + std::to_string(stage) + ", " + dtype_name(working) +
                                   " params, " + dtype_name(reduce) + " reductions" +
                                   (widening ? " (widened on the host)" : "");
          std::printf("%s: transfer %.6f s (formula %.6f), optimizer %.6f s (formula %.6f)\n",
                      what.c_str(), t.transfer_s, transfer, t.optimizer_s, optimizer);
          EXPECT_NEAR(t.transfer_s, transfer, 1e-12 * transfer) << what;
          EXPECT_NEAR(t.optimizer_s, optimizer, 1e-12 * optimizer) << what;
          seen[what] = t.transfer_s + t.optimizer_s;
        }
  for (const char* stage : {"stage 1", "stage 2", "stage 3"}) {
    const std::string s = stage;
    EXPECT_LT(seen[s + ", bf16 params, fp32 reductions"],
              seen[s + ", fp32 params, fp32 reductions"]);
    EXPECT_LT(seen[s + ", bf16 params, bf16 reductions"],
              seen[s + ", bf16 params, fp32 reductions"]);
    EXPECT_EQ(seen[s + ", bf16 params, bf16 reductions (widened on the host)"],
              seen[s + ", bf16 params, fp32 reductions (widened on the host)"]);
  }
}

TEST(Planner, OtherKernelsAddToComputeOncePerMicroStep) {
  PlanRequest req = gpt2_request(80 * GiB, 64 * GiB, 0);
  req.rates.gemm_gflops = 1000.0;
  // Attention and GELU: 1 ms per sequence, 1.5 ms with the recomputed forward.
  req.other_kernel_seconds = [](size_t b, RecomputeMode m) {
    return static_cast<double>(b) * (m == RecomputeMode::full ? 1.5e-3 : 1e-3);
  };
  Candidate c;
  c.micro_batch = 4;
  c.accumulation = 3;
  c.estimate = estimate(req.base);
  StepTime t = predict_step_time(req, c);
  std::printf("gemm %.4f s + other kernels %.4f s\n", t.gemm_s, t.other_kernels_s);
  EXPECT_NEAR(t.other_kernels_s, 3 * 4 * 1e-3, 1e-12);
  EXPECT_NEAR(t.gemm_s, 3 * 6.0 * 124475904.0 * 4 * 1024 / 1e12, 1e-9);
  EXPECT_NEAR(t.compute_s, t.gemm_s + t.other_kernels_s, 1e-12);
  EXPECT_NEAR(t.total_s, t.compute_s + t.exposed_s + t.optimizer_s, 1e-12);
  c.recompute = RecomputeMode::full;
  EXPECT_NEAR(predict_step_time(req, c).other_kernels_s, 3 * 4 * 1.5e-3, 1e-12);
}

TEST(Planner, TensorParallelCollectivesAreOnTheCriticalPath) {
  PlanRequest req = gpt2_request(80 * GiB, 64 * GiB, 0);
  req.rates.gemm_gflops = 1000.0;
  req.rates.comm_gbps = 10.0;
  req.base.world.tp = 2;
  req.tensor_parallel_wire_bytes = [](size_t b, RecomputeMode m) {
    return static_cast<double>(b) * (m == RecomputeMode::full ? 3e8 : 2e8);
  };
  Candidate c;
  c.micro_batch = 4;
  c.accumulation = 2;
  c.estimate = estimate(req.base);
  const StepTime t = predict_step_time(req, c);
  std::printf("tp collectives %.3f s of a %.3f s step\n", t.tensor_parallel_s, t.total_s);
  EXPECT_NEAR(t.tensor_parallel_s, 2 * 4 * 2e8 / 10e9, 1e-12);  // two micro-steps
  EXPECT_NEAR(t.total_s, t.compute_s + t.exposed_s + t.optimizer_s + t.tensor_parallel_s, 1e-12);
  req.base.world.tp = 1;  // no tensor parallelism: the callback is not asked
  EXPECT_EQ(predict_step_time(req, c).tensor_parallel_s, 0.0);
}

TEST(Planner, UlyssesAllToAllsAreOnTheCriticalPath) {
  PlanRequest req = gpt2_request(80 * GiB, 64 * GiB, 0);
  req.rates.gemm_gflops = 1000.0;
  req.rates.comm_gbps = 10.0;
  req.base.world.sp = 4;
  req.ulysses_wire_bytes = [](size_t b, RecomputeMode m) {
    return static_cast<double>(b) * (m == RecomputeMode::full ? 1.5e8 : 1e8);
  };
  Candidate c;
  c.micro_batch = 2;
  c.accumulation = 3;
  c.estimate = estimate(req.base);
  const StepTime t = predict_step_time(req, c);
  std::printf("Ulysses all-to-alls %.3f s of a %.3f s step\n", t.ulysses_s, t.total_s);
  EXPECT_NEAR(t.ulysses_s, 3 * 2 * 1e8 / 10e9, 1e-12);  // three micro-steps
  EXPECT_NEAR(t.total_s, t.compute_s + t.exposed_s + t.optimizer_s + t.ulysses_s, 1e-12);
  req.base.world.sp = 1;  // no Ulysses: the callback is not asked
  EXPECT_EQ(predict_step_time(req, c).ulysses_s, 0.0);
}

TEST(Planner, PipelineBubbleIsPpMinusOneOverMOfTheCompute) {
  PlanRequest req = gpt2_request(80 * GiB, 64 * GiB, 0);
  Candidate c;
  c.micro_batch = 2;
  c.accumulation = 4;
  c.estimate = estimate(req.base);
  EXPECT_EQ(predict_step_time(req, c).pipeline_bubble_s, 0.0);  // no pipeline
  req.base.world.pp = 3;
  const StepTime t = predict_step_time(req, c);
  std::printf("pipeline bubble %.4f s for compute %.4f s (pp 3, m 4)\n", t.pipeline_bubble_s,
              t.compute_s);
  EXPECT_NEAR(t.pipeline_bubble_s, t.compute_s * 2.0 / 4.0, 1e-12);
  // Its share of compute + bubble is the analytic (p - 1) / (m + p - 1).
  EXPECT_NEAR(t.pipeline_bubble_s / (t.compute_s + t.pipeline_bubble_s), 2.0 / 6.0, 1e-12);
  EXPECT_NEAR(t.total_s,
              t.compute_s + t.exposed_s + t.optimizer_s + t.tensor_parallel_s + t.pipeline_bubble_s,
              1e-12);
}

// The recompute mode is a searched dimension, with the GPT's own activation counts (4 layers of
// C 256 at T 1024 on one rank: activations dominate). need(m) is the smallest device budget at
// which some configuration with mode m fits (bisected through the planner itself). Between
// need(selective) and need(none) the planner must choose selective recompute (full fits there
// too, but runs every GEMM of the forward again); between need(full) and need(selective) full.
TEST(Planner, ChoosesSelectiveWhenFastestAndFullWhenOnlyItFits) {
  nn::GPTConfig cfg;
  cfg.max_seq_len = 1024;
  cfg.vocab_size = 256;
  cfg.padded_vocab_size = 256;
  cfg.num_layers = 4;
  cfg.num_heads = 4;
  cfg.channels = 256;
  const size_t T = 1024;
  PlanRequest req;
  req.base.units = train::units_from_layout(nn::gpt_param_layout(cfg));
  req.seq_len = T;
  req.target_global_batch = 1;
  req.activation_bytes = [&](size_t b, RecomputeMode m) {
    return nn::GPT::activation_bytes_for(cfg, b, T, train::recompute_of(m));
  };
  // Per sequence: the 4 layers' attention 4 ms forward + 8 backward, GELU 1 + 1.
  req.other_kernel_seconds = [](size_t b, RecomputeMode m) {
    const double attention_runs = m == RecomputeMode::none ? 1.0 : 2.0;
    const double gelu_runs = m == RecomputeMode::full ? 2.0 : 1.0;
    return static_cast<double>(b) * (attention_runs * 4e-3 + 8e-3 + gelu_runs * 1e-3 + 1e-3);
  };
  const size_t host = size_t{1} << 30;
  auto found = [&](size_t device, size_t only) {
    req.budget = {device, host, 0};
    req.only_recompute = only;
    const PlanResult r = plan(req, 0);
    req.only_recompute = kNumRecomputeModes;
    return r;
  };
  auto need = [&](RecomputeMode m) {
    size_t lo = 1, hi = size_t{1} << 32;  // found(hi), not found(lo)
    while (hi - lo > 1) {
      const size_t mid = lo + (hi - lo) / 2;
      (found(mid, static_cast<size_t>(m)).found ? hi : lo) = mid;
    }
    return hi;
  };
  const size_t none = need(RecomputeMode::none), selective = need(RecomputeMode::selective),
               full = need(RecomputeMode::full);
  std::printf("device budget needed: no recompute %zu B, selective %zu B, full %zu B\n", none,
              selective, full);
  ASSERT_LT(selective, none);
  ASSERT_LT(full, selective);

  const PlanResult mid_sel = found((selective + none) / 2, kNumRecomputeModes);
  ASSERT_TRUE(mid_sel.found);
  std::printf("budget %zu B: chosen %s, %.1f ms/step\n", (selective + none) / 2,
              mid_sel.best.describe().c_str(), mid_sel.best.time.total_s * 1e3);
  EXPECT_EQ(mid_sel.best.recompute, RecomputeMode::selective) << mid_sel.best.describe();
  const PlanResult full_there = found((selective + none) / 2, 2);
  ASSERT_TRUE(full_there.found);  // full fits too, and is slower
  std::printf("  full recompute there: %s, %.1f ms/step\n", full_there.best.describe().c_str(),
              full_there.best.time.total_s * 1e3);
  EXPECT_GT(full_there.best.time.per_token_s, mid_sel.best.time.per_token_s);

  const PlanResult mid_full = found((full + selective) / 2, kNumRecomputeModes);
  ASSERT_TRUE(mid_full.found);
  std::printf("budget %zu B: chosen %s\n", (full + selective) / 2,
              mid_full.best.describe().c_str());
  EXPECT_EQ(mid_full.best.recompute, RecomputeMode::full) << mid_full.best.describe();
  EXPECT_TRUE(mid_full.best.checkpointing());
  // With room for everything, no recompute.
  EXPECT_EQ(found(2 * none, kNumRecomputeModes).best.recompute, RecomputeMode::none);
}

TEST(Calibration, BenchLinesAndRateObject) {
  const Rates a = parse_calibration(
      "{\"bench\": \"train.step\", \"value\": 50, \"baseline\": \"sgemm\", "
      "\"baseline_value\": 123.5}\n"
      "{\"bench\": \"io.read\", \"value\": 2.5}\n{\"bench\": \"io.write\", \"value\": 1.5}\n"
      "{\"bench\": \"adam.cpu\", \"value\": 7}\n{\"bench\": \"comm.all_gather\", \"value\": 9}\n"
      "{\"bench\": \"comm.reduce_scatter\", \"value\": 8}\n{\"bench\": \"io.stream\", \"value\": "
      "1}\n",
      "cal.jsonl");
  EXPECT_EQ(a.gemm_gflops, 123.5);
  EXPECT_EQ(a.nvme_read_gbps, 2.5);
  EXPECT_EQ(a.nvme_write_gbps, 1.5);
  EXPECT_EQ(a.adam_cpu_gbps, 7.0);
  EXPECT_EQ(a.comm_gbps, 8.0);
  const Rates b = parse_calibration("{\"gemm_gflops\": 300, \"copy_gbps\": 20}", "cal.json");
  EXPECT_EQ(b.gemm_gflops, 300.0);
  EXPECT_EQ(b.copy_gbps, 20.0);
  EXPECT_EQ(b.nvme_read_gbps, Rates{}.nvme_read_gbps);  // the default stays
  EXPECT_THROW(parse_calibration("{\"gemm_gflop\": 300}", "x"), Error);
  EXPECT_THROW(parse_calibration("{\"gemm_gflops\": -1}", "x"), Error);
  try {
    parse_calibration("{\"bench\": \"io.read\", \"value\": 1}\nnot json\n", "cal.jsonl");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cal.jsonl:2"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tierzero::profile
