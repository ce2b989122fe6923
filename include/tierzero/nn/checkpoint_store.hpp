// CheckpointStore: where a micro-batch's block checkpoints live between its forward and its
// backward when they are not kept in the MicroBatch (the device tier). The model never knows
// where the bytes go: it asks for a device buffer to write a checkpoint into, says when the
// forward is done with it, and asks for it back, on the device, in the backward. An
// implementation writes it out behind the forward (freeing the device copy once written) and
// reads it back ahead of the backward (zero::CheckpointTier, connected in train).
//
// A checkpoint is keyed by (micro-batch, position): position p is the residual stream entering
// block p, the block's saved input. Every call is issued from the training thread, in stream
// order with the model's default stream.
#pragma once

#include <cstddef>
#include <cstdint>

namespace tierzero::nn {

class CheckpointStore {
 public:
  virtual ~CheckpointStore() = default;
  // A device buffer of `bytes` for checkpoint (micro_batch, position), which the forward writes
  // on the default stream next; valid until end_write. Writing a key again replaces it.
  virtual float* begin_write(uint64_t micro_batch, size_t position, size_t bytes) = 0;
  // The forward is done with it (its reader has been issued): it moves to its tier behind the
  // default stream's work so far. discard: no backward follows (evaluation), drop it instead.
  virtual void end_write(uint64_t micro_batch, size_t position, bool discard) = 0;
  // The backward (positions in decreasing order): the checkpoint on the device, ready for the
  // default stream's next work; the following positions are read ahead. Valid until end_read.
  virtual const float* begin_read(uint64_t micro_batch, size_t position) = 0;
  // The backward is done with it: every copy of it is freed.
  virtual void end_read(uint64_t micro_batch, size_t position) = 0;
  // Forgets every checkpoint of the micro-batch (a forward without a backward, an error).
  virtual void drop(uint64_t micro_batch) = 0;
  // How many checkpoints can be on the device at once (begun and not ended, or read ahead).
  virtual size_t device_slots() const = 0;
};

}  // namespace tierzero::nn
