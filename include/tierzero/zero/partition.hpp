// Partition arithmetic of the ZeRO partition store: how each unit is padded and cut into equal,
// aligned shards across the data-parallel group, and which pieces of which tensors fall into a
// rank's shard. Pure arithmetic (no memory, no communication) so that it can be tested on its
// own for any size and group, and so that every rank derives the same plan without talking.
//
// The model is described as plain data (units of tensors) rather than through nn::ParamLayout:
// `zero` sits below `nn` in the layer order (DESIGN.md) and knows nothing of GPT; whoever sits
// above both (train, or a test) translates the model's layout into these specs.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace tierzero::zero {

// Shards start on 64-element (256-byte fp32) boundaries: vector loads, cuBLASLt pointers and
// O_DIRECT chunks all want that, and it is the alignment nn's layout already uses.
constexpr size_t kShardAlignElems = 64;

// One parameter tensor inside a unit.
struct TensorSpec {
  size_t offset = 0;   // elements from the start of the unit
  size_t numel = 0;    // elements
  bool decay = false;  // AdamW weight decay applies (matrices, not biases or norms)
  // The same values on every rank of the store's replica group (a LayerNorm under tensor
  // parallelism): the global gradient norm counts it on one rank of that group only.
  bool replicated = false;
};

// One unit: the granularity of gathering and reduce-scattering (e.g. one transformer block).
// Elements of [0, numel) covered by no tensor are padding; they stay zero.
struct UnitSpec {
  std::string name;                 // for messages: "block.3"
  size_t numel = 0;                 // elements the unit spans, inner padding included
  std::vector<TensorSpec> tensors;  // ascending by offset, non-overlapping, inside [0, numel)
  // A unit that other ranks of the store's tie group hold too (tied embeddings on the first and
  // last pipeline stage): its gradient is summed over that group before every step, so every
  // copy makes the same update, and the gradient norm counts it once.
  bool tied = false;
};

// How one unit of `numel` elements is split over `ranks` ranks.
struct UnitPartition {
  size_t numel = 0;         // real extent of the unit
  size_t shard_numel = 0;   // elements per rank: ceil(numel / ranks) rounded up to the alignment
  size_t padded_numel = 0;  // shard_numel * ranks: the length of a gathered (full) unit buffer
  int ranks = 1;

  // Start of `rank`'s shard within the unit (elements).
  size_t shard_begin(int rank) const { return static_cast<size_t>(rank) * shard_numel; }
  // Elements of the unit's real extent inside `rank`'s shard (the rest of the shard is padding).
  size_t owned_numel(int rank) const;
};

// The partition of a unit of `numel` elements (numel may be 0: then every shard is empty).
// Throws Error when ranks < 1 or align_elems == 0.
UnitPartition partition_unit(size_t numel, int ranks, size_t align_elems = kShardAlignElems);

// The piece of one tensor that lies inside a rank's shard. An optimizer step runs one kernel call
// per segment, so the per-tensor decay flag is honoured even when a shard spans several tensors.
struct ShardSegment {
  size_t shard_offset = 0;  // elements from the start of the rank's shard of the unit
  size_t numel = 0;
  bool decay = false;
  size_t tensor = 0;  // index into UnitSpec::tensors
};

// Segments of `unit`'s tensors inside `rank`'s shard, ascending. Padding is in no segment.
std::vector<ShardSegment> shard_segments(const UnitSpec& unit, const UnitPartition& partition,
                                         int rank);

// Checks that a unit's tensors are ascending, non-overlapping and inside the unit; throws Error
// naming the unit and the tensor otherwise.
void validate_unit(const UnitSpec& unit);

// The whole model's partition as seen by one rank: per-unit partitions and where each unit sits
// in the two flat buffer shapes the store uses — the full (gathered) layout, units back to back
// each padded to padded_numel, and the rank's shard layout, its shards of every unit back to back.
class PartitionPlan {
 public:
  PartitionPlan(std::vector<UnitSpec> units, int ranks, int rank,
                size_t align_elems = kShardAlignElems);

  const std::vector<UnitSpec>& units() const { return units_; }
  size_t num_units() const { return units_.size(); }
  int ranks() const { return ranks_; }
  int rank() const { return rank_; }

  const UnitPartition& partition(size_t unit) const { return parts_.at(unit); }
  size_t full_offset(size_t unit) const { return full_offsets_.at(unit); }    // elements
  size_t shard_offset(size_t unit) const { return shard_offsets_.at(unit); }  // elements
  // This rank's segments of `unit`, offsets relative to the unit's shard.
  const std::vector<ShardSegment>& segments(size_t unit) const { return segments_.at(unit); }

  size_t full_numel() const { return full_numel_; }    // sum of padded_numel
  size_t shard_numel() const { return shard_numel_; }  // sum of shard_numel: one rank's share
  size_t largest_padded_numel() const { return largest_padded_; }

 private:
  std::vector<UnitSpec> units_;
  int ranks_ = 1;
  int rank_ = 0;
  std::vector<UnitPartition> parts_;
  std::vector<size_t> full_offsets_;
  std::vector<size_t> shard_offsets_;
  std::vector<std::vector<ShardSegment>> segments_;
  size_t full_numel_ = 0;
  size_t shard_numel_ = 0;
  size_t largest_padded_ = 0;
};

}  // namespace tierzero::zero
