// TensorParallelGroup: the collectives Megatron's tensor parallelism puts between the modules,
// issued after the work on the model's stream and finished before the call returns, so a module
// reads their result on the same stream as any kernel's. Without sequence parallelism these are
// the f/g conjugates (an all-reduce of a row-parallel output in the forward, of a
// column-parallel input gradient in the backward); with it, an all-gather enters each
// tensor-parallel region and a reduce-scatter leaves it. Buffers are the device's own memory:
// the group is NCCL on CUDA, MPI on the CPU. Every call's bytes are counted so a benchmark can set
// the measured volume against the analytic one.
#pragma once

#include <cstddef>
#include <memory>

#include "tierzero/comm/communicator.hpp"
#include "tierzero/device/device.hpp"
#include "tierzero/device/device_timeline.hpp"
#include "tierzero/nn/activation_dims.hpp"
#include "tierzero/nn/tensor_meta.hpp"

namespace tierzero::nn {

// Payload bytes by collective: the all-reduced buffer, the all-gather's output, the
// reduce-scatter's input (what one rank hands the collective, as nccl-tests counts "size").
struct TensorParallelTraffic {
  size_t all_reduce_bytes = 0;
  size_t all_gather_bytes = 0;
  size_t reduce_scatter_bytes = 0;
  size_t calls = 0;
  size_t total_bytes() const { return all_reduce_bytes + all_gather_bytes + reduce_scatter_bytes; }
};

// What one training micro-batch (forward, loss, backward) of a GPT moves through its
// tensor-parallel group, from the model's structure alone (docs/tensor_parallel.md derives it):
// the analytic volume the measured traffic() is checked against. Zero at tp 1. In 16-bit compute
// (dims.compute) the all-gathers of the norms' outputs and of the blocks' output gradients move
// the compute dtype; the all-reduces and reduce-scatters (the residual stream's side), the
// embedding's gathered gradient and the loss's partials move fp32.
TensorParallelTraffic expected_tensor_parallel_traffic(size_t num_layers,
                                                       const ActivationDims& dims,
                                                       bool checkpointing);

class TensorParallelGroup {
 public:
  // group: the tensor-parallel ranks, on buffers of `device`; its rank is this rank's tp rank.
  TensorParallelGroup(comm::Communicator& group, Device& device, bool sequence_parallel);

  size_t size() const { return static_cast<size_t>(group_.size()); }
  size_t rank() const { return static_cast<size_t>(group_.rank()); }
  TensorParallel place() const { return TensorParallel{size(), rank()}; }
  bool sequence_parallel() const { return sequence_parallel_; }
  comm::Communicator& communicator() { return group_; }

  // x (n) = the sum over the group of every rank's x (n).
  void all_reduce(Stream& stream, float* x, size_t n);
  // full (size() * n) = every rank's local (n), in rank order; both of dtype `type`.
  void all_gather(Stream& stream, const void* local, void* full, size_t n, DType type);
  void all_gather(Stream& stream, const float* local, float* full, size_t n) {
    all_gather(stream, local, full, n, DType::f32);
  }
  // local (n) = block rank() of the sum over the group of full (size() * n).
  void reduce_scatter(Stream& stream, const float* full, float* local, size_t n);

  const TensorParallelTraffic& traffic() const { return traffic_; }
  void reset_traffic() { traffic_ = {}; }
  // Each collective is in the ActivityLog (the profile's network link) as "tp all_reduce",
  // "tp all_gather" or "tp reduce_scatter" with its traffic() bytes: on `timeline` where it ran
  // while profiling on a device stream (NCCL), else on the host's clock (timed_collective.hpp).
  void set_device_timeline(DeviceTimeline* timeline) { timeline_ = timeline; }

 private:
  Event& after(Stream& stream);  // an event recorded after the stream's work so far

  comm::Communicator& group_;
  Device& device_;
  bool sequence_parallel_;
  std::unique_ptr<Event> ready_;
  TensorParallelTraffic traffic_;
  DeviceTimeline* timeline_ = nullptr;  // set_device_timeline
};

}  // namespace tierzero::nn
