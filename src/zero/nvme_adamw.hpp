// NvmeAdamW: AdamW over NVMe-resident master weights and Adam moments, streamed chunk by chunk
// through a fixed set of pinned slots (read -> update -> write), and the hand-over of its results
// to the rest of the store.
//
// The disk, not the arithmetic, bounds this step (12 bytes per parameter read and written), so
// the pipeline keeps the disk busy while the training thread computes:
//   - the slots outlive the step: once a step's writes are on disk, the slots start reading the
//     next step's first chunks, which arrive during the next forward and backward;
//   - at stage 3 on the CPU backend the pipeline runs on its own thread behind the next forward
//     (BackgroundUpdate); each unit is published as soon as its own update is computed, and a unit
//     whose parameters live on NVMe hands its new shard straight to the next fetch, so the forward
//     neither waits for the write nor reads back what was just written;
//   - refills never wait for a write while another chunk is ready to be updated.
// The chunks are the same elementwise calls as the in-memory update, so the result is bitwise
// the same. Internal to the zero layer.
#pragma once

#include <cstddef>
#include <vector>

#include "background_update.hpp"
#include "shard_storage.hpp"
#include "tierzero/kernels/kernels.hpp"
#include "tierzero/zero/store_config.hpp"

namespace tierzero::zero {

class NvmeAdamW {
 public:
  // Allocates the slots (offload_optimizer.buffer_count, registered with the NVMe engine) when
  // any unit's optimizer states are on NVMe.
  NvmeAdamW(ShardStorage& storage, BackgroundUpdate& background, const StoreConfig& config,
            const AdamWConfig& adamw);
  ~NvmeAdamW();  // waits for the slots' transfers, unregisters and frees them
  NvmeAdamW(const NvmeAdamW&) = delete;
  NvmeAdamW& operator=(const NvmeAdamW&) = delete;

  bool empty() const { return chunks_.empty(); }
  // Updates every NVMe-resident unit not marked in `updated` (per unit; empty: none is): behind
  // the next forward on the background thread when `behind_forward` (the caller then reaches
  // each unit through the BackgroundUpdate), else now.
  void step(const kernels::AdamWParams& base, bool behind_forward,
            const std::vector<char>& updated = {});
  // Updates one unit now, through the same slots and the same arithmetic (the optimizer during
  // the backward, on its worker thread; nothing else may use the pipeline meanwhile). No handoff.
  void update_unit(size_t unit, const kernels::AdamWParams& base);
  // The states changed outside the pipeline (loaded values): drops the slots' read-ahead.
  void discard_staged_reads();

 private:
  struct Chunk {
    size_t unit, begin, count;  // elements of the unit's shard
  };
  struct Slot {
    offload::PinnedBuffer master, m, v;  // (largest chunk) fp32 each
    offload::PinnedBuffer grad;          // (largest chunk) fp32, when gradients are on NVMe
    std::vector<offload::IoHandle> reads, writes;
  };
  // Updates the chunks `order` (indices into chunks_, each unit's chunks together and in order);
  // `handoffs`: a unit whose parameters live on NVMe may hand its new shard to the next fetch.
  void update_chunks(const std::vector<size_t>& order, const kernels::AdamWParams& base,
                     bool behind_forward, bool handoffs);
  // Reads into the slot of update position `position` (slot position % slots).
  void issue_read(size_t chunk, size_t position);
  // The chunk's gradient, when it is on NVMe: read at the step only (never staged ahead, since
  // the backward before the step writes it), or zeros for a clear shard.
  void issue_grad_read(size_t chunk, size_t position);
  void wait_io_quietly_all();  // every slot transfer, errors ignored (error paths)

  ShardStorage& storage_;
  BackgroundUpdate& background_;
  int stage_;
  AdamWConfig adamw_;
  std::vector<Chunk> chunks_;  // the NVMe-resident units' chunks, in update order
  std::vector<Slot> slots_;
  bool staged_ = false;  // slot i already holds (or is reading) chunk i for the next update
};

}  // namespace tierzero::zero
