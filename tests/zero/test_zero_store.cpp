// The partition store against the one-rank reference, under mpiexec (1, 2 and 4 ranks): a tiny
// GPT trained 20 steps with AdamW and clipping on a fixed global batch, at ZeRO stages 0-3. Each
// rank trains on its contiguous slice of the global batch through the store; every rank also
// runs the reference (nn::LocalParams + train::AdamWOptimizer) on the whole global batch, so it
// can check every step's global loss and gradient norm, and the final parameters, locally. At
// stage 3 the store's own MemoryTracker must show about 1/N of the unsharded model state.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "mpi_test_main.hpp"
#include "tierzero/core/error.hpp"
#include "tierzero/core/memory_tracker.hpp"
#include "tierzero/core/random.hpp"
#include "tierzero/nn/gpt.hpp"
#include "tierzero/train/adamw_optimizer.hpp"
#include "tierzero/train/store_provider.hpp"
#include "tierzero/zero/partition_store.hpp"

using namespace tierzero;
using comm::test::ErrorStats;
using comm::test::session;

namespace {

nn::GPTConfig tiny_config() {
  nn::GPTConfig cfg;
  cfg.vocab_size = 61;
  cfg.padded_vocab_size = 64;
  cfg.max_seq_len = 16;
  cfg.num_layers = 2;
  cfg.num_heads = 4;
  cfg.channels = 32;
  return cfg;
}

constexpr size_t kLocalBatch = 2;  // sequences per rank
constexpr size_t kSeq = 16;
constexpr double kLr = 3e-3;
// Low enough that the early steps clip (the norm starts near 2), so clipping is exercised.
constexpr double kClip = 1.0;
constexpr size_t kPersistenceThreshold = 1000;  // the final layernorm (128 elements) persists

// Everything one rank needs: the reference model on the global batch and the store-backed model
// on this rank's slice, starting from the same parameters.
struct Fixture {
  explicit Fixture(int stage)
      : world(session().world()),
        ranks(world.size()),
        rank(world.rank()),
        cfg(tiny_config()),
        global_batch(kLocalBatch * static_cast<size_t>(ranks)),
        device(make_cpu_device()),
        ref_alloc(*device, 0),
        ref_model(cfg, ref_alloc),
        ref_params(ref_model.layout(), ref_alloc),
        ref_opt(optimizer, ref_model.layout(), ref_alloc),
        store_alloc(*device, 0, store_tracker),
        store(tierzero::train::units_from_layout(ref_model.layout()), store_config(stage),
              optimizer, world, store_alloc),
        provider(store),
        model(cfg, ref_alloc),
        x(global_batch * kSeq),
        y(global_batch * kSeq) {
    const nn::ParamLayout& layout = ref_model.layout();
    std::vector<float> init(layout.total_numel());  // (total_numel) host
    nn::init_gpt2_params(layout, cfg, 1234, init.data());
    device->copy(ref_params.params(), init.data(), init.size() * sizeof(float),
                 CopyKind::host_to_device, device->default_stream());
    for (size_t u = 0; u < layout.units().size(); ++u)
      store.load_unit(u, init.data() + layout.units()[u].offset);
    Rng rng(99);  // the same global batch on every rank
    for (size_t i = 0; i < x.size(); ++i) {
      x[i] = static_cast<int32_t>(rng.below(cfg.vocab_size));
      y[i] = static_cast<int32_t>(rng.below(cfg.vocab_size));
    }
  }

  static zero::StoreConfig store_config(int stage) {
    zero::StoreConfig c;
    c.stage = stage;
    c.param_persistence_threshold = kPersistenceThreshold;
    return c;
  }

