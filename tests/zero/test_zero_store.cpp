// The partition store against the one-rank reference, under mpiexec (1, 2 and 4 ranks): a tiny
// GPT trained 20 steps with AdamW and clipping on a fixed global batch, at ZeRO stages 0-3 and
// for every placement (all on device; optimizer on host; optimizer on NVMe; params and optimizer
// on host; params and optimizer on NVMe; half the units offloaded). Each rank trains on its
// contiguous slice of the global batch through the store; every rank also runs the reference
// (nn::LocalParams + train::AdamWOptimizer) on the whole global batch, so it can check every
// step's global loss and gradient norm, and the final parameters, locally. Offloaded placements
// must also equal the all-on-device store bitwise (same kernels, same order), which makes the
// NVMe pipelined optimizer step equal to the in-memory one bit for bit. The store's own
// MemoryTracker must show exactly the bytes placement.hpp predicts per tier, about 1/N of the
// unsharded model state at stage 3, and stage 3's prefetch must serve every fetch after the
// first (traced) step.
//
// The same program runs on CUDA device 0 with TIERZERO_TEST_DEVICE=cuda (skipped, with the
// reason, where no GPU is usable). There the offloaded optimizer states are updated by the CPU
// AdamW and the device-resident ones by the CUDA kernel, so placements agree within the
// reference tolerances instead of bitwise.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include "store_fixture.hpp"

using namespace tierzero;
using namespace tierzero::zero_test;

namespace {

// Skips every test, saying why, when CUDA was asked for and none is usable.
class TestDeviceEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
    std::string reason;
    if (on_cuda() && cuda_device_count(&reason) == 0) GTEST_SKIP() << "no CUDA device: " << reason;
  }
};
::testing::Environment* const g_test_device_environment =
    ::testing::AddGlobalTestEnvironment(new TestDeviceEnvironment);

class ZeroStoreTest : public ::testing::TestWithParam<Case> {};

