// UlyssesGroup: the block transposes around each all-to-all, and their analytic volume.
#include "tierzero/nn/sp/ulysses_group.hpp"

#include <string>

#include "tierzero/comm/timed_collective.hpp"
#include "tierzero/core/error.hpp"

namespace tierzero::nn {

UlyssesTraffic expected_ulysses_traffic(size_t num_layers, const ActivationDims& d,
                                        Recompute recompute) {
  UlyssesTraffic t;
  if (d.ulysses == 1) return t;
  // Per block: qkv (GPT-2: 3 C; grouped: (NH + 2 KVH) hs) and the heads' output (NH hs) forward
  // (and in the recompute), their gradients backward, and there the heads' output once more,
  // which the attention's backward reads in the heads' layout (D = rowsum(dO * O)). A selective
  // recompute re-shards the heads' output only.
  const size_t e = d.compute_bytes();
  const size_t qkv = d.tokens * d.local_qkv * d.ulysses * e;         // the whole qkv row
  const size_t heads = d.tokens * d.local_channels * d.ulysses * e;  // all heads' outputs
  const size_t forwards = 1 + (recompute.is_full() ? 1 : 0);
  const size_t core = recompute.is_selective() ? 1 : 0;
  t.all_to_all_bytes =
      num_layers * (forwards * (qkv + heads) + core * heads + (qkv + heads + heads));
  t.calls = num_layers * (forwards * 2 + core + 3);
  return t;
}

UlyssesGroup::UlyssesGroup(comm::Communicator& group, Device& device)
    : group_(group), k_(device.kernels()) {}

namespace {
void check_fits(const UlyssesBuffers& buf, size_t bytes) {
  TZ_CHECK(bytes <= buf.bytes,
           "Ulysses re-shard of " + std::to_string(bytes) + " bytes per rank exceeds its " +
               std::to_string(buf.bytes) + "-byte packing buffers",
           "internal error: the model's scratch is sized for another shape");
}
}  // namespace

void UlyssesGroup::exchange(Stream& stream, const void* send, void* recv, size_t n, DType type) {
  // The packing kernel wrote `send` on the model's stream; the all-to-all takes no event, so the
  // stream is drained first. Its blocking form returns once recv holds every rank's block.
  stream.synchronize();
  const size_t bytes = n * size() * dtype_size(type);
  comm::run_collective(timeline_, group_, nullptr, "ulysses all_to_all", bytes,
                       [&] { group_.all_to_all(send, recv, n, type); });
  traffic_.all_to_all_bytes += bytes;
  ++traffic_.calls;
}

void UlyssesGroup::to_heads(Stream& stream, const void* in, void* out, DType type,
                            const UlyssesBuffers& buf, size_t B, size_t T, size_t parts, size_t C) {
  const size_t p = size(), Cl = C / p, n = B * T * parts * Cl, e = dtype_size(type);
  check_fits(buf, n * p * e);
  // in (B T parts, p, Cl) -> send (p, B T parts, Cl): block j holds rank j's heads.
  k_.transpose_blocks(buf.send, in, B * T * parts, p, Cl * e);
  exchange(stream, buf.send, buf.recv, n, type);
  // recv (p, B, T parts Cl): block i is slice i of the sequence -> out (B, p, T parts Cl).
  k_.transpose_blocks(out, buf.recv, p, B, T * parts * Cl * e);
}

void UlyssesGroup::to_sequence(Stream& stream, const void* in, void* out, DType type,
                               const UlyssesBuffers& buf, size_t B, size_t T, size_t parts,
                               size_t C) {
  const size_t p = size(), Cl = C / p, n = B * T * parts * Cl, e = dtype_size(type);
  check_fits(buf, n * p * e);
  // in (B, p, T parts Cl) -> send (p, B, T parts Cl): block j holds slice j of the sequence.
  k_.transpose_blocks(buf.send, in, B, p, T * parts * Cl * e);
  exchange(stream, buf.send, buf.recv, n, type);
  // recv (p, B T parts, Cl): block i is rank i's heads -> out (B T parts, p, Cl).
  k_.transpose_blocks(out, buf.recv, p, B * T * parts, Cl * e);
}

}  // namespace tierzero::nn
