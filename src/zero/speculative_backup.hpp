// SpeculativeBackup: what tierzero.optimizer_overlap speculative needs to undo a unit's update
// exactly. Before the optimizer updates a unit during the backward as if the clip coefficient
// were 1 (and nothing overflowed), the unit's optimizer states and working parameters are copied
// here; when the step finds that clipping binds or the fp16 gradients overflowed, the copies are
// written back, bit for bit, wherever the states live (device, host or NVMe), and the step
// updates the unit again with the real coefficient (or skips it) as the reference order does.
//
// One pinned block per backed-up unit, from the store's host pool (so it counts against the
// host budget, tracked as host `optimizer` memory, "zero speculative backup"); a unit whose
// block the pool cannot hold is not backed up, and the caller updates it at the step instead.
// reserve() and restore() run on the training thread, save() on the optimizer's worker (after
// the unit was handed over). Internal to the zero layer.
#pragma once

#include <cstddef>
#include <vector>

#include "shard_storage.hpp"
#include "tierzero/offload/host_pool.hpp"

namespace tierzero::zero {

class SpeculativeBackup {
 public:
  explicit SpeculativeBackup(ShardStorage& storage);

  // Host bytes one unit's backup takes: its fp32 master (unless the master is the working
  // shard), Adam m and v, and its working parameter shard.
  size_t bytes(size_t unit) const;
  // Takes the unit's block from the host pool; false (nothing held) when the pool has no room.
  bool reserve(size_t unit);
  bool reserved(size_t unit) const { return unit < reserved_.size() && reserved_[unit] != 0; }
  // Copies the unit's states into its block (reserved first); before its update.
  void save(size_t unit);
  // Writes the saved states back where they live; waits until they have landed. A stage-3
  // caller drops the unit's gathered copy and read-aheads first.
  void restore(size_t unit);
  void release_all();  // every block back to the pool
  size_t held_bytes() const;

 private:
  // The parts of a unit's block, in order: (kind, bytes). The working shard is `params_full`'s
  // slice below stage 3, `param_shard` at stage 3.
  struct Part {
    StateBuffer kind;
    size_t bytes;
  };
  std::vector<Part> parts(size_t unit) const;
  // The working parameter shard to / from host memory (shard_numel x the working type's bytes).
  void read_working(size_t unit, void* host);
  void write_working(size_t unit, const void* host);

  ShardStorage& storage_;
  std::vector<offload::PinnedBuffer> blocks_;  // per unit: (bytes(unit)) or empty
  std::vector<char> reserved_;                 // per unit: reserve() succeeded (bytes may be 0)
};

}  // namespace tierzero::zero
