// The partition arithmetic of the ZeRO store, single process: padded unit sizes, aligned shards,
// ownership, the tensor pieces of every shard, and the plan's flat offsets, for uneven sizes and
// groups of 1, 3, 4 and 8 ranks.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "tierzero/core/error.hpp"
#include "tierzero/zero/partition.hpp"

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
