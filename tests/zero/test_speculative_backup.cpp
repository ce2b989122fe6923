// SpeculativeBackup (tierzero.optimizer_overlap speculative's undo): a unit's optimizer states
// and working parameter shard, saved before a speculative update and written back after it,
// come back bit for bit wherever they live — host or NVMe optimizer states, stage 1 (the working
// shard a slice of the device's full parameters) and stage 3 (working shard on the host or on
// NVMe) — while the other units are left alone; the backup takes host-pool memory (tracked as
// optimizer memory) only until release_all, and a unit whose backup the pool cannot hold is
// refused (reserve() false) rather than failing.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <ostream>
#include <string>
#include <vector>

#include "shard_storage.hpp"
#include "speculative_backup.hpp"
#include "tierzero/core/error.hpp"
#include "tierzero/core/memory_tracker.hpp"
#include "tierzero/device/device.hpp"
#include "tierzero/device/device_allocator.hpp"
#include "tierzero/zero/partition.hpp"
#include "tierzero/zero/placement.hpp"

using namespace tierzero;
using namespace tierzero::zero;

namespace {

struct Case {
  int stage;
  Tier optimizer;
  Tier param;  // stage 3 only
  const char* name;
};

std::vector<UnitSpec> units() {
  // Two units of odd sizes, several NVMe chunks each (chunk 256 elements).
  std::vector<UnitSpec> u(2);
  u[0].name = "block.0";
  u[0].numel = 700;
  u[0].tensors = {{0, 600, true, false}, {600, 100, false, false}};
  u[1].name = "block.1";
  u[1].numel = 333;
  u[1].tensors = {{0, 333, true, false}};
  return u;
}

// The kinds a backup covers, and their bytes (the whole slot; below stage 3 the working
// parameters are the full unit, of which only this rank's slice is backed up — the rest is
// compared too, to show it is untouched).
std::vector<StateBuffer> kinds(const ShardStorage& s, size_t unit) {
  std::vector<StateBuffer> k;
  for (StateBuffer b : {StateBuffer::master, StateBuffer::adam_m, StateBuffer::adam_v,
                        StateBuffer::param_shard, StateBuffer::params_full})
    if (s.arenas().has(b, unit)) k.push_back(b);
  return k;
}

std::vector<std::byte> read_all(ShardStorage& s, size_t unit) {
  std::vector<std::byte> out;
  for (StateBuffer b : kinds(s, unit)) {
    const size_t bytes = s.arenas().slot(b, unit).elems * s.arenas().elem_bytes(b);
    std::vector<std::byte> part(bytes);
    s.read_slot(b, unit, part.data());
    out.insert(out.end(), part.begin(), part.end());
  }
  return out;
}

// Writes distinct float values (seeded) into every slot of the unit.
void fill(ShardStorage& s, size_t unit, float seed) {
  size_t k = 0;
  for (StateBuffer b : kinds(s, unit)) {
    const size_t elems = s.arenas().slot(b, unit).elems;
    ASSERT_EQ(s.arenas().elem_bytes(b), sizeof(float));
    std::vector<float> v(elems);  // (elems) fp32
    for (size_t i = 0; i < elems; ++i)
      v[i] = seed + 0.001f * static_cast<float>(i) + 10.0f * static_cast<float>(k);
    s.write_slot(b, unit, v.data());
    ++k;
  }
}

size_t optimizer_host_bytes(const MemoryTracker& t) {
  return t.current(Tier::host, Category::optimizer);
}

void PrintTo(const Case& c, std::ostream* os) {
  *os << c.name;
}

class SpeculativeBackupTest : public ::testing::TestWithParam<Case> {};

}  // namespace

