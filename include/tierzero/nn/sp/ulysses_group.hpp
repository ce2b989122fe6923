// UlyssesGroup: DeepSpeed-Ulysses' re-sharding around the attention. Every rank of the group holds
// a slice of each sequence (T = seq_len / size() positions, all heads); the attention needs whole
// sequences, so an all-to-all re-shards a (B, T, parts, C) tensor of the slice into a
// (B, seq_len, parts, C / size()) one of this rank's heads (to_heads), and back (to_sequence). The
// packing on either side is one block transpose each (kernels' transpose_blocks), so the
// all-to-all moves contiguous blocks. Per rank and call it sends B T parts C elements of the
// tensor's dtype (fp32, or the 16-bit compute dtype: ActivationDims::compute), constant as the
// sequence and the group grow together. Buffers are the device's own memory: NCCL on CUDA,
// MPI on the CPU. Calls and bytes are counted so a benchmark can set them against the analytic
// volume (expected_ulysses_traffic).
#pragma once

#include <cstddef>
#include <memory>

#include "tierzero/comm/communicator.hpp"
#include "tierzero/device/device.hpp"
#include "tierzero/device/device_timeline.hpp"
#include "tierzero/kernels/kernels.hpp"
#include "tierzero/nn/activation_dims.hpp"
#include "tierzero/nn/recompute.hpp"

namespace tierzero::nn {

// Payload bytes of the all-to-alls: what one rank hands the collective (its send buffer), as
// nccl-tests counts "size"; (size - 1) / size of it crosses links.
struct UlyssesTraffic {
  size_t all_to_all_bytes = 0;
  size_t calls = 0;
};

// What one training micro-batch (forward, loss, backward) of a GPT moves through its Ulysses
// group, from the model's structure alone (docs/ulysses.md derives it): per block the forward's
// qkv (3 C for GPT-2; (NH + 2 KVH) hs for the grouped layout) and heads' output (NH hs: C for
// GPT-2), the backward's gradients of both and the heads' output again,
// with full recompute the forward's two again, with selective recompute the heads' output again;
// each element in the compute dtype (dims.compute). Zero at ulysses 1.
UlyssesTraffic expected_ulysses_traffic(size_t num_layers, const ActivationDims& dims,
                                        Recompute recompute);

// Scratch the re-sharding packs through: each at least (B, T, qkv row) of the compute dtype, this
// rank's slice at its widest; `bytes` is what each holds (checked on every re-shard).
struct UlyssesBuffers {
  void* send;
  void* recv;
  size_t bytes;
};

class UlyssesGroup {
 public:
  // group: the Ulysses ranks, on buffers of `device`; its rank is this rank's slice of each
  // sequence (positions rank() T ... (rank() + 1) T - 1).
  UlyssesGroup(comm::Communicator& group, Device& device);

  size_t size() const { return static_cast<size_t>(group_.size()); }
  size_t rank() const { return static_cast<size_t>(group_.rank()); }

  // out (B, size() T, parts, C / size()) = this rank's heads over the whole sequence, from every
  // rank's in (B, T, parts, C); both of dtype `type`. in may be buf.recv or out (it is read
  // before either is written).
  void to_heads(Stream& stream, const void* in, void* out, DType type, const UlyssesBuffers& buf,
                size_t B, size_t T, size_t parts, size_t C);
  // The inverse: out (B, T, parts, C) = all heads of this rank's slice, from every rank's
  // in (B, size() T, parts, C / size()). in may be buf.recv or out.
  void to_sequence(Stream& stream, const void* in, void* out, DType type, const UlyssesBuffers& buf,
                   size_t B, size_t T, size_t parts, size_t C);

  const UlyssesTraffic& traffic() const { return traffic_; }
  void reset_traffic() { traffic_ = {}; }
  // Each all-to-all is in the ActivityLog (the profile's network link) as "ulysses all_to_all"
  // with its traffic() bytes: on `timeline` where it ran while profiling on a device stream
  // (NCCL), else on the host's clock (timed_collective.hpp).
  void set_device_timeline(DeviceTimeline* timeline) { timeline_ = timeline; }

 private:
  // send (size() blocks of n elements of `type`) -> recv, after the stream's work so far.
  void exchange(Stream& stream, const void* send, void* recv, size_t n, DType type);

  comm::Communicator& group_;
  kernels::Kernels& k_;
  UlyssesTraffic traffic_;
  DeviceTimeline* timeline_ = nullptr;  // set_device_timeline
};

}  // namespace tierzero::nn
