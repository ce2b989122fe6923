// The partition store's gradient reducer under mpiexec: gradient buckets of every size (one unit
// per bucket, pairs of units packed rank-major into one reduce-scatter, the whole model in one)
// train alike and issue as many reductions as their size says, and the deferred (no-sync) mode
// reduces once per step while tracking the one-rank reference; bf16 / fp16 reductions
// (communication_data_type) track fp32 ones; allgather buckets of any size gather alike. Bitwise on
// the CPU backend with up to 2 ranks (a sum of two is the same in any order); with more ranks MPI
// may sum buckets of another size in another order, so there the runs agree within the reference
// tolerances.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "store_fixture.hpp"
#include "tierzero/core/activity_log.hpp"
#include "tierzero/core/timer.hpp"
#include "tierzero/device/device_timeline.hpp"

using namespace tierzero;
using namespace tierzero::zero_test;

namespace {

// The tiny GPT's units, in the order backward finishes them: final_norm (64 elements padded),
// block.1, block.0 (12736 each), embeddings (2560).
constexpr size_t kBlockElems = 12736;

size_t compare_runs(const std::vector<float>& got, const std::vector<float>& want, double rtol,
                    const std::string& what, int ranks, int rank) {
  // On CUDA two runs differ where backward sums with atomics: a gradient that is only rounding
  // noise (about 1e-9) can flip sign, and Adam turns it into a step of a few 1e-6 (measured on an
  // H200: 3.6e-6 on parameters near zero). The absolute floor covers that, not real differences.
  const double atol = on_cuda() ? 1e-5 : 1e-6;
  return count_disagreements(got, want, atol, rtol, what, rank, ranks <= 2 && !on_cuda());
}

struct TrainedRun {
  std::vector<float> losses;
  std::vector<float> params;
  size_t reductions_per_step = 0;
  double reduction_s = 0.0, exposed_s = 0.0;  // the last step's, from FetchCounters
};

TrainedRun train(int stage, const std::string& placement, size_t bucket_elems, bool overlap) {
  Fixture f(stage, placement, 1000000000, DType::f32, bucket_elems, overlap);
  TrainedRun run;
  for (int step = 0; step < 5; ++step) {
    run.losses.push_back(store_step(f));
    run.reductions_per_step = f.store.fetch_counters().reductions;
    run.reduction_s = f.store.fetch_counters().reduction_s;
    run.exposed_s = f.store.fetch_counters().reduction_exposed_s;
  }
  run.params = read_all_units(f);
  return run;
}

class ZeroReducerTest : public ::testing::TestWithParam<int> {};

TEST_P(ZeroReducerTest, BucketSizesTrainAlikeAndIssueTheirReductions) {
  const int stage = GetParam();
  const int ranks = session().world().size(), rank = session().world().rank();
  for (const char* placement : {"device", "opt_host"}) {
    if (stage == 0 && std::string(placement) != "device") continue;
    // Filled buckets (overlap_comm off) of one unit, of pairs, of the whole model; and the
    // default, overlap_comm on: a bucket goes out at the largest unit's size (a block here).
    const TrainedRun per_unit = train(stage, placement, 1, false);
    const TrainedRun pairs = train(stage, placement, 2 * kBlockElems + 1, false);
    const TrainedRun whole = train(stage, placement, 500000000, false);
    const TrainedRun overlap = train(stage, placement, 500000000, true);
    const std::string what = "stage " + std::to_string(stage) + " " + placement + " on " +
                             std::to_string(ranks) + " ranks";
    std::printf(
        "[rank %d] %s: reductions per step: %zu (one unit per bucket), %zu (pairs), %zu "
        "(whole model)\n",
        rank, what.c_str(), per_unit.reductions_per_step, pairs.reductions_per_step,
        whole.reductions_per_step);
    // One rank at stage 2-3 with device gradients adds straight into its shards: nothing to reduce.
    const bool nothing = ranks == 1 && stage >= 2 && std::string(placement) == "device";
    EXPECT_EQ(per_unit.reductions_per_step, nothing ? 0u : 4u) << what;
    EXPECT_EQ(pairs.reductions_per_step, nothing ? 0u : 2u) << what;
    EXPECT_EQ(whole.reductions_per_step, nothing ? 0u : 1u) << what;
    EXPECT_EQ(overlap.reductions_per_step, nothing ? 0u : 4u) << what;
    // The reductions' timing: exposed (waited for) within in flight; without overlap_comm each
    // bucket is waited for as soon as it is issued, so all of it is exposed.
    std::printf(
        "[rank %d] %s: reductions in flight / exposed, ms: %.3f / %.3f (overlap_comm), "
        "%.3f / %.3f (one unit per bucket, no overlap)\n",
        rank, what.c_str(), overlap.reduction_s * 1e3, overlap.exposed_s * 1e3,
        per_unit.reduction_s * 1e3, per_unit.exposed_s * 1e3);
    EXPECT_GE(overlap.exposed_s, 0.0) << what;
    EXPECT_LE(overlap.exposed_s, overlap.reduction_s) << what;
    for (const TrainedRun* r : {&per_unit, &pairs, &whole})
      EXPECT_EQ(r->exposed_s, r->reduction_s) << what << ": without overlap_comm all is exposed";
    if (!nothing) {
      EXPECT_GT(per_unit.reduction_s, 0.0) << what;
    }
    for (const TrainedRun* r : {&pairs, &whole, &overlap}) {
      const std::string which = what + (r == &pairs   ? ", pairs"
                                        : r == &whole ? ", whole model"
                                                      : ", overlap_comm");
      EXPECT_EQ(compare_runs(r->losses, per_unit.losses, 1e-5,
                             which + " vs one unit per bucket, "
                                     "losses",
                             ranks, rank),
                0u);
      EXPECT_EQ(compare_runs(r->params, per_unit.params, 1e-4,
                             which + " vs one unit per bucket, "
                                     "parameters",
                             ranks, rank),
                0u);
    }
  }
}

// Two micro-batches per step, the first with gradient sync off: every unit is reduced once per
// step (not once per micro-batch), the result tracks the reference on the whole global batch,
// and at stages 2-3 the deferred full gradients are held (the mode's memory price).
TEST_P(ZeroReducerTest, DeferredSyncReducesOncePerStepAndTracksTheReference) {
  const int stage = GetParam();
  for (const char* placement : {"device", "opt_host"}) {
    if (stage == 0 && std::string(placement) != "device") continue;
    Fixture f(stage, placement, 1000000000, DType::f32, 1);  // one unit per bucket
    const size_t local = kLocalBatch * kSeq, half = local / 2;
    const size_t at = static_cast<size_t>(f.rank) * local;
    ErrorStats loss_err;
    size_t reductions = 0;
    for (int step = 0; step < 5; ++step) {
      f.ref_params.zero_grads();
      const float ref_loss = f.ref_model.forward_backward(f.ref_params, f.x.data(), f.y.data(),
                                                          f.global_batch, kSeq, 1.0f);
      f.ref_opt.step(f.ref_params, kLr, kClip);

      f.store.zero_grads();
      f.store.set_gradient_sync(false);
      const float l1 = f.model.forward_backward(f.provider, f.x.data() + at, f.y.data() + at,
                                                kLocalBatch / 2, kSeq, 0.5f);
      f.store.set_gradient_sync(true);
      const float l2 = f.model.forward_backward(
          f.provider, f.x.data() + at + half, f.y.data() + at + half, kLocalBatch / 2, kSeq, 0.5f);
      float loss = 0.5f * (l1 + l2);
      f.world.all_reduce(&loss, &loss, 1, DType::f32, comm::ReduceOp::avg);
      f.store.step(kLr, kClip);
      reductions = f.store.fetch_counters().reductions;
      loss_err.compare(loss, ref_loss, 0.0, 1e-5);
    }
    const std::string what = "stage " + std::to_string(stage) + " " + placement + " on " +
                             std::to_string(f.ranks) + " ranks, deferred first micro-batch";
    loss_err.print(what + ", loss vs reference", f.rank);
    std::printf("[rank %d] %s: %zu reductions per step\n", f.rank, what.c_str(), reductions);
    EXPECT_EQ(loss_err.bad, 0u);
    const bool nothing = f.ranks == 1 && stage >= 2 && std::string(placement) == "device";
    EXPECT_EQ(reductions, nothing ? 0u : 4u) << what;  // not 8: once per unit per step
    if (stage >= 2 && !nothing) {
      size_t full = 0;
      for (size_t u = 0; u < f.store.plan().num_units(); ++u)
        full += f.store.plan().partition(u).padded_numel * sizeof(float);
      EXPECT_GE(f.store_tracker.peak(Tier::device, Category::comm), full) << what;
    }
  }
}

// communication_data_type: the same training with the reductions' payload in bf16 or fp16
// against fp32. Each step's gradient norm (of the reduced gradient) must agree within the
// 16-bit rounding of the local gradients and of their mean, and must differ from fp32 wherever
// something is reduced (so the 16-bit path ran); after 5 steps the losses and parameters stay
// close. With nothing to reduce (one rank, stages 2-3, device gradients) the runs are identical.
TEST_P(ZeroReducerTest, SixteenBitReductionsTrackFp32Reductions) {
  const int stage = GetParam();
  const int ranks = session().world().size(), rank = session().world().rank();
  for (const char* placement : {"device", "opt_host"}) {
    if (stage == 0 && std::string(placement) != "device") continue;
    const bool nothing = ranks == 1 && stage >= 2 && std::string(placement) == "device";
    const size_t bucket = 2 * kBlockElems + 1;
    auto run = [&](DType wire, std::vector<float>& norms) {
      Fixture f(stage, placement, 1000000000, DType::f32, bucket, false,
                [&](zero::StoreConfig& c) { c.reduce_dtype = wire; });
      TrainedRun r;
      for (int step = 0; step < 5; ++step) {
        zero::StoreStepStats st;
        r.losses.push_back(store_step(f, &st));
        norms.push_back(static_cast<float>(st.grad_norm));
      }
      r.params = read_all_units(f);
      // The reducer's device buffers stay within zero's bound (the one the estimator uses). The
      // step's control exchange (two floats per rank) is the only other comm block; it comes
      // after the reductions have finished.
      const size_t peak = f.store_tracker.peak(Tier::device, Category::comm);
      const size_t control = DeviceAllocator::round_size(2 * static_cast<size_t>(ranks) * 4);
      const size_t bound = zero::reduction_buffer_bound(f.store.plan(), stage, f.store.placement(),
                                                        bucket, false, wire)
                               .device_comm;
      std::printf("[rank %d] stage %d %s, %s reductions: device comm peak %zu <= bound %zu\n", rank,
                  stage, placement, dtype_name(wire), peak, bound);
      EXPECT_LE(peak, std::max(bound, control)) << dtype_name(wire);
      return r;
    };
    std::vector<float> fp32_norms;
    const TrainedRun fp32 = run(DType::f32, fp32_norms);
    for (DType wire : {DType::bf16, DType::f16}) {
      std::vector<float> norms;
      const TrainedRun got = run(wire, norms);
      const std::string what = "stage " + std::to_string(stage) + " " + placement + " on " +
                               std::to_string(ranks) + " ranks, " + dtype_name(wire) +
                               " reductions vs fp32";
      // A rounding of the local gradient, then one per partial sum of the reduction (ranks - 1)
      // and of the mean, each of at most the unit roundoff u (2^-8 bf16, 2^-11 fp16); then fp32
      // sums. (Measured at 4 ranks: fp16 1.66e-3 relative on the norm, above 2u = 9.8e-4.)
      const double u = wire == DType::bf16 ? 1.0 / 256.0 : 1.0 / 2048.0;
      const double rtol = std::max(2, ranks) * u;
      comm::test::ErrorStats norm_err, loss_err, param_err;
      for (size_t i = 0; i < norms.size(); ++i) norm_err.compare(norms[i], fp32_norms[i], 0, rtol);
      for (size_t i = 0; i < got.losses.size(); ++i)
        loss_err.compare(got.losses[i], fp32.losses[i], 0, 1e-3);
      // Adam moves a parameter by up to about lr a step whatever its gradient's size, so where
      // rounding flips the sign of a near-zero gradient the runs part by up to 2 lr a step (a
      // loose bound: the gradient norm and the losses above are the tight checks).
      for (size_t i = 0; i < got.params.size(); ++i)
        param_err.compare(got.params[i], fp32.params[i], 2 * kLr * 5, 0.0);
      norm_err.print(what + ", gradient norm per step", rank);
      loss_err.print(what + ", loss per step", rank);
      param_err.print(what + ", parameters after 5 steps", rank);
      EXPECT_EQ(norm_err.bad, 0u) << what;
      EXPECT_EQ(loss_err.bad, 0u) << what;
      EXPECT_EQ(param_err.bad, 0u) << what;
      if (!nothing) {
        EXPECT_GT(norm_err.max_abs, 0.0) << what << ": the 16-bit reduction did not run";
      } else if (!on_cuda()) {  // on CUDA two runs differ anyway (atomics in backward)
        EXPECT_EQ(norm_err.max_abs, 0.0) << what << ": nothing is reduced, nothing is rounded";
      }
    }
  }
}

// A 16-bit reduction bound for gradient shards off the device (host or NVMe) is widened on the
// reducer's copy stream, just before its copy to the host, instead of on the compute stream: each
// rank's reduced shards reach the host once per step, whole, in fp32, and where every placement
// reduces (2 ranks or more) the training is that of the all-on-device store, which widens on the
// compute stream: bitwise on 2 ranks on the CPU, within compare_runs' tolerances on 4 (MPI may
// sum in another order) and on CUDA (whose offloaded optimizer is the CPU's). Which stream ran
// the widening only shows on CUDA; there a widening out of order with its copy would show as
// wrong gradients here and in SixteenBitReductionsTrackFp32Reductions.
TEST_P(ZeroReducerTest, SixteenBitReductionsBoundForTheHostAreWidenedBesideTheBackward) {
  const int stage = GetParam();
  if (stage < 2) GTEST_SKIP() << "stages 0-1 all-reduce in the device's full-gradient arena";
  const int ranks = session().world().size(), rank = session().world().rank();
  const size_t bucket = 2 * kBlockElems + 1;
  for (DType wire : {DType::bf16, DType::f16}) {
    std::vector<float> device_run;
    for (const char* placement : {"device", "opt_host", "opt_nvme", "opt_grads_nvme", "all_host"}) {
      const std::string name = placement;
      if (name == "all_host" && stage < 3) continue;
      Fixture f(stage, placement, 1000000000, DType::f32, bucket, false,
                [&](zero::StoreConfig& c) { c.reduce_dtype = wire; });
      ActivityLog::global().reset();
      ActivityLog::global().set_recording(true);
      constexpr int kSteps = 4;
      std::vector<float> run;
      for (int step = 0; step < kSteps; ++step) run.push_back(store_step(f));
      ActivityLog::global().set_recording(false);
      const std::vector<float> params = read_all_units(f);
      run.insert(run.end(), params.begin(), params.end());
      size_t copied = 0;
      for (const Activity& a : ActivityLog::global().activities())
        if (std::string(a.name) == "grad shard to host") copied += a.bytes;
      size_t shard_elems = 0;
      for (size_t u = 0; u < f.store.plan().num_units(); ++u)
        shard_elems += f.store.plan().partition(u).shard_numel;
      const std::string what = "stage " + std::to_string(stage) + " " + name + " on " +
                               std::to_string(ranks) + " ranks, " + dtype_name(wire) +
                               " reductions";
      const size_t want = name == "device" ? 0 : kSteps * shard_elems * sizeof(float);
      std::printf("[rank %d] %s: %zu bytes of reduced gradients to the host (%zu expected)\n", rank,
                  what.c_str(), copied, want);
      EXPECT_EQ(copied, want) << what;
      if (name == "device") {
        device_run = run;
      } else if (ranks >= 2) {
        EXPECT_EQ(
            compare_runs(run, device_run, 1e-4, what + " vs the all-on-device store", ranks, rank),
            0u);
      }
    }
  }
}

// allgather_bucket_size at stages 1-2: the updated parameters gathered a unit at a time (a bucket
// of 1 element) or all at once give the same parameters, bit for bit.
TEST_P(ZeroReducerTest, AllgatherBucketsGatherTheSameParameters) {
  const int stage = GetParam();
  if (stage != 1 && stage != 2) GTEST_SKIP() << "stages 1-2 gather after the step";
  const int ranks = session().world().size(), rank = session().world().rank();
  auto run = [&](size_t bucket) {
    Fixture f(stage, "device", 1000000000, DType::f32, 500000000, true,
              [&](zero::StoreConfig& c) { c.allgather_bucket_elems = bucket; });
    TrainedRun r;
    for (int step = 0; step < 3; ++step) r.losses.push_back(store_step(f));
    r.params = read_all_units(f);
    return r;
  };
  const TrainedRun one = run(1), all = run(500000000);
  const std::string what =
      "stage " + std::to_string(stage) + " on " + std::to_string(ranks) + " ranks";
  std::vector<float> a = one.losses, b = all.losses;
  a.insert(a.end(), one.params.begin(), one.params.end());
  b.insert(b.end(), all.params.begin(), all.params.end());
  // Bitwise on the CPU; on CUDA within compare_runs' floor (atomics in backward, see there).
  EXPECT_EQ(on_cuda() ? compare_runs(a, b, 1e-4,
                                     what + ", allgather bucket of 1 element vs 5e8, losses and "
                                            "parameters",
                                     ranks, rank)
                      : count_disagreements(a, b, 0.0, 0.0,
                                            what + ", allgather bucket of 1 element vs 5e8, "
                                                   "losses and parameters",
                                            rank, true),
            0u);
}

// While profiling, the store's copies between host and device (the parameter shards to the
// device, the reduced gradients to the host) are timed on the device timeline, on the copy
// streams that ran them: their records appear when the step's timeline is flushed, not while the
// host issues and waits for them, each copy once with its bytes, as many and as large as without
// a timeline; a collective on the host (MPI) keeps its host record. Profiling changes nothing
// of the training (bitwise). Collectives on a device stream (NCCL) take the same path, which
// needs two GPUs.
TEST_P(ZeroReducerTest, ProfiledCopiesAreTimedOnTheStreamsThatRanThem) {
  const int stage = GetParam();
  if (stage == 0) GTEST_SKIP() << "stage 0 keeps every state on the device";
  const int rank = session().world().rank();
  const std::vector<std::string> copy_names = {"param shard to device", "grad shard to host"};
  auto is_copy = [&](const Activity& a) {
    return std::find(copy_names.begin(), copy_names.end(), std::string(a.name)) != copy_names.end();
  };
  for (const char* placement : {"opt_host", "all_host"}) {
    const std::string name = placement;
    if (name == "all_host" && stage < 3) continue;
    const std::string what = "stage " + std::to_string(stage) + " " + name;
    constexpr int kSteps = 3;
    ActivityLog::global().reset();
    ActivityLog::global().set_recording(true);
    std::vector<float> plain_run;
    std::vector<Activity> plain;  // of the steps, not of reading the parameters back
    {
      Fixture f(stage, placement);
      for (int step = 0; step < kSteps; ++step) plain_run.push_back(store_step(f));
      plain = ActivityLog::global().take_activities();
      const std::vector<float> params = read_all_units(f);
      plain_run.insert(plain_run.end(), params.begin(), params.end());
    }
    (void)ActivityLog::global().take_activities();  // reading back, after the steps
    std::vector<float> timed_run;
    std::vector<Activity> issued, flushed;  // recorded while stepping; by the timeline's flush
    {
      Fixture f(stage, placement);
      DeviceTimeline timeline(*f.device);
      f.store.set_device_timeline(&timeline);
      for (int step = 0; step < kSteps; ++step) {
        timeline.begin_step(f.device->default_stream());
        const double began = monotonic_seconds();
        timed_run.push_back(store_step(f));
        f.device->default_stream().synchronize();
        for (Activity& a : ActivityLog::global().take_activities()) issued.push_back(a);
        timeline.flush();
        const double flushed_at = monotonic_seconds();
        for (Activity& a : ActivityLog::global().take_activities()) {
          if (is_copy(a)) {
            EXPECT_GE(a.start_s, began - 1e-3) << what << ": " << a.name;
            EXPECT_GE(a.end_s, a.start_s) << what << ": " << a.name;
            EXPECT_LE(a.end_s, flushed_at + 1e-3) << what << ": " << a.name;
          }
          flushed.push_back(a);
        }
      }
      f.store.set_device_timeline(nullptr);
      const std::vector<float> params = read_all_units(f);
      timed_run.insert(timed_run.end(), params.begin(), params.end());
    }
    ActivityLog::global().set_recording(false);
    for (const std::string& copy : copy_names) {
      size_t plain_count = 0, plain_bytes = 0, timed_count = 0, timed_bytes = 0, untimed = 0;
      for (const Activity& a : plain)
        if (copy == a.name) ++plain_count, plain_bytes += a.bytes;
      for (const Activity& a : flushed)
        if (copy == a.name) ++timed_count, timed_bytes += a.bytes;
      for (const Activity& a : issued) untimed += copy == a.name;
      std::printf(
          "[rank %d] %s, %s: %zu copies (%zu bytes) timed on their stream, %zu on the "
          "host; %zu (%zu bytes) without a timeline\n",
          rank, what.c_str(), copy.c_str(), timed_count, timed_bytes, untimed, plain_count,
          plain_bytes);
      EXPECT_EQ(untimed, 0u) << what << ": " << copy;
      EXPECT_EQ(timed_count, plain_count) << what << ": " << copy;
      EXPECT_EQ(timed_bytes, plain_bytes) << what << ": " << copy;
    }
    // The reduced gradients go to the host here at every stage, the shards come down at stage 3.
    EXPECT_TRUE(std::any_of(flushed.begin(), flushed.end(), is_copy)) << what;
    for (const Activity& a : flushed)
      EXPECT_NE(a.track, Track::collective) << what << ": " << a.name << " (MPI runs on the host)";
    EXPECT_EQ(compare_runs(timed_run, plain_run, 0.0, what + " profiled vs not",
                           session().world().size(), rank),
              0u);
  }
}

INSTANTIATE_TEST_SUITE_P(Stages, ZeroReducerTest, ::testing::Values(0, 1, 2, 3),
                         [](const ::testing::TestParamInfo<int>& i) {
                           return "stage" + std::to_string(i.param);
                         });

}  // namespace