TEST_P(SpeculativeBackupTest, RestoresEveryStateBitForBit) {
  const Case c = GetParam();
  const char* tmp = std::getenv("TMPDIR");
  const std::string dir = tmp && *tmp ? tmp : std::filesystem::temp_directory_path().string();
  PartitionPlan plan(units(), 1, 0);
  StoreConfig cfg;
  cfg.stage = c.stage;
  cfg.placement.optimizer.tier = c.optimizer;
  if (c.stage == 3) cfg.placement.param.tier = c.param;
  cfg.placement.nvme_chunk_elems = 256;
  cfg.nvme.directories = {dir};
  cfg.nvme.block_size = 64 * 1024;
  cfg.host_budget_bytes = size_t{64} << 20;
  MemoryTracker tracker;
  std::unique_ptr<Device> device = make_cpu_device(1);
  DeviceAllocator allocator(*device, 0, tracker);
  ShardStorage storage(plan, c.stage, place_units(plan, c.stage, cfg.placement), cfg, allocator);

  fill(storage, 0, 1.0f);
  fill(storage, 1, 2.0f);
  const std::vector<std::byte> before0 = read_all(storage, 0);
  const std::vector<std::byte> before1 = read_all(storage, 1);

  SpeculativeBackup backup(storage);
  const size_t optimizer_bytes = optimizer_host_bytes(tracker);
  ASSERT_TRUE(backup.reserve(0));
  EXPECT_TRUE(backup.reserved(0));
  EXPECT_FALSE(backup.reserved(1));
  // fp32 working parameters: master (unless it is the working shard), m, v and the working shard.
  const size_t shard = plan.partition(0).shard_numel;
  const size_t expect = (storage.placement(0).master_is_param ? 3 : 4) * shard * sizeof(float);
  EXPECT_EQ(backup.bytes(0), expect);
  EXPECT_GE(optimizer_host_bytes(tracker), optimizer_bytes + expect);
  backup.save(0);

  fill(storage, 0, -5.0f);  // the speculative update, or anything else
  fill(storage, 1, 3.0f);   // a unit never backed up, changed meanwhile (the reference's update)
  const std::vector<std::byte> after1 = read_all(storage, 1);
  ASSERT_NE(read_all(storage, 0), before0);
  backup.restore(0);

  const std::vector<std::byte> got0 = read_all(storage, 0);
  size_t differing = 0;
  for (size_t i = 0; i < got0.size() && i < before0.size(); ++i) differing += got0[i] != before0[i];
  std::printf("%s: %zu of %zu bytes of unit 0 differ from before the update after restore\n",
              c.name, differing, got0.size());
  EXPECT_EQ(got0.size(), before0.size());
  EXPECT_EQ(differing, 0u);
  EXPECT_EQ(read_all(storage, 1), after1) << "restore touched a unit it did not back up";
  EXPECT_NE(after1, before1);

  backup.release_all();
  EXPECT_FALSE(backup.reserved(0));
  EXPECT_EQ(backup.held_bytes(), 0u);
  EXPECT_EQ(optimizer_host_bytes(tracker), optimizer_bytes);
  EXPECT_THROW(backup.restore(0), Error);  // nothing saved any more
}

TEST_P(SpeculativeBackupTest, AUnitWithoutRoomInTheHostPoolIsRefused) {
  const Case c = GetParam();
  const char* tmp = std::getenv("TMPDIR");
  const std::string dir = tmp && *tmp ? tmp : std::filesystem::temp_directory_path().string();
  PartitionPlan plan(units(), 1, 0);
  StoreConfig cfg;
  cfg.stage = c.stage;
  cfg.placement.optimizer.tier = c.optimizer;
  if (c.stage == 3) cfg.placement.param.tier = c.param;
  cfg.placement.nvme_chunk_elems = 256;
  cfg.nvme.directories = {dir};
  cfg.nvme.block_size = 64 * 1024;
  cfg.host_budget_bytes = size_t{64} << 20;
  MemoryTracker tracker;
  std::unique_ptr<Device> device = make_cpu_device(1);
  DeviceAllocator allocator(*device, 0, tracker);
  ShardStorage storage(plan, c.stage, place_units(plan, c.stage, cfg.placement), cfg, allocator);
  // Fill the pool's budget up to less than a page, largest blocks first.
  offload::HostPool& pool = *storage.host_pool();
  pool.release_cached();
  std::vector<offload::PinnedBuffer> filler;
  const size_t page = offload::HostPool::round_size(1);
  for (size_t bytes = cfg.host_budget_bytes; bytes >= page; bytes /= 2) {
    for (;;) {
      try {
        filler.push_back(pool.allocate(bytes, Category::io, "test filler"));
      } catch (const Error&) {
        break;
      }
    }
  }
  ASSERT_GT(SpeculativeBackup(storage).bytes(0), page);
  SpeculativeBackup backup(storage);
  std::printf("%s: host pool filled to %zu of %zu bytes; a backup takes %zu\n", c.name,
              pool.stats().in_use, pool.stats().budget, backup.bytes(0));
  EXPECT_FALSE(backup.reserve(0));
  EXPECT_FALSE(backup.reserved(0));
  EXPECT_THROW(backup.save(0), Error);
  filler.clear();
  EXPECT_TRUE(backup.reserve(0));
}

INSTANTIATE_TEST_SUITE_P(Placements, SpeculativeBackupTest,
                         ::testing::Values(Case{1, Tier::host, Tier::device, "stage1_opt_host"},
                                           Case{1, Tier::nvme, Tier::device, "stage1_opt_nvme"},
                                           Case{3, Tier::host, Tier::device, "stage3_opt_host"},
                                           Case{3, Tier::host, Tier::host, "stage3_all_host"},
                                           Case{3, Tier::nvme, Tier::nvme, "stage3_all_nvme"}),
                         [](const ::testing::TestParamInfo<Case>& i) {
                           return std::string(i.param.name);
                         });
