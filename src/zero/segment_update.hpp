// Runs an optimizer kernel over the tensor pieces of a shard range, one call per piece, so that
// weight decay follows the tensor (decayed matrices, undecayed biases and norms) and the padding,
// which is in no piece, stays zero. Shared by the in-memory and the NVMe optimizer paths, which
// must cut the same shard the same way to agree bitwise. Internal to the zero layer.
#pragma once

#include <algorithm>
#include <cstddef>
#include <vector>

#include "tierzero/kernels/kernels.hpp"
#include "tierzero/zero/partition.hpp"

namespace tierzero::zero {

// update(offset, count, params): offset relative to `begin`, in elements.
template <typename Update>
void for_segments(const std::vector<ShardSegment>& segments, size_t begin, size_t count,
                  const kernels::AdamWParams& base, float weight_decay, Update&& update) {
  for (const ShardSegment& seg : segments) {
    const size_t lo = std::max(seg.shard_offset, begin);
    const size_t hi = std::min(seg.shard_offset + seg.numel, begin + count);
    if (lo >= hi) continue;
    kernels::AdamWParams p = base;
    p.weight_decay = seg.decay ? weight_decay : 0.0f;
    update(lo - begin, hi - lo, p);
  }
}

}  // namespace tierzero::zero