TEST_P(ZeroStoreTest, TrainsLikeTheOneRankReference) {
  const int stage = GetParam().stage;
  const std::string placement = GetParam().placement;
  // A live-gather budget of three blocks: room to prefetch, small enough to matter. Gradient
  // buckets of two blocks, filled (overlap_comm off): several per backward, some packing two.
  const size_t block_elems = 12 * 32 * 32 + 13 * 32;
  const size_t live_budget = 3 * block_elems;
  const size_t bucket = 2 * block_elems;
  Fixture f(stage, placement, live_budget, DType::f32, bucket, false);
  ErrorStats loss_err, norm_err;
  size_t clipped = 0;
  std::vector<float> losses;
  size_t late_on_demand = 0, late_prefetch_hits = 0, late_out_of_order = 0;
  size_t late_handoffs = 0, late_nvme_reads = 0;
  double late_stall_s = 0.0;
  // The norm is looser than the loss: per-rank gradients summed in another order differ by
  // ~1e-7, and 20 Adam steps on one fixed batch amplify that in the gradient (seen on the
  // CPU: 9.7e-5 on 2 ranks at step 15 on one VM, 1.49e-4 on an AMD EPYC VM whose OpenBLAS
  // kernels sum in another order, 5.1e-4 on an Intel Xeon VM; hence 1e-3) far more than in the loss
  // (seen: 1e-7). On CUDA the backward's atomics make the reference differ from itself run to run,
  // and the same amplification takes that to ~3e-4 by step 15 (seen on an H200: rank 0's and rank
  // 1's reference runs of the same batch, printed below as the reference's run-to-run difference),
  // so the bound there is 2e-3. The first step, before any amplification, is held to 1e-5
  // everywhere.
  const double norm_rtol = on_cuda() ? 2e-3 : 1e-3;
  std::vector<float> ref_norms;  // (steps) this rank's reference gradient norms
  for (size_t step = 0; step < 20; ++step) {
    f.ref_params.zero_grads();
    const float ref_loss = f.ref_model.forward_backward(f.ref_params, f.x.data(), f.y.data(),
                                                        f.global_batch, kSeq, 1.0f);
    const train::StepStats ref_stats = f.ref_opt.step(f.ref_params, kLr, kClip);

    zero::StoreStepStats stats;
    const float loss = store_step(f, &stats);
    losses.push_back(loss);
    if (step > 0) {
      const zero::FetchCounters& c = f.store.fetch_counters();
      late_on_demand += c.on_demand_fetches;
      late_prefetch_hits += c.prefetch_hits;
      late_out_of_order += c.out_of_order;
      late_stall_s += c.stall_s;
      late_handoffs += c.handoffs;
      late_nvme_reads += c.nvme_reads;
    }

    loss_err.compare(loss, ref_loss, 0.0, 1e-5);
    norm_err.compare(static_cast<float>(stats.grad_norm), static_cast<float>(ref_stats.grad_norm),
                     0.0, norm_rtol);
    ref_norms.push_back(static_cast<float>(ref_stats.grad_norm));
    if (ref_stats.clip_scale < 1.0) ++clipped;
  }
  const std::string what = "stage " + std::to_string(stage) + ", placement " + placement + ", on " +
                           std::to_string(f.ranks) + " ranks, 20 steps";
  loss_err.print(what + ", loss vs reference", f.rank);
  norm_err.print(what + ", grad norm vs reference", f.rank);
  EXPECT_EQ(loss_err.bad, 0u) << "loss beyond 1e-5 relative of the reference";
  EXPECT_EQ(norm_err.bad, 0u) << "grad norm beyond " << norm_rtol << " relative of the reference";
  EXPECT_LE(norm_err.first_rel, 1e-5) << "the first step's grad norm, before any amplification";
  // Every rank ran the same reference: how far the runs differ is the device's own noise, which
  // the CPU backend does not have.
  std::vector<float> root_norms = ref_norms;  // (steps) rank 0's reference norms
  f.world.broadcast(root_norms.data(), root_norms.size(), DType::f32, 0);
  ErrorStats ref_noise;
  for (size_t i = 0; i < ref_norms.size(); ++i)
    ref_noise.compare(ref_norms[i], root_norms[i], 0, 0);
  ref_noise.print(what + ", the reference's run-to-run difference (grad norm, vs rank 0's)",
                  f.rank);
  if (!on_cuda()) {
    EXPECT_EQ(ref_noise.max_abs, 0.0) << "the CPU reference is deterministic";
  }
  EXPECT_GT(clipped, 0u) << "clipping never engaged; lower kClip so the test exercises it";

  // Final parameters: every real element close to the reference (1e-4 absolute is a thirtieth of
  // one Adam step at this learning rate; seen: 4e-5 on 4 ranks, 0 on one), every padding element
  // zero.
  const nn::ParamLayout& layout = f.ref_model.layout();
  ErrorStats param_err;
  size_t nonzero_padding = 0;
  size_t units_differing_from_rank0 = 0;
  const std::vector<float> final_params = read_all_units(f);
  std::vector<float> ref_final(layout.total_numel());  // (total_numel) host copy of the reference
  f.device->copy(ref_final.data(), f.ref_params.params(), ref_final.size() * sizeof(float),
                 CopyKind::device_to_host, f.device->default_stream());
  f.device->default_stream().synchronize();
  for (size_t u = 0; u < layout.units().size(); ++u) {
    const nn::ParamUnit& unit = layout.units()[u];
    std::vector<float> got(
        final_params.begin() + static_cast<std::ptrdiff_t>(unit.offset),
        final_params.begin() + static_cast<std::ptrdiff_t>(unit.offset + unit.numel));
    std::vector<char> real(unit.numel, 0);  // (unit.numel) 1 where a tensor element lives
    for (size_t ti : unit.tensors) {
      const nn::ParamTensor& t = layout.tensors()[ti];
      for (size_t i = 0; i < t.numel; ++i) {
        const size_t j = t.offset - unit.offset + i;
        real[j] = 1;
        param_err.compare(got[j], ref_final[t.offset + i], 1e-4, 1e-4);
      }
    }
    for (size_t j = 0; j < unit.numel; ++j)
      if (!real[j] && got[j] != 0.0f) ++nonzero_padding;
    // Replicas must agree bitwise (stage 0 relies on every rank making the same update).
    std::vector<float> root = got;  // (unit.numel) rank 0's values
    f.world.broadcast(root.data(), root.size(), DType::f32, 0);
    if (root != got) ++units_differing_from_rank0;
  }
  param_err.print(what + ", final params vs reference", f.rank);
  EXPECT_EQ(param_err.bad, 0u);
  EXPECT_EQ(nonzero_padding, 0u);
  EXPECT_EQ(units_differing_from_rank0, 0u);

  // Model-state bytes per tier are exactly what placement.hpp predicts (plus, at stage 3, the
  // gathered persistent units on the device: read_all_units left them gathered).
  const zero::PartitionPlan& plan = f.store.plan();
  const MemoryTracker& mt = f.store_tracker;
  const zero::StateBytes predicted = zero::model_state_bytes(
      plan, stage, f.store.placement(), Fixture::store_config(stage, placement, 0).placement);
  // (On one rank a device-resident fp32 shard is the unit itself: nothing else is gathered.)
  size_t persistent_bytes = 0;
  for (size_t u = 0; u < plan.num_units(); ++u)
    if (f.store.persistent(u) && (f.ranks > 1 || f.store.placement()[u].param != Tier::device))
      persistent_bytes += DeviceAllocator::round_size(plan.partition(u).padded_numel * 4);
  size_t state_mismatches = 0;
  for (Tier t : {Tier::device, Tier::host, Tier::nvme}) {
    for (Category c : {Category::param, Category::grad, Category::optimizer}) {
      size_t want = predicted.at(t, c);
      if (t == Tier::device && c == Category::param) want += persistent_bytes;
      const size_t got = mt.current(t, c);
      if (got != want) {
        ++state_mismatches;
        std::printf("[rank %d] %s: %s %s bytes %zu, predicted %zu\n", f.rank, what.c_str(),
                    tier_name(t), category_name(c), got, want);
      }
    }
  }
  std::printf("[rank %d] %s: model state device %s, host %s, nvme %s (as predicted: %s)\n", f.rank,
              what.c_str(), format_bytes(predicted.tier_total(Tier::device)).c_str(),
              format_bytes(predicted.tier_total(Tier::host)).c_str(),
              format_bytes(predicted.tier_total(Tier::nvme)).c_str(),
              state_mismatches == 0 ? "yes" : "NO");
  EXPECT_EQ(state_mismatches, 0u);

  // Offloaded placements compute exactly what the all-on-device store computes.
  if (placement != "device") {
    Fixture dev(stage, "device", live_budget, DType::f32, bucket, false);
    std::vector<float> dev_losses;
    for (size_t step = 0; step < losses.size(); ++step) dev_losses.push_back(store_step(dev));
    EXPECT_EQ(count_disagreements(losses, dev_losses, 0.0, 1e-5, what + " vs all on device, losses",
                                  f.rank),
              0u);
    EXPECT_EQ(count_disagreements(final_params, read_all_units(dev), 1e-4, 1e-4,
                                  what + " vs all on device, parameters", f.rank),
              0u);
  }

  if (stage == 3) {
    // Prefetch: after the traced first step every unit arrives by prefetch (or stays gathered);
    // nothing is fetched on demand and nothing leaves the trace.
    std::printf(
        "[rank %d] %s: steps 2-20: %zu prefetch hits, %zu on-demand fetches, %zu out of "
        "order, stall %.3f ms\n",
        f.rank, what.c_str(), late_prefetch_hits, late_on_demand, late_out_of_order,
        late_stall_s * 1e3);
    EXPECT_EQ(late_on_demand, 0u);
    EXPECT_EQ(late_out_of_order, 0u);
    EXPECT_GT(late_prefetch_hits, 0u);
    if (placement == "all_nvme") {
      // The NVMe optimizer hands its new shards to the next forward, which then reads nothing
      // back from the disk for them (the backward still reads every shard).
      std::printf(
          "[rank %d] %s: steps 2-20: %zu shards handed over by the optimizer, %zu read "
          "from NVMe\n",
          f.rank, what.c_str(), late_handoffs, late_nvme_reads);
      EXPECT_GT(late_handoffs, 0u);
    }

    // Device model-state bytes at their peak: at most 1.05 x 16 Psi / N (the rank's shards of
    // what lives on the device) plus the live-gather budget and the persistent units; with every
    // unit offloaded, only the live gathers and persistent units remain.
    const size_t model_state_peak = mt.peak(Tier::device, Category::param) +
                                    mt.peak(Tier::device, Category::grad) +
                                    mt.peak(Tier::device, Category::optimizer);
    const size_t n = static_cast<size_t>(f.ranks);
    const bool all_offloaded = placement == "all_host" || placement == "all_nvme";
    const size_t per_rank = all_offloaded ? 0 : 16 * layout.total_numel() / n;
    // The in-use unit may exceed the budget by itself; blocks round to 512 bytes.
    const size_t live_bytes = (live_budget + plan.largest_padded_numel()) * sizeof(float);
    const size_t slack = plan.num_units() * zero::kShardAlignElems * 16 + 8 * 512;
    const size_t bound = per_rank * 105 / 100 + live_bytes + persistent_bytes + slack;
    std::printf(
        "[rank %d] %s: device model-state peak %zu bytes, bound %zu (1.05 x 16Psi/N "
        "%zu + live budget %zu + persistent %zu)\n",
        f.rank, what.c_str(), model_state_peak, bound, per_rank * 105 / 100, live_bytes,
        persistent_bytes);
    EXPECT_LE(model_state_peak, bound);
  }
}

