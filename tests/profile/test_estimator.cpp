// The estimator's arithmetic on GPT-2 124M: the textbook totals (16 bytes per parameter at stage 0,
// 16/N at stage 3), offload moving bytes between tiers without changing totals, the buffers'
// bounds, tensor and pipeline parallelism, invalid combinations rejected, and the overview table.
#include <gtest/gtest.h>

#include <cmath>

#include "tierzero/core/error.hpp"
#include "tierzero/device/device_allocator.hpp"
#include "tierzero/nn/gpt_config.hpp"
#include "tierzero/nn/gpt_modules.hpp"
#include "tierzero/nn/param_layout.hpp"
#include "tierzero/profile/estimator.hpp"
#include "tierzero/train/store_provider.hpp"

namespace tierzero::profile {
namespace {

constexpr Tier kTiers[] = {Tier::device, Tier::host, Tier::nvme};
constexpr Category kModelState[] = {Category::param, Category::grad, Category::optimizer};

EstimateInput gpt2_input() {
  EstimateInput in;
  in.units = train::units_from_layout(nn::gpt_param_layout(nn::GPTConfig::preset("gpt2")));
  in.placement.nvme_chunk_elems = size_t{1} << 20;
  return in;
}

// Persistent param + grad + optimizer bytes over all tiers.
size_t model_state(const Estimate& e) {
  size_t n = 0;
  for (Tier t : kTiers)
    for (Category c : kModelState) n += e.persistent.at(t, c);
  return n;
}

double rel(double a, double b) {
  return std::abs(a - b) / b;
}

TEST(Estimator, Stage0IsSixteenBytesPerParameter) {
  const Estimate e = estimate(gpt2_input());
  const double psi = 124475904.0;  // GPT-2 124M with the padded vocabulary
  EXPECT_EQ(e.parameters, 124475904u);
  const double total = static_cast<double>(model_state(e));
  std::printf("stage 0: %.0f bytes = %.4f bytes/param\n", total, total / psi);
  EXPECT_LT(rel(total, 16.0 * psi), 0.01);
  EXPECT_LT(rel(static_cast<double>(e.persistent.at(Tier::device, Category::param)), 4.0 * psi),
            0.01);
  EXPECT_LT(rel(static_cast<double>(e.persistent.at(Tier::device, Category::grad)), 4.0 * psi),
            0.01);
  EXPECT_LT(rel(static_cast<double>(e.persistent.at(Tier::device, Category::optimizer)), 8.0 * psi),
            0.01);
  EXPECT_EQ(e.persistent.tier_total(Tier::host), 0u);
  EXPECT_EQ(e.buffers.tier_total(Tier::device), 0u);  // no activations given, no buckets

  // Stage 0 partitions nothing: more data-parallel ranks change nothing per rank.
  EstimateInput four = gpt2_input();
  four.world.dp = 4;
  EXPECT_EQ(model_state(estimate(four)), model_state(e));
}

TEST(Estimator, Stage3OnFourRanksIsSixteenOverN) {
  EstimateInput in = gpt2_input();
  in.stage = 3;
  in.world.dp = 4;
  in.param_persistence_threshold = 0;  // nothing stays gathered: the pure 16/N
  const Estimate e = estimate(in);
  const double expect = 16.0 * 124475904.0 / 4.0;
  const double total = static_cast<double>(model_state(e));
  std::printf("stage 3 on 4 ranks: %.0f bytes, 16 psi / 4 = %.0f\n", total, expect);
  EXPECT_LT(rel(total, expect), 0.01);
  EXPECT_EQ(e.persistent_units, 0u);

  // With the default threshold the final layernorm (1536 elements) stays gathered, one block.
  in.param_persistence_threshold = 100000;
  const Estimate p = estimate(in);
  EXPECT_EQ(p.persistent_units, 1u);
  EXPECT_EQ(p.persistent.at(Tier::device, Category::param),
            e.persistent.at(Tier::device, Category::param) +
                DeviceAllocator::round_size(zero::partition_unit(2 * 768, 4).padded_numel * 4));
}

TEST(Estimator, OffloadMovesBytesWithoutChangingTotals) {
  EstimateInput in = gpt2_input();
  in.stage = 3;
  in.world.dp = 2;
  const Estimate none = estimate(in);
  apply_offload_option(OffloadOption::param_optimizer_cpu, in.placement);
  const Estimate cpu = estimate(in);
  apply_offload_option(OffloadOption::param_optimizer_nvme, in.placement);
  const Estimate nvme = estimate(in);
  std::printf("model state: device only %zu, cpu %zu, nvme %zu\n", model_state(none),
              model_state(cpu), model_state(nvme));
  // Parameter shards and optimizer states on the same tier: the shard is the master, so only the
  // allocators' rounding differs.
  EXPECT_LT(rel(static_cast<double>(model_state(cpu)), static_cast<double>(model_state(none))),
            0.01);
  EXPECT_LT(rel(static_cast<double>(model_state(nvme)), static_cast<double>(model_state(none))),
            0.01);
  EXPECT_EQ(cpu.persistent.at(Tier::device, Category::grad), 0u);
  EXPECT_EQ(cpu.persistent.at(Tier::device, Category::optimizer), 0u);
  EXPECT_GT(cpu.persistent.at(Tier::host, Category::optimizer), 0u);
  EXPECT_GT(nvme.persistent.at(Tier::nvme, Category::optimizer), 0u);
  EXPECT_GT(nvme.buffers.at(Tier::host, Category::io), 0u);  // staging

  // Optimizer alone off the device: a separate fp32 master (4 bytes per shard element) appears.
  apply_offload_option(OffloadOption::optimizer_cpu, in.placement);
  const Estimate opt = estimate(in);
  const double master = 4.0 * static_cast<double>(opt.shard_elems);
  EXPECT_LT(
      rel(static_cast<double>(model_state(opt)), static_cast<double>(model_state(none)) + master),
      0.01);
}

TEST(Estimator, RatioOffloadsAFractionOfUnits) {
  EstimateInput in = gpt2_input();
  in.stage = 2;
  in.placement.optimizer = {Tier::host, 0.5};
  const Estimate half = estimate(in);
  in.placement.optimizer.ratio = 1.0;
  const Estimate all = estimate(in);
  EXPECT_GT(half.persistent.at(Tier::device, Category::optimizer), 0u);
  EXPECT_LT(half.persistent.at(Tier::host, Category::optimizer),
            all.persistent.at(Tier::host, Category::optimizer));
}

TEST(Estimator, BuffersAreBounded) {
  EstimateInput in = gpt2_input();
  in.stage = 3;
  in.world.dp = 4;
  in.activation_bytes = 12345;
  in.max_live_parameters = 1;  // smaller than any unit: the two largest still fit
  const Estimate e = estimate(in);
  const zero::PartitionPlan plan(in.units, 4, 0);
  std::vector<size_t> sizes;
  for (size_t u = 0; u < plan.num_units(); ++u) sizes.push_back(plan.partition(u).padded_numel);
  std::sort(sizes.rbegin(), sizes.rend());
  EXPECT_EQ(e.buffers.at(Tier::device, Category::param), (sizes[0] + sizes[1]) * 4);
  EXPECT_EQ(e.buffers.at(Tier::device, Category::grad), 0u);
  // The gradient reducer's buffers (zero::reduction_buffer_bound): two units open under backward,
  // the open bucket's full gradients (every allocation rounded), and a bucket in flight with its
  // reduced shards, twice. With overlap_comm (the default) a bucket goes out at the largest
  // unit's size; without it the default bucket (5e8 elements) holds the whole model.
  auto rounded = [](size_t elems) { return DeviceAllocator::round_size(elems * 4); };
  size_t total = 0, slack = 0;
  for (size_t n : sizes) {
    total += n;
    slack += rounded(n) - n * 4;
  }
  auto reducer_bound = [&](size_t bucket) {
    return 2 * rounded(sizes[0]) + bucket * 4 + slack + 2 * (rounded(bucket) + rounded(bucket / 4));
  };
  const size_t norm_exchange = DeviceAllocator::round_size(2 * 4 * 4);  // (ranks, 2) fp32
  EXPECT_EQ(e.buffers.at(Tier::device, Category::comm), reducer_bound(sizes[0]) + norm_exchange);
  in.overlap_comm = false;
  EXPECT_EQ(estimate(in).buffers.at(Tier::device, Category::comm),
            reducer_bound(total) + norm_exchange);
  // A bucket smaller than any unit: every bucket is one unit, the largest at most.
  in.reduce_bucket_elems = 1;
  EXPECT_EQ(estimate(in).buffers.at(Tier::device, Category::comm),
            reducer_bound(sizes[0]) + norm_exchange);
  in.reduce_bucket_elems = 500000000;
  in.overlap_comm = true;
  EXPECT_EQ(e.buffers.at(Tier::device, Category::activation), 12345u);

  in.max_live_parameters = 1000000000;  // more than the model: all of it at most
  const Estimate all = estimate(in);
  EXPECT_LE(all.buffers.at(Tier::device, Category::param), plan.full_numel() * 4);

  in.stage = 1;  // no gathers, no reduce-scatter buckets below stage 2
  const Estimate s1 = estimate(in);
  EXPECT_EQ(s1.buffers.at(Tier::device, Category::param), 0u);
  EXPECT_EQ(s1.buffers.at(Tier::device, Category::comm), DeviceAllocator::round_size(2 * 4 * 4));
  EXPECT_EQ(s1.buffers.at(Tier::device, Category::grad), 0u);
}

TEST(Estimator, ModelParallelUnitsAreTakenAsGiven) {
  EstimateInput in = gpt2_input();
  const Estimate one = estimate(in);
  // The units are already one rank's (nn's layout for its tensor-parallel rank and pipeline
  // stage; the trainer's estimate-vs-measured tests cover that): world.tp and world.pp do not cut
  // them again.
  in.world.tp = 2;
  const Estimate tp = estimate(in);
  std::printf("parameters: 1 rank %zu, tp 2 with the same units %zu\n", one.parameters,
              tp.parameters);
  EXPECT_EQ(tp.parameters, one.parameters);
  in.world.tp = 1;
  in.world.pp = 2;
  const Estimate pp = estimate(in);
  EXPECT_EQ(pp.units, one.units);
  EXPECT_EQ(pp.parameters, one.parameters);
  in.world.pp = 0;
  EXPECT_THROW(estimate(in), Error);
}

TEST(Estimator, InvalidCombinationsAreRejected) {
  EstimateInput in = gpt2_input();
  in.stage = 2;
  in.placement.param.tier = Tier::host;
  try {
    estimate(in);
    FAIL() << "offload_param at stage 2 was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("needs stage 3"), std::string::npos) << e.what();
  }
  in.stage = 0;
  in.placement.param.tier = Tier::device;
  in.placement.optimizer.tier = Tier::nvme;
  EXPECT_THROW(estimate(in), Error);
  in.placement.optimizer.tier = Tier::device;
  in.stage = 4;
  EXPECT_THROW(estimate(in), Error);
  in.stage = 1;
  in.units.clear();
  EXPECT_THROW(estimate(in), Error);
}

TEST(Estimator, TableCoversEveryStageAndOption) {
  const std::vector<TableRow> rows = estimate_table(gpt2_input());
  ASSERT_EQ(rows.size(), 4 * kNumOffloadOptions);
  size_t valid = 0;
  for (const TableRow& r : rows) {
    const bool param = r.offload == OffloadOption::param_optimizer_cpu ||
                       r.offload == OffloadOption::param_optimizer_nvme;
    const bool optim = r.offload != OffloadOption::none;
    const bool expect_valid = (!param || r.stage == 3) && (!optim || r.stage >= 1);
    EXPECT_EQ(r.valid, expect_valid) << r.stage << " " << offload_option_name(r.offload);
    EXPECT_EQ(r.reason.empty(), r.valid);
    valid += r.valid;
  }
  EXPECT_EQ(valid, 1u + 3u + 3u + 5u);
}

}  // namespace
}  // namespace tierzero::profile
