// Activation checkpoints on a tier (issue 31), at the model's level: a GPT whose checkpoints live
// in pinned host memory or on NVMe (zero::CheckpointTier behind nn::CheckpointStore) computes
// bitwise the losses, gradients and logits of the one that keeps them on the device, with one
// micro-batch or several in flight; its device activation peak falls by exactly the predicted
// bytes; a damaged activation swap file is an Error naming the file and the block; a host tier
// over its budget is refused clearly.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "tierzero/core/activity_log.hpp"
#include "tierzero/core/memory_tracker.hpp"
#include "tierzero/core/timer.hpp"
#include "tierzero/device/device_timeline.hpp"
#include "tierzero/nn/checkpoint_store.hpp"
#include "tierzero/nn/gpt.hpp"
#include "tierzero/nn/gpt_modules.hpp"
#include "tierzero/nn/param_layout.hpp"
#include "tierzero/profile/estimator.hpp"
#include "tierzero/profile/planner.hpp"
#include "tierzero/train/activation_estimate.hpp"
#include "tierzero/train/estimate_inputs.hpp"
#include "tierzero/train/store_provider.hpp"
#include "tierzero/zero/checkpoint_tier.hpp"
#include "tiny_gpt.hpp"

using namespace tierzero;
using tierzero::testing::error_of;
using tierzero::testing::tiny_config;
using tierzero::testing::TinyGpt;

namespace {

class TierStore final : public nn::CheckpointStore {
 public:
  explicit TierStore(zero::CheckpointTier& t) : t_(t) {}
  float* begin_write(uint64_t m, size_t p, size_t b) override { return t_.begin_write(m, p, b); }
  void end_write(uint64_t m, size_t p, bool d) override { t_.end_write(m, p, d); }
  const float* begin_read(uint64_t m, size_t p) override { return t_.begin_read(m, p); }
  void end_read(uint64_t m, size_t p) override { t_.end_read(m, p); }
  void drop(uint64_t m) override { t_.drop(m); }
  size_t device_slots() const override { return t_.device_slots(); }