// Two micro-batches per step (grad_scale 1/2 each) accumulate to the whole local batch's gradient:
// at stages 2-3 in the shard accumulators, at 0-1 in the all-reduced full gradients.
TEST_P(ZeroStoreTest, AccumulatesMicroBatches) {
  const int stage = GetParam().stage;
  Fixture f(stage, GetParam().placement);
  const size_t local = kLocalBatch * kSeq;
  const size_t half = local / 2;
  ErrorStats loss_err;
  for (size_t step = 0; step < 5; ++step) {
    f.ref_params.zero_grads();
    const float ref_loss = f.ref_model.forward_backward(f.ref_params, f.x.data(), f.y.data(),
                                                        f.global_batch, kSeq, 1.0f);
    f.ref_opt.step(f.ref_params, kLr, kClip);

    f.store.zero_grads();
    const size_t at = static_cast<size_t>(f.rank) * local;
    const float l1 = f.model.forward_backward(f.provider, f.x.data() + at, f.y.data() + at,
                                              kLocalBatch / 2, kSeq, 0.5f);
    const float l2 = f.model.forward_backward(f.provider, f.x.data() + at + half,
                                              f.y.data() + at + half, kLocalBatch / 2, kSeq, 0.5f);
    float loss = 0.5f * (l1 + l2);
    f.world.all_reduce(&loss, &loss, 1, DType::f32, comm::ReduceOp::avg);
    f.store.step(kLr, kClip);
    loss_err.compare(loss, ref_loss, 0.0, 1e-5);
  }
  loss_err.print("stage " + std::to_string(stage) + ", placement " + GetParam().placement +
                     ", on " + std::to_string(f.ranks) +
                     " ranks, 2 micro-batches x 5 steps, loss vs reference",
                 f.rank);
  EXPECT_EQ(loss_err.bad, 0u);
}

