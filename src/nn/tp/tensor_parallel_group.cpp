// TensorParallelGroup: blocking collectives that start after the stream's work (an event), and
// their byte counts.
#include "tierzero/nn/tp/tensor_parallel_group.hpp"

#include "tierzero/comm/timed_collective.hpp"

namespace tierzero::nn {

TensorParallelTraffic expected_tensor_parallel_traffic(size_t num_layers, const ActivationDims& d,
                                                       bool checkpointing) {
  TensorParallelTraffic t;
  if (d.tp == 1) return t;
  const size_t L = num_layers, f = sizeof(float);
  const size_t stream = d.tokens * d.channels * f;                    // one (B*T, C) fp32 tensor
  const size_t stream16 = d.tokens * d.channels * d.compute_bytes();  // one in the compute dtype
  const size_t ck = checkpointing ? 1 : 0;
  t.all_gather_bytes = d.tokens * 3 * d.tp * f;  // the loss's partials
  size_t ar = 0, ag = 0, ag16 = 0, rs = 0;       // collectives of one stream tensor
  if (!d.sequence_parallel) {
    // forward: embedding + 2 per block; backward: 2 per block + the head's input gradient;
    // a checkpoint recompute: the attention branch's output (the MLP's is not rebuilt).
    ar = 1 + 2 * L + 2 * L + 1 + ck * L;
  } else {
    // forward: 2 gathers and 2 scatters per block, the embedding's scatter, the head's gather;
    // backward: per block 2 layernorm outputs re-gathered, 2 gradients gathered, 2 scattered;
    // the head re-gathers its input and scatters its input gradient; the embedding gathers its
    // output gradient (fp32); a recompute: 2 gathers and the attention's scatter. The norms'
    // outputs and the blocks' gradients are gathered in the compute dtype.
    ag16 = 2 * L + 1 + 4 * L + 1 + ck * 2 * L;
    ag = 1;
    rs = 1 + 2 * L + 2 * L + 1 + ck * L;
    // the layernorms' gain and bias gradients (2 C each): 2 per block and the final one
    t.all_reduce_bytes = (2 * L + 1) * 2 * d.channels * f;
  }
  t.all_reduce_bytes += ar * stream;
  t.all_gather_bytes += ag * stream + ag16 * stream16;
  t.reduce_scatter_bytes = rs * stream;
  t.calls = ar + ag + ag16 + rs + 1 + (d.sequence_parallel ? 2 * L + 1 : 0);
  return t;
}

TensorParallelGroup::TensorParallelGroup(comm::Communicator& group, Device& device,
                                         bool sequence_parallel)
    : group_(group),
      device_(device),
      sequence_parallel_(sequence_parallel && group.size() > 1),
      ready_(device.create_event()) {}

Event& TensorParallelGroup::after(Stream& stream) {
  ready_->record(stream);
  ++traffic_.calls;
  return *ready_;
}

void TensorParallelGroup::all_reduce(Stream& stream, float* x, size_t n) {
  const size_t bytes = n * sizeof(float);
  traffic_.all_reduce_bytes += bytes;
  Event* ready = &after(stream);
  comm::run_collective(timeline_, group_, ready, "tp all_reduce", bytes,
                       [&] { group_.all_reduce(x, x, n, DType::f32, comm::ReduceOp::sum, ready); });
}

void TensorParallelGroup::all_gather(Stream& stream, const void* local, void* full, size_t n,
                                     DType type) {
  const size_t bytes = n * size() * dtype_size(type);
  traffic_.all_gather_bytes += bytes;
  Event* ready = &after(stream);
  comm::run_collective(timeline_, group_, ready, "tp all_gather", bytes,
                       [&] { group_.all_gather(local, full, n, type, ready); });
}

void TensorParallelGroup::reduce_scatter(Stream& stream, const float* full, float* local,
                                         size_t n) {
  const size_t bytes = n * size() * sizeof(float);
  traffic_.reduce_scatter_bytes += bytes;
  Event* ready = &after(stream);
  comm::run_collective(timeline_, group_, ready, "tp reduce_scatter", bytes, [&] {
    group_.reduce_scatter(full, local, n, DType::f32, comm::ReduceOp::sum, ready);
  });
}

}  // namespace tierzero::nn
