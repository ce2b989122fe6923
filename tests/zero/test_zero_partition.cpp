// The partition arithmetic of the ZeRO store, single process: padded unit sizes, aligned shards,
// ownership, the tensor pieces of every shard, and the plan's flat offsets, for uneven sizes and
// groups of 1, 3, 4 and 8 ranks.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "tierzero/core/error.hpp"
#include "tierzero/zero/partition.hpp"
#include "tierzero/zero/placement.hpp"
#include "tierzero/zero/unit_groups.hpp"

using namespace tierzero;
using namespace tierzero::zero;

namespace {

// A unit with tensors of the given sizes, each starting at a 64-element boundary (as nn lays
// them out), alternating decay.
UnitSpec make_unit(const std::string& name, const std::vector<size_t>& sizes) {
  UnitSpec u;
  u.name = name;
  size_t at = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    u.tensors.push_back(TensorSpec{at, sizes[i], i % 2 == 0});
    at = (at + sizes[i] + 63) / 64 * 64;
  }
  u.numel = at;
  return u;
}

}  // namespace

TEST(ZeroPartition, PaddedAlignedAndCovering) {
  for (int ranks : {1, 3, 4, 8}) {
    for (size_t numel : {size_t{0}, size_t{1}, size_t{63}, size_t{64}, size_t{65}, size_t{1000},
                         size_t{4097}, size_t{12800}, size_t{100003}}) {
      const UnitPartition p = partition_unit(numel, ranks);
      SCOPED_TRACE("numel " + std::to_string(numel) + ", ranks " + std::to_string(ranks));
      EXPECT_EQ(p.shard_numel % kShardAlignElems, 0u);
      EXPECT_EQ(p.padded_numel, p.shard_numel * static_cast<size_t>(ranks));
      EXPECT_EQ(p.padded_numel % static_cast<size_t>(ranks), 0u);
      EXPECT_GE(p.padded_numel, numel);
      // Minimal: one alignment step less per shard would not hold the unit.
      if (p.shard_numel > 0) {
        EXPECT_LT((p.shard_numel - kShardAlignElems) * static_cast<size_t>(ranks), numel);
      } else {
        EXPECT_EQ(numel, 0u);
      }
      size_t owned = 0;
      for (int r = 0; r < ranks; ++r) {
        EXPECT_EQ(p.shard_begin(r), static_cast<size_t>(r) * p.shard_numel);
        EXPECT_LE(p.owned_numel(r), p.shard_numel);
        owned += p.owned_numel(r);
      }
      EXPECT_EQ(owned, numel);
    }
  }
}

TEST(ZeroPartition, KnownValues) {
  // 1000 elements on 3 ranks: ceil(1000/3) = 334 -> 384 per shard; the last rank holds 232.
  const UnitPartition p = partition_unit(1000, 3);
  EXPECT_EQ(p.shard_numel, 384u);
  EXPECT_EQ(p.padded_numel, 1152u);
  EXPECT_EQ(p.owned_numel(0), 384u);
  EXPECT_EQ(p.owned_numel(2), 232u);
  // 65 elements on 8 ranks: 64 per shard; ranks 2..7 own nothing.
  const UnitPartition q = partition_unit(65, 8);
  EXPECT_EQ(q.shard_numel, 64u);
  EXPECT_EQ(q.owned_numel(1), 1u);
  EXPECT_EQ(q.owned_numel(2), 0u);
  EXPECT_EQ(q.owned_numel(7), 0u);
  // One rank: the shard is the unit, rounded up to the alignment.
  const UnitPartition one = partition_unit(100, 1);
  EXPECT_EQ(one.shard_numel, 128u);
  EXPECT_EQ(one.owned_numel(0), 100u);
}

TEST(ZeroPartition, SegmentsSplitAtTensorBoundaries) {
  const UnitSpec unit = make_unit("u", {32, 32, 3072, 96, 1024, 7, 4096, 129});
  for (int ranks : {1, 3, 4, 8}) {
    SCOPED_TRACE("ranks " + std::to_string(ranks));
    const UnitPartition p = partition_unit(unit.numel, ranks);
    std::vector<int> covered(p.padded_numel, 0);  // (padded_numel) times each element is in a piece
    for (int r = 0; r < ranks; ++r) {
      size_t prev_end = 0;
      for (const ShardSegment& s : shard_segments(unit, p, r)) {
        EXPECT_GE(s.shard_offset, prev_end);  // ascending, non-overlapping
        EXPECT_LE(s.shard_offset + s.numel, p.shard_numel);
        EXPECT_GT(s.numel, 0u);
        const TensorSpec& t = unit.tensors[s.tensor];
        const size_t at = p.shard_begin(r) + s.shard_offset;  // position in the unit
        EXPECT_GE(at, t.offset);
        EXPECT_LE(at + s.numel, t.offset + t.numel);
        EXPECT_EQ(s.decay, t.decay);
        for (size_t i = 0; i < s.numel; ++i) ++covered[at + i];
        prev_end = s.shard_offset + s.numel;
      }
    }
    // Every tensor element is in exactly one piece; padding (inner and tail) in none.
    std::vector<int> want(p.padded_numel, 0);
    for (const TensorSpec& t : unit.tensors)
      for (size_t i = 0; i < t.numel; ++i) want[t.offset + i] = 1;
    EXPECT_EQ(covered, want);
  }
}