// Calls out of order fail with an Error before anything is communicated, so every rank throws
// alike and the group stays usable.
TEST_P(ZeroStoreTest, MisuseIsAnError) {
  Fixture f(GetParam().stage, GetParam().placement);
  EXPECT_THROW(f.store.release_params(0), Error);
  EXPECT_THROW(f.store.grads_done(0), Error);
  EXPECT_THROW(f.store.acquire_params(99), Error);
  f.store.acquire_params(1);
  EXPECT_THROW(f.store.step(kLr, kClip), Error);  // a unit is still acquired
  f.store.release_params(1);
  f.store.acquire_grads(1);
  EXPECT_THROW(f.store.zero_grads(), Error);  // gradients still open
  try {
    f.store.step(kLr, kClip);
    ADD_FAILURE() << "step with open gradients did not throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("block.0"), std::string::npos) << e.what();
  }
  f.store.grads_done(1);
  f.store.zero_grads();
  f.store.step(kLr, kClip);  // usable afterwards
}

// The NVMe optimizer's slots read the next step's first chunks ahead; new values loaded between
// steps must replace them. Loading the same values into an NVMe-offloaded store and an
// all-on-device one, between steps, must leave them computing bitwise the same.
TEST(ZeroStore, LoadingBetweenStepsReplacesTheOptimizersReadAhead) {
  for (const Case& c : {Case{1, "opt_nvme"}, Case{3, "all_nvme"}}) {
    Fixture nvme(c.stage, c.placement);
    Fixture dev(c.stage, "device");
    for (int i = 0; i < 2; ++i) {
      store_step(nvme);
      store_step(dev);
    }
    std::vector<float> values = read_all_units(dev);  // (total_numel)
    for (float& v : values) v *= 0.5f;
    const nn::ParamLayout& layout = dev.ref_model.layout();
    for (size_t u = 0; u < layout.units().size(); ++u) {
      nvme.store.load_unit(u, values.data() + layout.units()[u].offset);
      dev.store.load_unit(u, values.data() + layout.units()[u].offset);
    }
    std::vector<float> nvme_losses, dev_losses;
    for (int i = 0; i < 3; ++i) {
      nvme_losses.push_back(store_step(nvme));
      dev_losses.push_back(store_step(dev));
    }
    const std::string what = "stage " + std::to_string(c.stage) + " " + c.placement +
                             ", values loaded after 2 steps, vs all on device";
    EXPECT_EQ(count_disagreements(nvme_losses, dev_losses, 0.0, 1e-5, what + ", losses", nvme.rank),
              0u);
    EXPECT_EQ(count_disagreements(read_all_units(nvme), read_all_units(dev), 1e-4, 1e-4,
                                  what + ", parameters", nvme.rank),
              0u);
  }
}

