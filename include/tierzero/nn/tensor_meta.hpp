// TensorMeta: what a module declares about one of its parameter tensors — its full
// (unpartitioned) shape and how tensor parallelism cuts it — so that a per-rank layout can be
// built from the modules alone, and checkpoints, initialisation and the gradient norm can map
// between a rank's local piece and the full tensor.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "tierzero/core/tensor.hpp"

namespace tierzero::nn {

// The tensor kinds: GPT-2's in llm.c's checkpoint order, then the Llama family's untied head.
// The Llama modules reuse GPT-2's kinds for their counterparts (qkvw: the fused q, k, v in the
// grouped layout; fcw: the fused gate and up projections; ln*w: the RMSNorm gains).
enum class ParamKind {
  wte,
  wpe,
  ln1w,
  ln1b,
  qkvw,
  qkvb,
  attprojw,
  attprojb,
  ln2w,
  ln2b,
  fcw,
  fcb,
  fcprojw,
  fcprojb,
  lnfw,
  lnfb,
  lmheadw  // the untied head (Llama 3 8B); tied models read wte
};
constexpr size_t kNumParamKinds = 17;
constexpr size_t kNumGpt2ParamKinds = 16;  // wte ... lnfb: what an llm.c checkpoint holds
const char* param_kind_name(ParamKind k);

// This rank's place in its tensor-parallel group.
struct TensorParallel {
  size_t size = 1;        // ranks that split each partitioned tensor
  size_t rank = 0;        // in [0, size)
  void validate() const;  // throws Error unless size >= 1 and rank < size
};

// One contiguous run of the full tensor's indices along the partition dim.
struct IndexRange {
  size_t start;
  size_t length;
  bool operator==(const IndexRange&) const = default;
};

struct TensorMeta {
  ParamKind kind;
  int layer;         // block index, or -1 for embeddings and the final layernorm
  Shape full_shape;  // unpartitioned, e.g. (3C, C) for qkvw
  bool decay;        // weight decay applies (matrices), not biases or norms
  // The dim tensor parallelism cuts; -1: replicated, every tp rank holds the whole tensor.
  int partition_dim = -1;
  // The dim is this many fused parts laid end to end, each cut separately, so every rank holds
  // its share of each (fused QKV: 3, so a rank's rows are its q, its k and its v).
  size_t partition_stride = 1;
  // Elements along the dim that must stay on one rank (an attention head's channels), so a
  // split that would cut one is refused.
  size_t partition_granule = 1;

  bool replicated() const { return partition_dim < 0; }
  std::string name() const;  // "block.3.qkvw", "wte"
  // The shape tp_size ranks each hold. Throws Error naming the tensor when tp_size does not
  // divide the partitioned dim into whole granules of every fused part.
  Shape local_shape(size_t tp_size) const;
  // The indices along partition_dim of the full tensor that tp.rank holds, in local order (one
  // range per fused part); the whole dim when replicated.
  std::vector<IndexRange> local_ranges(const TensorParallel& tp) const;
  // Calls fn(full_offset, local_offset, elements) for each contiguous run of tp.rank's piece, in
  // local order: where each local element sits in the full tensor (row-major).
  void for_each_local_run(const TensorParallel& tp,
                          const std::function<void(size_t, size_t, size_t)>& fn) const;
  // Copies tp.rank's piece of `full` (full_shape, row-major) into `local` (local_shape).
  void copy_local_piece(const TensorParallel& tp, const float* full, float* local) const;
  // The inverse: writes tp.rank's piece `local` (local_shape) into its place in `full`.
  void place_local_piece(const TensorParallel& tp, const float* local, float* full) const;
};

}  // namespace tierzero::nn
