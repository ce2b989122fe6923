// GradientNorm: the global L2 norm of the gradient that clipping needs, over every part of the
// model wherever it lives — this rank's owned shards (device or host), the other ranks of the
// partition group, and the model-parallel groups that hold the other parts of the model. A tensor
// held identically by every rank of the replica group (TensorSpec::replicated) counts on one rank
// of it, and a unit held by every rank of the tie group (UnitSpec::tied) counts on one rank of
// that; before the norm, the tied units' gradients are summed over the tie group, so every copy
// makes the same update. Likewise the replicated tensors' gradient shards are made equal over the
// replica group (rank 0's), so every copy of a replicated tensor takes the same step even where
// the kernels that produced them add in a varying order (CUDA's atomics). Internal to the zero
// layer.
#pragma once

#include <functional>
#include <optional>
#include <vector>

#include "shard_storage.hpp"
#include "tierzero/comm/communicator.hpp"
#include "tierzero/zero/store_config.hpp"

namespace tierzero::zero {

class GradientNorm {
 public:
  // Collective over the tie group when there is one: every rank must hold the same tied units
  // cut into the same shards (the sum is element by element), else an Error on every rank.
  GradientNorm(int stage, ShardStorage& storage, comm::Communicator& group,
               const StoreGroups& groups, std::function<void()> flush_collectives);

  // Sums the gradient shards of the tied units over the tie group (collective over it; nothing
  // without one).
  void sum_tied_gradients();
  // Overwrites this rank's gradient segments of replicated tensors with replica rank 0's
  // (collective over the replica group; nothing without one).
  void sync_replicated_gradients();
  // The sum of squares of the whole model's averaged gradient, the same on every rank (collective
  // over the partition group from stage 1, and over every model-parallel group). `known` (per
  // unit, or empty): a unit's unit_sum_squares() taken earlier, when its shard became final, is
  // added in its place in unit order instead of reading the shard again — bitwise the same sum.
  double global_sum_squares(const std::vector<std::optional<double>>& known = {});
  // This rank's share of the unit's sum of squares, exactly as global_sum_squares adds it. Only
  // without tied or replicated groups of more than one rank (whose units are summed differently);
  // reads the shard only, so it may run beside the training thread once the shard is final.
  double unit_sum_squares(size_t unit);

 private:
  double local_sum_squares(const std::vector<std::optional<double>>& known);
  // A gradient shard on NVMe, streamed chunk by chunk; without the replicated tensors' segments
  // when `skip_replicated`.
  double nvme_sum_squares(size_t unit, bool skip_replicated);
  // fn(at, count, values) for each chunk of the unit's NVMe gradient shard, in order (zeros for a
  // clear shard), through one pinned chunk buffer; only chunks `wanted(at, count)` accepts (all
  // when it is empty), except that a clear shard written back is written whole. With `write_back`
  // each chunk is written back after fn (which may change it) and the shard is no longer clear.
  void each_nvme_grad_chunk(size_t unit, bool write_back,
                            const std::function<void(size_t at, size_t count, float* values)>& fn,
                            const std::function<bool(size_t at, size_t count)>& wanted = {});
  void check_tied_shapes();

  int stage_;
  ShardStorage& storage_;
  comm::Communicator& group_;
  StoreGroups groups_;
  std::function<void()> flush_collectives_;
};

}  // namespace tierzero::zero