TEST(ZeroStore, UnknownStageIsAnError) {
  zero::StoreConfig c;
  c.stage = 4;
  std::unique_ptr<Device> device = test_device();
  DeviceAllocator alloc(*device, 0);
  std::vector<zero::UnitSpec> units = {{"u", 64, {{0, 64, true}}}};
  EXPECT_THROW(zero::PartitionStore(units, c, zero::AdamWConfig{}, session().world(), alloc),
               Error);
}

// Every stage with every placement it allows: offload_param needs stage 3, offload_optimizer
// stage 1 or more (placement.hpp).
std::vector<Case> all_cases() {
  std::vector<Case> cases;
  for (int stage = 0; stage <= 3; ++stage)
    for (const char* p : {"device", "opt_host", "opt_nvme", "all_host", "all_nvme", "half"}) {
      const std::string name = p;
      const bool moves_params = name == "all_host" || name == "all_nvme" || name == "half";
      const bool moves_optimizer = name != "device";
      if ((moves_params && stage < 3) || (moves_optimizer && stage < 1)) continue;
      cases.push_back({stage, name});
    }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(StagesAndPlacements, ZeroStoreTest, ::testing::ValuesIn(all_cases()),
                         [](const ::testing::TestParamInfo<Case>& i) {
                           return "stage" + std::to_string(i.param.stage) + "_" + i.param.placement;
                         });

// bf16 / fp16 working parameters with fp32 master weights (the kernels compute in fp32 from
// 16-bit storage): the working parameters take 2 bytes per element on their tier, every
// placement computes bitwise what the all-on-device store computes, and training tracks the fp32
// reference within one ulp of the working type.
class ZeroStoreMixedPrecision : public ::testing::TestWithParam<std::tuple<int, DType>> {};

TEST_P(ZeroStoreMixedPrecision, TracksTheFp32ReferenceAndPlacementsAgree) {
  const int stage = std::get<0>(GetParam());
  const DType working = std::get<1>(GetParam());
  const std::string what = "stage " + std::to_string(stage) + ", " +
                           (working == DType::bf16 ? "bf16" : "fp16") + " working params";
  std::vector<std::vector<float>> losses;
  // One ulp of the working type: bf16 keeps 8 significant bits (seen up to 2.6e-3 on 2 ranks on
  // the CPU, 3.3e-3 on an AMD EPYC VM), fp16 11 (seen 1.6e-4, but 4.15e-3 = 4.3 ulps at step 19
  // on the EPYC VM, whose OpenBLAS sums the ranks' half batches in another order than the
  // reference's whole one; the same amplification as on CUDA, so fp16 gets 8 on the CPU). On
  // CUDA four: the offloaded states' CPU AdamW and the device kernel differ in the last fp32 bit,
  // which a 16-bit rounding can turn into a whole ulp of a working parameter, and 20 steps on one
  // batch amplify that (seen on an H200: fp16 2.8e-3 vs the fp32 reference at step 19, 2.1e-3
  // between placements; bf16 3.3e-3). The first step is held to one ulp everywhere.
  const double one_ulp = working == DType::bf16 ? 1.0 / 128 : 1.0 / 1024;
  const double ulps = on_cuda() ? 4.0 : (working == DType::f16 ? 8.0 : 1.0);
  // At stage 3 with parameters in host memory (all_host, host_nvme) the CPU AdamW writes the
  // bf16 working copy in its own pass (ShardStorage::host_bf16_params).
  for (const char* placement : {"device", "opt_nvme", "all_nvme", "all_host", "host_nvme"}) {
    const std::string name = placement;
    if (stage < 3 && name != "device" && name != "opt_nvme") continue;
    Fixture f(stage, placement, 1000000000, working);
    ErrorStats loss_err;
    std::vector<float> run;
    for (size_t step = 0; step < 20; ++step) {
      f.ref_params.zero_grads();
      const float ref_loss = f.ref_model.forward_backward(f.ref_params, f.x.data(), f.y.data(),
                                                          f.global_batch, kSeq, 1.0f);
      f.ref_opt.step(f.ref_params, kLr, kClip);
      run.push_back(store_step(f));
      loss_err.compare(run.back(), ref_loss, 0.0, ulps * one_ulp);
    }
    loss_err.print(what + ", placement " + placement + ", loss vs the fp32 reference", f.rank);
    EXPECT_EQ(loss_err.bad, 0u) << "beyond " << ulps << " ulp of the working type";
    EXPECT_LE(loss_err.first_rel, one_ulp) << "the first step, before any amplification";
    const zero::StateBytes predicted =
        zero::model_state_bytes(f.store.plan(), stage, f.store.placement(),
                                Fixture::store_config(stage, placement, 0, working).placement);
    // Measured model state equals the prediction on every tier (after the step no unit is
    // gathered), and the working parameters take 2 bytes per element of this rank's share.
    for (Tier t : {Tier::device, Tier::host, Tier::nvme})
      for (Category c : {Category::param, Category::grad, Category::optimizer})
        EXPECT_EQ(f.store_tracker.current(t, c), predicted.at(t, c))
            << what << " " << tier_name(t) << " " << category_name(c);
    const zero::PartitionPlan& plan = f.store.plan();
    const size_t share = stage == 3 ? plan.shard_numel() : plan.full_numel();
    const Tier param_tier = name == "all_nvme"                          ? Tier::nvme
                            : name == "all_host" || name == "host_nvme" ? Tier::host
                                                                        : Tier::device;
    // NVMe: 4 KiB-padded chunks; host: the pool's size classes (2 bytes per element either way).
    const size_t want = param_tier == Tier::device ? DeviceAllocator::round_size(2 * share)
                                                   : predicted.at(param_tier, Category::param);
    EXPECT_EQ(f.store_tracker.current(param_tier, Category::param), want) << what;
    if (param_tier == Tier::host) {
      EXPECT_LT(want, 4 * share) << what << ": the working parameters are 16-bit";
    }
    losses.push_back(run);
  }
  for (size_t i = 1; i < losses.size(); ++i)
    EXPECT_EQ(count_disagreements(losses[i], losses[0], 0.0, ulps * comm::test::rtol_for(working),
                                  what + ", placement " + std::to_string(i) + " vs device, losses",
                                  session().world().rank()),
              0u);
}

// 16-bit compute (StoreConfig::compute the working type): the store hands out its working copy
// as it holds it — the bits of the loaded values rounded to the working type, through the nn
// provider too — and holds no fp32 copy of a unit in use: acquiring costs the gathered 16-bit
// unit at stage 3 and nothing below it (fp32 compute costs 4 bytes per element more). The fp32
// hand-out is then an Error, as is the 16-bit one in fp32 mode, and a compute type that is not
// the working one.
TEST_P(ZeroStoreMixedPrecision, HandsOutTheWorkingCopyFor16BitCompute) {
  const int stage = std::get<0>(GetParam());
  const DType working = std::get<1>(GetParam());
  for (const char* placement : {"device", "all_nvme"}) {
    if (stage < 3 && std::string(placement) != "device") continue;
    const std::string what =
        "stage " + std::to_string(stage) + ", " + dtype_name(working) + ", placement " + placement;
    Fixture f(stage, placement, 1000000000, working, 500000000, true,
              [&](zero::StoreConfig& c) { c.compute = working; });
    const nn::ParamLayout& layout = f.ref_model.layout();
    std::vector<float> init(layout.total_numel());  // (total_numel) as the fixture loaded them
    nn::init_gpt2_params(layout, f.cfg, 1234, init.data());
    f.store.begin_pass(zero::PassKind::eval);
    for (size_t u = 0; u < layout.units().size(); ++u) {
      const size_t numel = layout.units()[u].numel;
      const size_t before = f.store_tracker.current(Tier::device, Category::param);
      const void* held = f.provider.acquire_params16(u);
      const size_t during = f.store_tracker.current(Tier::device, Category::param);
      const size_t padded = f.store.plan().partition(u).padded_numel;
      // (An evaluation pass gathers on demand: nothing of this unit was gathered before.)
      EXPECT_EQ(during - before, stage == 3 ? DeviceAllocator::round_size(2 * padded) : 0u)
          << what << ", unit " << u << ": no fp32 copy while in use";
      std::vector<uint16_t> got(numel), want(numel);  // (numel) working type
      f.device->copy(got.data(), held, numel * sizeof(uint16_t), CopyKind::device_to_host,
                     f.device->default_stream());
      f.device->default_stream().synchronize();
      convert_from_f32(want.data(), working, init.data() + layout.units()[u].offset, numel);
      EXPECT_EQ(got, want) << what << ", unit " << u << ": the working copy's bits";
      EXPECT_EQ(f.provider.params16_type(), working);
      EXPECT_THROW(f.store.acquire_params(f.provider.grouping().store_unit[u]), Error) << what;
      f.provider.release_params(u);
      // Reading a unit back (checkpoints, export) widens the same values on the host.
      const size_t store_unit = f.provider.grouping().store_unit[u];
      std::vector<float> read(f.store.plan().units()[store_unit].numel);  // (numel) host
      f.store.read_unit(store_unit, read.data());
      std::vector<float> widened(numel);  // (numel)
      convert_to_f32(widened.data(), want.data(), working, numel);
      const float* mine = read.data() + f.provider.grouping().offset[u];  // this nn unit's part
      EXPECT_EQ(0, std::memcmp(mine, widened.data(), numel * sizeof(float)))
          << what << ", unit " << u << ": read_unit";
    }
  }
  // The fp32 store refuses the 16-bit hand-out; a compute type other than the working one is
  // refused at construction.
  Fixture fp32(stage, "device", 1000000000, working);
  EXPECT_THROW(fp32.store.acquire_params16(0), Error);
  const DType other = working == DType::bf16 ? DType::f16 : DType::bf16;
  EXPECT_THROW(Fixture(stage, "device", 1000000000, working, 500000000, true,
                       [&](zero::StoreConfig& c) { c.compute = other; }),
               Error);
}

INSTANTIATE_TEST_SUITE_P(Types, ZeroStoreMixedPrecision,
                         ::testing::Combine(::testing::Values(1, 3),
                                            ::testing::Values(DType::bf16, DType::f16)),
                         [](const ::testing::TestParamInfo<std::tuple<int, DType>>& i) {
                           return "stage" + std::to_string(std::get<0>(i.param)) + "_" +
                                  (std::get<1>(i.param) == DType::bf16 ? "bf16" : "fp16");
                         });

// Offloading parameters below stage 3, or the optimizer at stage 0, is refused up front.
TEST(ZeroStore, ImpossiblePlacementsAreErrors) {
  std::unique_ptr<Device> device = test_device();
  DeviceAllocator alloc(*device, 0);
  std::vector<zero::UnitSpec> units = {{"u", 64, {{0, 64, true}}}};
  zero::StoreConfig c;
  c.stage = 2;
  c.placement.param.tier = Tier::host;
  try {
    zero::PartitionStore s(units, c, zero::AdamWConfig{}, session().world(), alloc);
    ADD_FAILURE() << "offload_param at stage 2 was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("needs stage 3"), std::string::npos) << e.what();
  }
  c.stage = 0;
  c.placement.param.tier = Tier::device;
  c.placement.optimizer.tier = Tier::nvme;
  EXPECT_THROW(zero::PartitionStore(units, c, zero::AdamWConfig{}, session().world(), alloc),
               Error);
  c.stage = 3;
  c.placement.optimizer.tier = Tier::nvme;  // but no directory
  c.nvme.directories.clear();
  try {
    zero::PartitionStore s(units, c, zero::AdamWConfig{}, session().world(), alloc);
    ADD_FAILURE() << "NVMe placement without a directory was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("nvme_path"), std::string::npos) << e.what();
  }
}

// A rank that acquires another unit than the others while the trace is recorded gets a clear
// Error — on every rank, at the same call — instead of a hang in mismatched gathers.
TEST(ZeroStoreTrace, DivergentUnitOrderIsAClearErrorOnEveryRank) {
  Fixture f(3);
  if (f.ranks < 2) GTEST_SKIP() << "needs at least 2 ranks to diverge";
  f.store.zero_grads();
  f.store.acquire_params(0);
  f.store.release_params(0);
  const size_t unit = f.rank == 1 ? 2 : 1;  // rank 1 skips a block
  try {
    f.store.acquire_params(unit);
    ADD_FAILURE() << "divergent unit order was not detected";
  } catch (const Error& e) {
    const std::string m = e.what();
    std::printf("[rank %d] divergent order: %s\n", f.rank, m.c_str());
    EXPECT_NE(m.find("different orders"), std::string::npos) << m;
    EXPECT_NE(m.find("block.0"), std::string::npos) << m;
    EXPECT_NE(m.find("block.1"), std::string::npos) << m;
  }
}

// A later step that leaves the trace (the same way on every rank) falls back to on-demand
// fetches with a warning, stays correct, and the trace is recorded again at the next step.
TEST(ZeroStoreTrace, OutOfTraceOrderFallsBackOnDemandAndRetraces) {
  Fixture f(3, "all_host", 20000);  // prefetches about one unit ahead
  store_step(f);
  store_step(f);
  const std::vector<size_t> trace = f.store.trace();
  ASSERT_FALSE(trace.empty());
  EXPECT_EQ(f.store.fetch_counters().on_demand_fetches, 0u);
  // A forward-only pass over the units in reverse: out of trace order from the first call.
  f.store.zero_grads();
  for (size_t u = f.store.plan().num_units(); u-- > 0;) {
    f.store.acquire_params(u);
    f.store.release_params(u);
  }
  const zero::FetchCounters c = f.store.fetch_counters();
  std::printf("[rank %d] reversed pass: %zu out of order, %zu on demand, %zu prefetch hits\n",
              f.rank, c.out_of_order, c.on_demand_fetches, c.prefetch_hits);
  EXPECT_EQ(c.out_of_order, 1u);
  EXPECT_GT(c.on_demand_fetches, 0u);
  f.store.step(kLr, kClip);  // zero gradients: the parameters only decay
  store_step(f);             // records again
  EXPECT_EQ(f.store.trace(), trace);
  store_step(f);
  EXPECT_EQ(f.store.fetch_counters().on_demand_fetches, 0u);
  EXPECT_EQ(f.store.fetch_counters().out_of_order, 0u);
}

}  // namespace