  comm::MpiCommunicator& world;
  int ranks, rank;
  nn::GPTConfig cfg;
  size_t global_batch;
  OptimizerConfig optimizer;
  std::unique_ptr<Device> device;
  DeviceAllocator ref_alloc;  // reference state and both models' activations (global tracker)
  nn::GPT ref_model;
  nn::LocalParams ref_params;
  train::AdamWOptimizer ref_opt;
  MemoryTracker store_tracker;  // only the store's bytes: its model state per rank
  DeviceAllocator store_alloc;
  zero::PartitionStore store;
  tierzero::train::StoreParamProvider provider;
  nn::GPT model;              // runs on this rank's slice through the store
  std::vector<int32_t> x, y;  // (global_batch, kSeq) inputs and targets
};

class ZeroStoreTest : public ::testing::TestWithParam<int> {};

TEST_P(ZeroStoreTest, TrainsLikeTheOneRankReference) {
  const int stage = GetParam();
  Fixture f(stage);
  const size_t local = kLocalBatch * kSeq;  // tokens per rank
  ErrorStats loss_err, norm_err;
  size_t clipped = 0;
  for (size_t step = 0; step < 20; ++step) {
    f.ref_params.zero_grads();
    const float ref_loss = f.ref_model.forward_backward(f.ref_params, f.x.data(), f.y.data(),
                                                        f.global_batch, kSeq, 1.0f);
    const train::StepStats ref_stats = f.ref_opt.step(f.ref_params, kLr, kClip);

    f.store.zero_grads();
    const size_t at = static_cast<size_t>(f.rank) * local;
    float loss = f.model.forward_backward(f.provider, f.x.data() + at, f.y.data() + at, kLocalBatch,
                                          kSeq, 1.0f);
    f.world.all_reduce(&loss, &loss, 1, DType::f32, comm::ReduceOp::avg);  // the global loss
    const zero::StoreStepStats stats = f.store.step(kLr, kClip);

    loss_err.compare(loss, ref_loss, 0.0, 1e-5);
    // The norm is looser: per-rank gradients summed in another order differ by ~1e-7, and 20
    // Adam steps on one fixed batch amplify that in the gradient (seen: 3e-5) far more than in
    // the loss (seen: 1e-7). On one rank both are bitwise equal to the reference.
    norm_err.compare(static_cast<float>(stats.grad_norm), static_cast<float>(ref_stats.grad_norm),
                     0.0, 1e-4);
    if (ref_stats.clip_scale < 1.0) ++clipped;
  }
  const std::string what =
      "stage " + std::to_string(stage) + " on " + std::to_string(f.ranks) + " ranks, 20 steps";
  loss_err.print(what + ", loss vs reference", f.rank);
  norm_err.print(what + ", grad norm vs reference", f.rank);
  EXPECT_EQ(loss_err.bad, 0u) << "loss beyond 1e-5 relative of the reference";
  EXPECT_EQ(norm_err.bad, 0u);
  EXPECT_GT(clipped, 0u) << "clipping never engaged; lower kClip so the test exercises it";

  // Final parameters: every real element close to the reference (1e-4 absolute is a thirtieth of
  // one Adam step at this learning rate; seen: 4e-5 on 4 ranks, 0 on one), every padding element
  // zero.
  const nn::ParamLayout& layout = f.ref_model.layout();
  ErrorStats param_err;
  size_t nonzero_padding = 0;
  size_t units_differing_from_rank0 = 0;
  for (size_t u = 0; u < layout.units().size(); ++u) {
    const nn::ParamUnit& unit = layout.units()[u];
    std::vector<float> got(unit.numel);  // (unit.numel) host
    f.store.read_unit(u, got.data());
    std::vector<char> real(unit.numel, 0);  // (unit.numel) 1 where a tensor element lives
    for (size_t ti : unit.tensors) {
      const nn::ParamTensor& t = layout.tensors()[ti];
      for (size_t i = 0; i < t.numel; ++i) {
        const size_t j = t.offset - unit.offset + i;
        real[j] = 1;
        param_err.compare(got[j], f.ref_params.params()[t.offset + i], 1e-4, 1e-4);
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

  if (stage == 3) {
    // Between steps a rank holds its shards of params, grads, m and v (16 bytes per element of
    // its share) plus the gathered persistent units; during the step it also holds at most one
    // gathered non-persistent unit at a time (this GPT never nests two of them).
    const zero::PartitionPlan& plan = f.store.plan();
    const MemoryTracker& mt = f.store_tracker;
    const size_t model_state = mt.current(Tier::device, Category::param) +
                               mt.current(Tier::device, Category::grad) +
                               mt.current(Tier::device, Category::optimizer);
    size_t persistent_bytes = 0;
    for (size_t u = 0; u < plan.num_units(); ++u)
      if (f.store.persistent(u)) persistent_bytes += plan.partition(u).padded_numel * sizeof(float);
    const size_t unsharded = 16 * layout.total_numel();  // fp32 params, grads, m, v; one rank
    const size_t n = static_cast<size_t>(f.ranks);
    const size_t per_rank = unsharded / n;
    // Shards are padded to 64 elements per unit; the allocator rounds blocks to 512 bytes.
    const size_t slack = plan.num_units() * zero::kShardAlignElems * 16 + 8 * 512;
    const size_t largest_unit_bytes = plan.largest_padded_numel() * sizeof(float);
    const size_t param_peak = mt.peak(Tier::device, Category::param);
    const size_t param_bound =
        plan.shard_numel() * sizeof(float) + persistent_bytes + largest_unit_bytes + 2 * 512;
    std::printf(
        "[rank %d] stage 3 on %d ranks: model-state bytes on the device tier %zu (unsharded %zu, "
        "1/N %zu, persistent gathered %zu, ratio to 1/N %.3f); param peak %zu (bound: shard + "
        "persistent + largest unit %zu = %zu); device peak incl. grads in flight %zu\n",
        f.rank, f.ranks, model_state, unsharded, per_rank, persistent_bytes,
        static_cast<double>(model_state - persistent_bytes) / static_cast<double>(per_rank),
        param_peak, largest_unit_bytes, param_bound, mt.peak(Tier::device));
    EXPECT_GE(model_state, 16 * plan.shard_numel());
    EXPECT_LE(model_state, per_rank * 105 / 100 + persistent_bytes + slack);
    EXPECT_LE(param_peak, param_bound);
  }
}

// Two micro-batches per step (grad_scale 1/2 each) accumulate to the whole local batch's gradient:
// at stages 2-3 in the shard accumulators, at 0-1 in the all-reduced full gradients.
TEST_P(ZeroStoreTest, AccumulatesMicroBatches) {
  const int stage = GetParam();
  Fixture f(stage);
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
  loss_err.print("stage " + std::to_string(stage) + " on " + std::to_string(f.ranks) +
                     " ranks, 2 micro-batches x 5 steps, loss vs reference",
                 f.rank);
  EXPECT_EQ(loss_err.bad, 0u);
}

// Calls out of order fail with an Error before anything is communicated, so every rank throws
// alike and the group stays usable.
TEST_P(ZeroStoreTest, MisuseIsAnError) {
  Fixture f(GetParam());
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

TEST(ZeroStore, UnknownStageIsAnError) {
  zero::StoreConfig c;
  c.stage = 4;
  std::unique_ptr<Device> device = make_cpu_device();
  DeviceAllocator alloc(*device, 0);
  std::vector<zero::UnitSpec> units = {{"u", 64, {{0, 64, true}}}};
  EXPECT_THROW(zero::PartitionStore(units, c, OptimizerConfig{}, session().world(), alloc), Error);
}

INSTANTIATE_TEST_SUITE_P(Stages, ZeroStoreTest, ::testing::Values(0, 1, 2, 3),
                         [](const ::testing::TestParamInfo<int>& i) {
                           return "stage" + std::to_string(i.param);
                         });

}  // namespace
