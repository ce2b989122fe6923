// The partition store over model-parallel groups (needs at least 2 ranks; each rank is a
// partition group of its own, so the other ranks play the tensor- or pipeline-parallel peers):
//  - the gradient norm sums over the model-parallel groups, counting the tensors marked
//    replicated once over the replica group, against the norm computed in double on the host;
//  - units marked tied (tied embeddings on the first and last pipeline stage) have their
//    gradients summed over the tie group and count once in the norm, so every copy makes the
//    update one store holding the model once would make (the reference, run on every rank).
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "store_fixture.hpp"

using namespace tierzero;
using namespace tierzero::zero_test;

namespace {

// A value that differs by rank, index and salt, roughly in [-1, 1).
float value(int rank, size_t i, int salt) {
  return comm::test::test_value(rank, i, static_cast<uint32_t>(salt), DType::f32);
}

zero::StoreConfig config(int stage) {
  zero::StoreConfig c;
  c.stage = stage;
  c.param_persistence_threshold = 0;
  return c;
}

// Backward's part: writes `grads` (units[unit].numel) as the unit's local gradient.
void set_grads(zero::PartitionStore& store, Device& device, size_t unit,
               const std::vector<float>& grads) {
  float* g = store.acquire_grads(unit);
  device.copy(g, grads.data(), grads.size() * sizeof(float), CopyKind::host_to_device,
              device.default_stream());
  device.default_stream().synchronize();
  store.grads_done(unit);
}

std::vector<float> read(zero::PartitionStore& store, size_t unit) {
  std::vector<float> v(store.plan().units()[unit].numel);  // (numel)
  store.read_unit(unit, v.data());
  return v;
}

class ZeroGroupsTest : public ::testing::TestWithParam<int> {};

TEST_P(ZeroGroupsTest, NormCountsReplicatedTensorsOnceOverTheReplicaGroup) {
  comm::MpiCommunicator& world = session().world();
  if (world.size() < 2) GTEST_SKIP() << "needs at least 2 ranks to form a model-parallel group";
  const int stage = GetParam(), rank = world.rank(), ranks = world.size();
  std::unique_ptr<comm::MpiCommunicator> solo = world.split(rank, 0, "solo");
  std::unique_ptr<Device> device = test_device();
  // u0: a replicated LayerNorm-like tensor A and a partitioned matrix B; u1: a matrix C.
  const std::vector<zero::UnitSpec> units = {
      {"u0", 320, {{0, 100, false, true}, {128, 192, true, false}}},
      {"u1", 300, {{0, 300, true, false}}}};
  std::vector<float> g0(320, 0.0f), g1(300);      // (numel) each
  double want = 0.0, want_without_replica = 0.0;  // the sum of squares, in double
  for (size_t i = 0; i < 100; ++i) {
    g0[i] = value(0, i, 1);  // replicated: the same on every rank
    want += double{g0[i]} * g0[i];
    want_without_replica += ranks * (double{g0[i]} * g0[i]);
  }
  for (int r = 0; r < ranks; ++r) {
    for (size_t i = 0; i < 192; ++i) {
      const float b = value(r, i, 2);
      if (r == rank) g0[128 + i] = b;
      want += double{b} * b;
      want_without_replica += double{b} * b;
    }
    for (size_t i = 0; i < 300; ++i) {
      const float c = value(r, i, 3);
      if (r == rank) g1[i] = c;
      want += double{c} * c;
      want_without_replica += double{c} * c;
    }
  }
  for (bool with_replica : {true, false}) {
    DeviceAllocator alloc(*device, 0);
    zero::StoreGroups groups;
    groups.model_parallel = {&world};
    groups.replica = with_replica ? &world : nullptr;
    zero::PartitionStore store(units, config(stage), zero::AdamWConfig{}, *solo, alloc, groups);
    store.zero_grads();
    set_grads(store, *device, 1, g1);
    set_grads(store, *device, 0, g0);
    const double norm = store.step(1e-3, 0.0).grad_norm;
    const double expected = std::sqrt(with_replica ? want : want_without_replica);
    const double rel = std::fabs(norm - expected) / expected;
    std::printf(
        "[rank %d] stage %d, %d model-parallel ranks, replica group %s: norm %.9g, "
        "expected %.9g (double on the host), rel err %.3g\n",
        rank, stage, ranks, with_replica ? "on" : "off", norm, expected, rel);
    EXPECT_LT(rel, 1e-6);
  }
}

// Replicated tensors whose gradients differ in the last bits across the replica group (CUDA's
// atomics add in a varying order) still take one step: every rank takes replica rank 0's
// gradient, so the copies stay bitwise equal; the partitioned tensors keep their own.
TEST_P(ZeroGroupsTest, ReplicatedCopiesStayEqualWhenTheirGradientsDiffer) {
  comm::MpiCommunicator& world = session().world();
  if (world.size() < 2) GTEST_SKIP() << "needs at least 2 ranks to form a replica group";
  const int stage = GetParam(), rank = world.rank();
  std::unique_ptr<comm::MpiCommunicator> solo = world.split(rank, 0, "solo");
  std::unique_ptr<Device> device = test_device();
  const std::vector<zero::UnitSpec> units = {
      {"u0", 320, {{0, 100, false, true}, {128, 192, true, false}}},
      {"u1", 300, {{0, 300, true, false}}}};
  DeviceAllocator alloc(*device, 0);
  zero::StoreGroups groups;
  groups.model_parallel = {&world};
  groups.replica = &world;
  zero::PartitionStore store(units, config(stage), zero::AdamWConfig{}, *solo, alloc, groups);
  std::vector<float> p0(320), p1(300);  // (numel) the same initial values on every rank
  for (size_t i = 0; i < p0.size(); ++i) p0[i] = value(0, i, 30);
  for (size_t i = 0; i < p1.size(); ++i) p1[i] = value(0, i, 31);
  store.load_unit(0, p0.data());
  store.load_unit(1, p1.data());
  for (int step = 0; step < 3; ++step) {
    std::vector<float> g0(320, 0.0f), g1(300);  // (numel)
    for (size_t i = 0; i < 100; ++i)            // replicated: rank 0's, off by an ulp elsewhere
      g0[i] = std::nextafter(value(0, i, 40 + step), rank == 0 ? 0.0f : 2.0f);
    for (size_t i = 128; i < 320; ++i) g0[i] = value(rank, i, 50 + step);
    for (size_t i = 0; i < 300; ++i) g1[i] = value(rank, i, 60 + step);
    store.zero_grads();
    set_grads(store, *device, 1, g1);
    set_grads(store, *device, 0, g0);
    store.step(1e-2, 0.0);
  }
  std::vector<float> mine = read(store, 0), root = mine;
  world.broadcast(root.data(), root.size(), DType::f32, 0);
  size_t replicated_equal = 0, partitioned_equal = 0;
  for (size_t i = 0; i < 100; ++i) replicated_equal += mine[i] == root[i];
  for (size_t i = 128; i < 320; ++i) partitioned_equal += mine[i] == root[i];
  std::printf(
      "[rank %d] stage %d: %zu of 100 replicated values equal to rank 0's, %zu of 192 "
      "partitioned\n",
      rank, stage, replicated_equal, partitioned_equal);
  EXPECT_EQ(replicated_equal, 100u);
  if (rank != 0) {
    EXPECT_LT(partitioned_equal, 192u);
  }
}

TEST_P(ZeroGroupsTest, TiedUnitsSumTheirGradientsAndUpdateLikeOneCopy) {
  comm::MpiCommunicator& world = session().world();
  if (world.size() < 2) GTEST_SKIP() << "needs at least 2 ranks to form a tie group";
  const int stage = GetParam(), rank = world.rank(), ranks = world.size();
  std::unique_ptr<comm::MpiCommunicator> solo = world.split(rank, 0, "solo");
  std::unique_ptr<Device> device = test_device();
  // Each rank (a pipeline stage) holds the tied unit E and a unit of its own, X.
  const zero::UnitSpec e{"embeddings", 256, {{0, 200, true}, {200, 56, false}}, true};
  const zero::UnitSpec x{"x", 130, {{0, 130, true}}};
  DeviceAllocator alloc(*device, 0);
  zero::StoreGroups groups;
  groups.model_parallel = {&world};
  groups.tie = &world;
  zero::PartitionStore store({e, x}, config(stage), zero::AdamWConfig{}, *solo, alloc, groups);
  // The reference: one store holding E once and every rank's X, on this rank alone.
  std::vector<zero::UnitSpec> all = {e};
  all[0].tied = false;
  for (int r = 0; r < ranks; ++r) all.push_back({"x." + std::to_string(r), 130, {{0, 130, true}}});
  zero::PartitionStore ref(all, config(stage), zero::AdamWConfig{}, *solo, alloc);

  std::vector<float> e0(256), x0(130);  // initial values (numel)
  for (size_t i = 0; i < e0.size(); ++i) e0[i] = value(0, i, 7);
  store.load_unit(0, e0.data());
  ref.load_unit(0, e0.data());
  for (int r = 0; r < ranks; ++r) {
    for (size_t i = 0; i < x0.size(); ++i) x0[i] = value(r, i, 8);
    if (r == rank) store.load_unit(1, x0.data());
    ref.load_unit(1 + static_cast<size_t>(r), x0.data());
  }
  ErrorStats norm_err, param_err;
  size_t clipped = 0;
  for (int step = 0; step < 3; ++step) {
    std::vector<float> ge_sum(256, 0.0f);  // (numel) the tied gradient summed in rank order
    store.zero_grads();
    ref.zero_grads();
    for (int r = 0; r < ranks; ++r) {
      std::vector<float> ge(256), gx(130);  // (numel) rank r's gradients this step
      for (size_t i = 0; i < ge.size(); ++i) ge[i] = value(r, i, 10 + step);
      for (size_t i = 0; i < gx.size(); ++i) gx[i] = value(r, i, 20 + step);
      for (size_t i = 0; i < ge.size(); ++i) ge_sum[i] += ge[i];
      if (r == rank) {
        set_grads(store, *device, 1, gx);
        set_grads(store, *device, 0, ge);
      }
      set_grads(ref, *device, 1 + static_cast<size_t>(r), gx);
    }
    set_grads(ref, *device, 0, ge_sum);
    const zero::StoreStepStats got = store.step(1e-2, 4.0);
    const zero::StoreStepStats want = ref.step(1e-2, 4.0);
    norm_err.compare(static_cast<float>(got.grad_norm), static_cast<float>(want.grad_norm), 0.0,
                     1e-6);
    clipped += want.clip_scale < 1.0;
  }
  for (const auto& [mine, theirs] : {std::pair<size_t, size_t>{0, 0},
                                     std::pair<size_t, size_t>{1, 1 + static_cast<size_t>(rank)}}) {
    const std::vector<float> got = read(store, mine), want = read(ref, theirs);
    for (size_t i = 0; i < got.size(); ++i) param_err.compare(got[i], want[i], 1e-7, 1e-6);
  }
  const std::string what =
      "stage " + std::to_string(stage) + ", tied over " + std::to_string(ranks) + " ranks, 3 steps";
  norm_err.print(what + ", grad norm vs one copy", rank);
  param_err.print(what + ", parameters vs one copy", rank);
  EXPECT_EQ(norm_err.bad, 0u);
  EXPECT_EQ(param_err.bad, 0u);
  EXPECT_GT(clipped, 0u) << "clipping never engaged; lower the clip so the test exercises it";
  // Every copy of the tied unit is the same, bit for bit.
  std::vector<float> mine = read(store, 0), root = mine;
  world.broadcast(root.data(), root.size(), DType::f32, 0);
  EXPECT_EQ(mine, root);
}

// Tied copies that do not match (another size on one rank) are refused when the stores are
// built, on every rank, instead of summing mismatched gradients or hanging in the sum.
TEST(ZeroGroups, TiedUnitsOfDifferentShapesAreAnErrorOnEveryRank) {
  comm::MpiCommunicator& world = session().world();
  if (world.size() < 2) GTEST_SKIP() << "needs at least 2 ranks to form a tie group";
  const int rank = world.rank();
  std::unique_ptr<comm::MpiCommunicator> solo = world.split(rank, 0, "solo");
  std::unique_ptr<Device> device = test_device();
  DeviceAllocator alloc(*device, 0);
  const size_t numel = rank == 0 ? 256 : 320;  // rank 0's copy is another size
  const zero::UnitSpec e{"embeddings", numel, {{0, numel, true}}, true};
  zero::StoreGroups groups;
  groups.model_parallel = {&world};
  groups.tie = &world;
  try {
    zero::PartitionStore store({e}, config(3), zero::AdamWConfig{}, *solo, alloc, groups);
    ADD_FAILURE() << "tied units of different shapes were accepted";
  } catch (const Error& err) {
    const std::string m = err.what();
    std::printf("[rank %d] mismatched tied units: %s\n", rank, m.c_str());
    EXPECT_NE(m.find("tied units differ"), std::string::npos) << m;
  }
}

INSTANTIATE_TEST_SUITE_P(Stages, ZeroGroupsTest, ::testing::Values(0, 1, 2, 3),
                         [](const ::testing::TestParamInfo<int>& i) {
                           return "stage" + std::to_string(i.param);
                         });

}  // namespace
