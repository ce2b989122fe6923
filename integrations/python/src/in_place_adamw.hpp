// InPlaceAdamW: OffloadAdamW's fast path for fp32 parameters in CPU memory with the moments on the
// host tier. The parameter is its own fp32 master (as DeepSpeed's CPU Adam does): the vectorised,
// multithreaded CPU AdamW kernel updates it where it lies, from its gradient where that lies, with
// Adam's m and v in one arena each of the pinned host pool under the hard budget. Nothing is
// copied: the general path (offload_adamw.cpp) moves every gradient into the partition store and
// every updated value back out, which cost ~5x the update itself.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "tierzero/kernels/kernels.hpp"
#include "tierzero/offload/host_pool.hpp"

namespace tierzero::python {

class InPlaceAdamW {
 public:
  // `numels`: each tensor's element count; the moments (2 * 4 bytes each) and a small zero
  // gradient (for tensors that have none in a step) come from `pool`, which must outlive this.
  // Throws Error when the pool's budget cannot hold them.
  InPlaceAdamW(const std::vector<size_t>& numels, offload::HostPool& pool);

  size_t size() const { return numels_.size(); }
  size_t numel(size_t i) const { return numels_.at(i); }
  float* exp_avg(size_t i);     // (numel(i))
  float* exp_avg_sq(size_t i);  // (numel(i))
  // AdamW on tensor i (torch.optim.AdamW's update; `p.step` is the 1-based step): `param`
  // (numel(i)) in place, from `grad` (numel(i)), or from zeros when grad is null.
  void update(size_t i, float* param, const float* grad, const kernels::AdamWParams& p);

 private:
  std::vector<size_t> numels_;
  std::vector<size_t> offsets_;  // (size() + 1) each tensor's first element in the arenas
  offload::PinnedBuffer m_;      // (offsets_.back()) fp32
  offload::PinnedBuffer v_;      // (offsets_.back()) fp32
  offload::PinnedBuffer zeros_;  // (kZeroElems) fp32
};

}  // namespace tierzero::python