 private:
  zero::CheckpointTier& t_;
};

struct TempDir {
  TempDir() {
    char name[] = "/tmp/tz_actoff_XXXXXX";
    path = mkdtemp(name);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
  std::string path;
};

// A TinyGpt with its checkpoints on `tier` (Tier::device: kept in the micro-batches).
struct Placed {
  Placed(const nn::GPTConfig& cfg, Tier where, const std::string& dir, size_t slots = 2)
      : gpt(cfg, 3, 16, 21) {
    gpt.model.set_activation_checkpointing(true);
    if (where == Tier::device) return;
    zero::CheckpointTierConfig c;
    c.tier = where;
    c.device_slots = slots;
    c.host_budget_bytes = size_t{64} << 20;
    c.nvme.directories = {dir};
    this->tier = std::make_unique<zero::CheckpointTier>(c, gpt.alloc);
    store = std::make_unique<TierStore>(*this->tier);
    gpt.model.set_checkpoint_store(store.get());
  }
  TinyGpt gpt;
  std::unique_ptr<zero::CheckpointTier> tier;
  std::unique_ptr<TierStore> store;
};

bool same_bits(const float* a, const float* b, size_t n) {
  return std::memcmp(a, b, n * sizeof(float)) == 0;
}

double max_abs_diff(const float* a, const float* b, size_t n) {
  double m = 0.0;
  for (size_t i = 0; i < n; ++i) m = std::max(m, std::fabs(double{a[i]} - double{b[i]}));
  return m;
}

}  // namespace

TEST(ActivationTier, HostAndNvmeAreBitIdenticalToDevice) {
  TempDir dir;
  const nn::GPTConfig cfg = tiny_config(50, 64, 16, 6, 2, 32);
  Placed ref(cfg, Tier::device, dir.path);
  Placed host(cfg, Tier::host, dir.path);
  Placed nvme(cfg, Tier::nvme, dir.path);
  const size_t n = ref.gpt.params.numel();
  double worst = 0.0;
  for (int step = 0; step < 3; ++step) {
    std::vector<float> losses;
    for (Placed* p : {&ref, &host, &nvme}) {
      TinyGpt& g = p->gpt;
      g.params.zero_grads();
      losses.push_back(g.model.forward_backward(g.params, g.x.data(), g.y.data(), g.B, g.T, 1.0f));
    }
    for (Placed* p : {&host, &nvme}) {
      worst = std::max(worst, max_abs_diff(ref.gpt.params.grads(), p->gpt.params.grads(), n));
      EXPECT_TRUE(same_bits(ref.gpt.params.grads(), p->gpt.params.grads(), n)) << "step " << step;
    }
    EXPECT_TRUE(same_bits(&losses[0], &losses[1], 1) && same_bits(&losses[0], &losses[2], 1))
        << losses[0] << " " << losses[1] << " " << losses[2];
    for (Placed* p : {&ref, &host, &nvme})
      for (size_t i = 0; i < n; ++i) p->gpt.params.params()[i] -= 0.05f * p->gpt.params.grads()[i];
  }
  // Forward only (evaluation): nothing is written out, nothing is left behind.
  const float e0 =
      ref.gpt.model.evaluate(ref.gpt.params, ref.gpt.x.data(), ref.gpt.y.data(), 3, 16);
  const size_t writes = nvme.tier->stats().writes;
  const float e2 =
      nvme.gpt.model.evaluate(nvme.gpt.params, nvme.gpt.x.data(), nvme.gpt.y.data(), 3, 16);
  EXPECT_TRUE(same_bits(&e0, &e2, 1));
  EXPECT_EQ(nvme.tier->stats().writes, writes);
  // 6 blocks, 2 slots: all 6 checkpoints stored each step (block 0's input, the embeddings'
  // output, too), 4 of them read back from the tier (the last 2 are still in their slots).
  EXPECT_EQ(host.tier->stats().writes, 18u);
  EXPECT_EQ(nvme.tier->stats().reads, 12u);
  std::printf("host and NVMe checkpoints vs device over 3 steps: max |dgrad| %.3g\n", worst);
}

TEST(ActivationTier, SeveralMicroBatchesInFlight) {
  TempDir dir;
  const nn::GPTConfig cfg = tiny_config(50, 64, 16, 5, 2, 32);
  for (Tier tier : {Tier::host, Tier::nvme}) {
    Placed ref(cfg, Tier::device, dir.path);
    Placed off(cfg, tier, dir.path, 3);
    const size_t n = ref.gpt.params.numel();
    for (Placed* p : {&ref, &off}) {
      TinyGpt& g = p->gpt;
      g.params.zero_grads();
      std::vector<nn::MicroBatch> mbs;
      for (int k = 0; k < 3; ++k) mbs.push_back(g.model.make_micro_batch(g.B, g.T));
      // Three forwards (the second on the targets as inputs), then the backwards out of order.
      g.model.forward(mbs[0], g.params, g.x.data(), g.y.data());
      g.model.forward(mbs[1], g.params, g.y.data(), g.x.data());
      g.model.forward(mbs[2], g.params, g.x.data(), g.x.data());
      g.model.backward(mbs[1], g.params, 0.5f);
      g.model.backward(mbs[2], g.params, 0.25f);
      g.model.backward(mbs[0], g.params, 0.25f);
    }
    EXPECT_TRUE(same_bits(ref.gpt.params.grads(), off.gpt.params.grads(), n))
        << tier_name(tier) << ": max |dgrad| "
        << max_abs_diff(ref.gpt.params.grads(), off.gpt.params.grads(), n);
  }
}

TEST(ActivationTier, DevicePeakFallsByThePrediction) {
  TempDir dir;
  const nn::GPTConfig cfg = tiny_config(50, 64, 16, 6, 2, 32);
  MemoryTracker& t = MemoryTracker::global();
  auto device_activation_peak = [&](Tier tier) {
    t.reset();
    Placed p(cfg, tier, dir.path, 2);
    TinyGpt& g = p.gpt;
    g.model.forward_backward(g.params, g.x.data(), g.y.data(), g.B, g.T, 1.0f);
    const size_t peak = t.peak(Tier::device, Category::activation) +
                        t.peak(Tier::device, Category::activation_checkpoint);
    EXPECT_EQ(t.peak(Tier::host, Category::activation_checkpoint),
              tier == Tier::host ? 6 * offload::HostPool::round_size(3 * 16 * 32 * 4) : 0u)
        << tier_name(tier);
    // On NVMe each stored checkpoint holds one 4 KiB-padded extent (6 KiB -> 8 KiB).
    EXPECT_EQ(t.peak(Tier::nvme, Category::activation_checkpoint),
              tier == Tier::nvme ? 6 * 8192u : 0u)
        << tier_name(tier);
    return peak;
  };
  const size_t on_device = device_activation_peak(Tier::device);
  const size_t on_host = device_activation_peak(Tier::host);
  const size_t on_nvme = device_activation_peak(Tier::nvme);
  const nn::ActivationDims d = nn::ActivationDims::of(cfg, 3, 16, 1, false, 1);
  const nn::PipelineStage whole = nn::PipelineStage::whole(cfg);
  const size_t ckpt = nn::GPT::checkpoint_bytes_for(d);
  const size_t predicted_fall = nn::GPT::micro_batch_bytes_for(cfg, d, whole, true, false) -
                                nn::GPT::micro_batch_bytes_for(cfg, d, whole, true, true) -
                                zero::CheckpointTier::device_bytes_for(2, ckpt, 6);
  // All 6 checkpoints leave the micro-batch, the first block's input (the embeddings' output)
  // too: it keeps only the stage's output of the residual stream.
  EXPECT_EQ(nn::GPT::micro_batch_bytes_for(cfg, d, whole, true, false) -
                nn::GPT::micro_batch_bytes_for(cfg, d, whole, true, true),
            6 * DeviceAllocator::round_size(ckpt));
  EXPECT_EQ(on_device, nn::GPT::activation_bytes_for(cfg, 3, 16, true));
  EXPECT_EQ(on_device - on_host, predicted_fall);
  EXPECT_EQ(on_device - on_nvme, predicted_fall);
  std::printf(
      "device activation peak: %zu B with checkpoints on the device, %zu on the host, "
      "%zu on NVMe (predicted fall %zu)\n",
      on_device, on_host, on_nvme, predicted_fall);
}

// The profile's links carry the checkpoints' traffic: each copy to the host and back once with
// its bytes, each NVMe write and read. While profiling the copies are timed on the device
// timeline where the copy stream ran them (their records come with the step's flush, not while
// the host issues them); without a timeline the host records them from issue to landing.
TEST(ActivationTier, ItsCopiesAndNvmeTransfersAreInTheProfile) {
  TempDir dir;
  const nn::GPTConfig cfg = tiny_config(50, 64, 16, 6, 2, 32);
  constexpr size_t kCheckpointBytes = 3 * 16 * 32 * sizeof(float);  // (B, T, C) fp32
  struct Seen {
    size_t count = 0, bytes = 0;
  };
  for (Tier tier : {Tier::host, Tier::nvme}) {
    for (bool profiled : {false, true}) {
      Placed p(cfg, tier, dir.path);
      TinyGpt& g = p.gpt;
      DeviceTimeline timeline(*g.device);
      if (profiled) p.tier->set_device_timeline(&timeline);
      ActivityLog::global().reset();
      ActivityLog::global().set_recording(true);
      std::vector<Activity> issued, flushed;
      for (int step = 0; step < 2; ++step) {
        timeline.begin_step(g.device->default_stream());
        const double began = monotonic_seconds();
        g.params.zero_grads();
        (void)g.model.forward_backward(g.params, g.x.data(), g.y.data(), g.B, g.T, 1.0f);
        p.tier->wait_idle();
        for (Activity& a : ActivityLog::global().take_activities()) issued.push_back(a);
        timeline.flush();
        for (Activity& a : ActivityLog::global().take_activities()) {
          EXPECT_GE(a.start_s, began - 1e-3) << a.name;
          EXPECT_GE(a.end_s, a.start_s) << a.name;
          flushed.push_back(a);
        }
      }
      ActivityLog::global().set_recording(false);
      auto seen = [](const std::vector<Activity>& log, const std::string& name) {
        Seen s;
        for (const Activity& a : log)
          if (name == a.name) ++s.count, s.bytes += a.bytes;
        return s;
      };
      std::vector<Activity> all = issued;
      all.insert(all.end(), flushed.begin(), flushed.end());
      const zero::CheckpointTierStats st = p.tier->stats();
      const Seen down = seen(all, "activation checkpoint to host");
      const Seen up = seen(all, "activation checkpoint to device");
      const Seen written = seen(all, "activation checkpoint nvme write");
      const Seen read = seen(all, "activation checkpoint nvme read");
      std::printf(
          "%s%s: %zu copies to the host (%zu bytes), %zu back (%zu bytes), %zu NVMe "
          "writes (%zu bytes), %zu reads (%zu bytes); tier: %zu writes, %zu reads\n",
          tier_name(tier), profiled ? ", profiled" : "", down.count, down.bytes, up.count, up.bytes,
          written.count, written.bytes, read.count, read.bytes, st.writes, st.reads);
      EXPECT_EQ(down.count, st.writes);
      EXPECT_EQ(down.bytes, st.writes * kCheckpointBytes);
      EXPECT_EQ(up.count, st.reads);
      EXPECT_EQ(up.bytes, st.reads * kCheckpointBytes);
      if (tier == Tier::nvme) {
        EXPECT_EQ(read.count, st.reads);
        EXPECT_EQ(read.bytes, st.reads * kCheckpointBytes);
        EXPECT_GE(written.count, st.reads);  // what is read back was written first
        EXPECT_EQ(written.bytes, written.count * kCheckpointBytes);
      } else {
        EXPECT_EQ(written.count + read.count, 0u);
      }
      EXPECT_GT(st.reads, 0u);
      // Profiled, the copies are the timeline's; otherwise the host's.
      const Seen timed_down = seen(flushed, "activation checkpoint to host");
      const Seen timed_up = seen(flushed, "activation checkpoint to device");
      EXPECT_EQ(timed_down.count, profiled ? down.count : 0u);
      EXPECT_EQ(timed_up.count, profiled ? up.count : 0u);
    }
  }
}

TEST(ActivationTier, DamagedSwapFileNamesFileAndBlock) {
  TempDir dir;
  const nn::GPTConfig cfg = tiny_config(50, 64, 16, 6, 2, 32);
  Placed p(cfg, Tier::nvme, dir.path, 2);
  TinyGpt& g = p.gpt;
  nn::MicroBatch mb = g.model.make_micro_batch(g.B, g.T);
  g.model.forward(mb, g.params, g.x.data(), g.y.data());
  p.tier->wait_idle();  // every checkpoint is on the drive
  // Block 2's checkpoint is not among the last ones still in a device slot: it is read back.
  const auto [file, offset] = p.tier->locate(mb.id(), 2);
  const std::string path = p.tier->nvme()->file_path(file);
  const int fd = ::open(path.c_str(), O_WRONLY);
  ASSERT_GE(fd, 0) << path;
  const char junk[17] = "not a checkpoint";
  ASSERT_EQ(::pwrite(fd, junk, sizeof junk, static_cast<off_t>(offset + 100)),
            static_cast<ssize_t>(sizeof junk));
  ::close(fd);
  const std::string err = error_of([&] { g.model.backward(mb, g.params, 1.0f); });
  std::printf("error: %s\n", err.c_str());
  EXPECT_NE(err.find("block 2"), std::string::npos) << err;
  EXPECT_NE(err.find(path), std::string::npos) << err;
}

TEST(ActivationTier, HostBudgetTooSmallIsRefused) {
  const nn::GPTConfig cfg = tiny_config(50, 64, 16, 6, 2, 32);
  TinyGpt g(cfg, 3, 16, 21);
  g.model.set_activation_checkpointing(true);
  zero::CheckpointTierConfig c;
  c.tier = Tier::host;
  c.device_slots = 2;
  c.host_budget_bytes = 8192;  // two checkpoints of 6 KiB do not fit
  zero::CheckpointTier tier(c, g.alloc);
  TierStore store(tier);
  g.model.set_checkpoint_store(&store);
  const std::string err =
      error_of([&] { g.model.forward_backward(g.params, g.x.data(), g.y.data(), g.B, g.T, 1.0f); });
  EXPECT_NE(err.find("activation checkpoint"), std::string::npos) << err;
}

// The planner searches the checkpoints' tier: at a device budget that the estimate with the
// checkpoints on the host fits and no configuration with them on the device does, it chooses
// the host (checkpoints dominate this model: 32 blocks of (1024, 8) floats, few parameters, so
// no optimizer or parameter offload saves as much).
TEST(ActivationTier, PlannerPlacesCheckpointsOffTheDevice) {
  const nn::GPTConfig cfg = tiny_config(50, 64, 1024, 32, 1, 8);
  const size_t B = 1, T = 1024;
  auto placed = [&](size_t b, Tier tier) {
    const nn::ActivationDims db = nn::ActivationDims::of(cfg, b, T, 1, false, 1);
    const train::ActivationEstimate a = train::activation_estimate(
        cfg, db, {}, nn::PipelineSchedule::one_f_one_b, 1, true, tier, 2);
    return profile::PlanRequest::PlacedActivations{a.activation_bytes, a.checkpoints};
  };
  profile::PlanRequest req;
  req.base.units = train::units_from_layout(nn::gpt_param_layout(cfg), 1);
  req.seq_len = T;
  req.target_global_batch = B;
  req.activation_bytes = [&](size_t b, profile::RecomputeMode m) {
    return nn::GPT::activation_bytes_for(cfg, b, T, train::recompute_of(m));
  };
  req.placed_checkpoints = placed;
  // The estimate at stage 0 with the checkpoints on the host, micro-batch B: its device bytes
  // are the budget (with the margin).
  profile::EstimateInput in = req.base;
  const profile::PlanRequest::PlacedActivations host = placed(B, Tier::host);
  in.activation_bytes = host.activation_bytes;
  in.checkpoints = host.checkpoints;
  const size_t device_need = profile::estimate(in).tier_total(Tier::device);
  req.budget = {static_cast<size_t>(static_cast<double>(device_need) / (1.0 - req.margin)) + 1,
                size_t{1} << 30, size_t{1} << 30};
  const profile::PlanResult any = profile::plan(req);
  ASSERT_TRUE(any.found);
  EXPECT_TRUE(any.best.checkpointing());
  EXPECT_NE(any.best.checkpoint_tier, Tier::device) << any.best.describe();
  req.only_checkpoint_tier = static_cast<size_t>(Tier::device);
  const profile::PlanResult on_device = profile::plan(req);
  EXPECT_FALSE(on_device.found) << on_device.best.describe();
  std::printf("device budget %zu B: chosen %s\n", req.budget[0], any.best.describe().c_str());
}
