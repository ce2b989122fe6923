// Partition arithmetic: padded unit sizes, aligned shards, and the tensor pieces of each shard.
#include "tierzero/zero/partition.hpp"

#include <algorithm>

#include "tierzero/core/error.hpp"

namespace tierzero::zero {

size_t UnitPartition::owned_numel(int rank) const {
  const size_t begin = shard_begin(rank);
  if (begin >= numel) return 0;
  return std::min(shard_numel, numel - begin);
}

UnitPartition partition_unit(size_t numel, int ranks, size_t align_elems) {
  TZ_CHECK(ranks >= 1, "partition_unit: group of " + std::to_string(ranks) + " ranks",
           "a partition group has at least one rank");
  TZ_CHECK(align_elems >= 1, "partition_unit: shard alignment of 0 elements",
           "use kShardAlignElems (64)");
  const auto n = static_cast<size_t>(ranks);
  UnitPartition p;
  p.numel = numel;
  p.ranks = ranks;
  const size_t per_rank = (numel + n - 1) / n;
  p.shard_numel = (per_rank + align_elems - 1) / align_elems * align_elems;
  p.padded_numel = p.shard_numel * n;
  return p;
}

void validate_unit(const UnitSpec& unit) {
  size_t end = 0;
  for (size_t i = 0; i < unit.tensors.size(); ++i) {
    const TensorSpec& t = unit.tensors[i];
    TZ_CHECK(t.offset >= end && t.offset <= unit.numel && t.numel <= unit.numel - t.offset,
             "unit " + unit.name + ": tensor " + std::to_string(i) + " at offset " +
                 std::to_string(t.offset) + " (" + std::to_string(t.numel) +
                 " elements) overlaps the previous tensor or leaves the unit (" +
                 std::to_string(unit.numel) + " elements)",
             "tensors must be ascending, non-overlapping and inside their unit");
    end = t.offset + t.numel;
  }
}

std::vector<ShardSegment> shard_segments(const UnitSpec& unit, const UnitPartition& partition,
                                         int rank) {
  const size_t begin = partition.shard_begin(rank);
  const size_t end = begin + partition.shard_numel;
  std::vector<ShardSegment> out;
  for (size_t i = 0; i < unit.tensors.size(); ++i) {
    const TensorSpec& t = unit.tensors[i];
    const size_t lo = std::max(begin, t.offset);
    const size_t hi = std::min(end, t.offset + t.numel);
    if (lo >= hi) continue;
    out.push_back(ShardSegment{lo - begin, hi - lo, t.decay, i});
  }
  return out;
}

PartitionPlan::PartitionPlan(std::vector<UnitSpec> units, int ranks, int rank, size_t align_elems)
    : units_(std::move(units)), ranks_(ranks), rank_(rank) {
  TZ_CHECK(rank >= 0 && rank < ranks,
           "PartitionPlan: rank " + std::to_string(rank) + " outside a group of " +
               std::to_string(ranks),
           "pass the rank within the partition group");
  for (const UnitSpec& u : units_) {
    validate_unit(u);
    const UnitPartition p = partition_unit(u.numel, ranks, align_elems);
    parts_.push_back(p);
    full_offsets_.push_back(full_numel_);
    shard_offsets_.push_back(shard_numel_);
    segments_.push_back(shard_segments(u, p, rank));
    full_numel_ += p.padded_numel;
    shard_numel_ += p.shard_numel;
    largest_padded_ = std::max(largest_padded_, p.padded_numel);
  }
}

}  // namespace tierzero::zero
