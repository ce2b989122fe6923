// ModelScratch: activation memory one model shares across micro-batches, because nothing in it
// outlives one module call: the projection output a block adds into the stream, the gradients
// inside one block's (or the head-to-final-norm) backward, and with activation checkpointing the
// one block's internals that each forward and recompute rebuilds.
#pragma once

#include <cstddef>

#include "tierzero/device/device_allocator.hpp"
#include "tierzero/nn/activation_buffers.hpp"
#include "tierzero/nn/block_activations.hpp"
#include "tierzero/nn/gpt_config.hpp"

namespace tierzero::nn {

class ModelScratch {
 public:
  // Releases what it holds, then allocates for (B, T) in the given mode.
  void allocate(const GPTConfig& config, size_t B, size_t T, bool checkpointing,
                DeviceAllocator& allocator);
  void release();
  bool fits(size_t B, size_t T, bool checkpointing) const {
    return B == B_ && T == T_ && checkpointing == checkpointing_;
  }
  size_t bytes() const { return bytes_; }  // as the MemoryTracker counts them
  static size_t bytes_for(const GPTConfig& config, size_t B, size_t T, bool checkpointing);

  float* proj() const { return buffers_.proj.f32(); }            // (B, T, C)
  float* dln() const { return buffers_.dln.f32(); }              // (B, T, C)
  float* dqkv() const { return buffers_.dqkv.f32(); }            // (B, T, 3C)
  float* datty() const { return buffers_.datty.f32(); }          // (B, T, C)
  float* datt() const { return buffers_.datt.f32(); }            // (B, NH, T, T)
  float* dfch() const { return buffers_.dfch.f32(); }            // (B, T, 4C)
  float* dfch_gelu() const { return buffers_.dfch_gelu.f32(); }  // (B, T, 4C)
  BlockActs block() const;  // the checkpointing mode's one block of internals

 private:
  struct Buffers {
    BlockActivations block;  // 1 block's internals when checkpointing, else empty
    DeviceBuffer proj;       // (B, T, C) attproj / fcproj output before the residual add
    DeviceBuffer dln;        // (B, T, C) gradient of a layernorm output
    DeviceBuffer dqkv;       // (B, T, 3C)
    DeviceBuffer datty;      // (B, T, C)
    DeviceBuffer datt;       // (B, NH, T, T) the attention backward's scratch
    DeviceBuffer dfch;       // (B, T, 4C)
    DeviceBuffer dfch_gelu;  // (B, T, 4C)
  };
  static void visit(Buffers& b, const GPTConfig& config, size_t B, size_t T, bool checkpointing,
                    const BufferVisitor& fn);

  GPTConfig config_;
  size_t B_ = 0, T_ = 0;  // 0: nothing allocated
  bool checkpointing_ = false;
  Buffers buffers_;
  size_t bytes_ = 0;
};

}  // namespace tierzero::nn