TEST(ZeroPartition, PlanOffsets) {
  std::vector<UnitSpec> units = {make_unit("embeddings", {61 * 32, 16 * 32}),
                                 make_unit("block.0", {32, 32, 3072, 96}), make_unit("empty", {}),
                                 make_unit("final_norm", {32, 32})};
  for (int ranks : {1, 3, 4, 8}) {
    for (int rank = 0; rank < ranks; ++rank) {
      const PartitionPlan plan(units, ranks, rank);
      size_t full = 0, shard = 0, largest = 0;
      for (size_t u = 0; u < units.size(); ++u) {
        EXPECT_EQ(plan.full_offset(u), full);
        EXPECT_EQ(plan.shard_offset(u), shard);
        EXPECT_EQ(plan.shard_offset(u) % kShardAlignElems, 0u);
        EXPECT_EQ(plan.full_offset(u) % kShardAlignElems, 0u);
        full += plan.partition(u).padded_numel;
        shard += plan.partition(u).shard_numel;
        largest = std::max(largest, plan.partition(u).padded_numel);
      }
      EXPECT_EQ(plan.full_numel(), full);
      EXPECT_EQ(plan.shard_numel(), shard);
      EXPECT_EQ(plan.largest_padded_numel(), largest);
    }
  }
}

TEST(ZeroPartition, BadInputIsAnError) {
  EXPECT_THROW(partition_unit(10, 0), Error);
  EXPECT_THROW(partition_unit(10, 2, 0), Error);
  UnitSpec overlapping{"bad", 100, {{0, 60, true}, {50, 10, false}}};
  EXPECT_THROW(validate_unit(overlapping), Error);
  UnitSpec outside{"bad", 100, {{90, 20, true}}};
  EXPECT_THROW(validate_unit(outside), Error);
  EXPECT_THROW(PartitionPlan({}, 2, 2), Error);
  try {
    validate_unit(outside);
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("unit bad"), std::string::npos) << e.what();
  }
}

// Units grouped by identity (unit_groups.hpp) give the per-unit rules' bytes: an embedding, runs
// of alike blocks (one with a replicated tensor, as tensor parallelism marks LayerNorms), a
// different block between them and a head, for every stage, group and an offloaded prefix that
// ends inside a run.
TEST(ZeroPartition, GroupedBytesEqualPerUnitBytes) {
  std::vector<UnitSpec> units = {make_unit("embeddings", {5000, 700})};
  UnitSpec block = make_unit("block", {64, 64, 3000, 100, 4000, 64});
  block.tensors[1].replicated = true;
  for (int i = 0; i < 6; ++i) units.push_back(block);
  units.push_back(make_unit("odd", {333, 12}));
  for (int i = 0; i < 5; ++i) units.push_back(block);
  units.push_back(make_unit("head", {77}));
  const std::vector<UnitRun> runs = identical_runs(units);
  ASSERT_EQ(runs.size(), 5u);
  for (int ranks : {1, 3, 4})
    for (int stage = 0; stage <= 3; ++stage)
      for (Tier param : {Tier::device, Tier::host, Tier::nvme})
        for (Tier optim : {Tier::device, Tier::host, Tier::nvme})
          for (double ratio : {1.0, 0.4}) {
            if ((param != Tier::device && stage != 3) || (optim != Tier::device && stage == 0))
              continue;
            PlacementConfig config;
            config.param = {param, ratio};
            config.optimizer = {optim, 0.7};
            config.nvme_chunk_elems = 1000;
            config.working = ratio < 1.0 ? DType::bf16 : DType::f32;
            if (optim == Tier::nvme && stage >= 2) config.nvme_grads = Tier::nvme;
            const PartitionPlan plan(units, ranks, 0);
            const std::vector<UnitPlacement> placement = place_units(plan, stage, config);
            const std::vector<UnitGroup> groups =
                group_units(runs, units.size(), ranks, stage, config);
            size_t count = 0;
            for (const UnitGroup& g : groups) count += g.count;
            EXPECT_EQ(count, units.size());
            EXPECT_LT(groups.size(), units.size());
            const StateBytes a = model_state_bytes(plan, stage, placement, config);
            const StateBytes b = model_state_bytes(groups, stage, config);
            EXPECT_EQ(a.bytes, b.bytes) << "stage " << stage << " ranks " << ranks;
            const OptimizerSwapShape sa = optimizer_swap_shape(plan, placement, 1000, 4);
            const OptimizerSwapShape sb = optimizer_swap_shape(groups, 1000, 4);
            EXPECT_EQ(sa.chunks, sb.chunks);
            EXPECT_EQ(sa.largest_chunk, sb.largest_chunk);
            EXPECT_EQ(sa.slots, sb.slots);
            EXPECT_EQ(sa.buffers, sb.buffers);
            for (DType wire : {DType::f32, DType::bf16}) {
              const ReductionBuffers ra =
                  reduction_buffer_bound(plan, stage, placement, 2500, true, wire);
              const ReductionBuffers rb =
                  reduction_buffer_bound(groups, ranks, stage, 2500, true, wire);
              EXPECT_EQ(ra.device_comm, rb.device_comm);
              EXPECT_EQ(ra.host_io, rb.host_io);
              EXPECT_EQ(ra.widened_in_elems, rb.widened_in_elems);
              EXPECT_EQ(ra.widened_out_elems, rb.widened_out_elems);
            }
            EXPECT_EQ(max_replicated_shard_elems(plan), max_replicated_shard_elems(groups, ranks));
          }
}
