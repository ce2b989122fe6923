// InPlaceNvmeAdamW: OffloadAdamW's fast path for fp32 parameters in CPU memory with the moments
// on NVMe. As on the host path the parameter is its own fp32 master; only Adam's m and v live in
// the swap files (io_uring, CRC32C-checked extents), and each chunk holds its elements' m followed
// by their v, so one StreamPipeline pass reads both ahead, the CPU AdamW updates parameter and
// moments, and the pass writes the moments behind: 8 bytes per parameter each way, where the
// store's path (masters, m and v on NVMe, gradients and parameters copied in and out) moves 12
// plus its copies. The tensors are laid end to end in one swap tensor so that small tensors share
// chunks and the pipeline never drains between tensors.
#pragma once
#include <cstddef>
#include <functional>
#include <memory>
#include <vector>

#include "tierzero/kernels/kernels.hpp"
#include "tierzero/offload/host_pool.hpp"
#include "tierzero/offload/nvme_engine.hpp"
#include "tierzero/offload/stream_pipeline.hpp"
#include "tierzero/offload/swap_space.hpp"

namespace tierzero::python {

class InPlaceNvmeAdamW {
 public:
  // `numels`: each tensor's element count. The pipeline's `buffer_count` staging buffers of
  // chunk_elems elements' m and v come from `pool` (which must outlive this). The moments go to
  // `shared` (a swap space another part keeps on the drive, which must outlive this) or, when it
  // is null, to swap files of this object's own engine under nvme.directories. They start at zero
  // (written once, here). Throws Error when the pool's budget cannot hold the buffers or the
  // drive refuses the files.
  InPlaceNvmeAdamW(const std::vector<size_t>& numels, offload::HostPool& pool,
                   offload::SwapSpace* shared, const offload::NvmeOptions& nvme, size_t chunk_elems,
                   size_t buffer_count);
  ~InPlaceNvmeAdamW();
  InPlaceNvmeAdamW(const InPlaceNvmeAdamW&) = delete;
  InPlaceNvmeAdamW& operator=(const InPlaceNvmeAdamW&) = delete;

  size_t size() const { return numels_.size(); }

  // AdamW on every tensor (torch.optim.AdamW's update; `p.step` is the 1-based step): params[i]
  // (numel i) in place from grads[i] (numel i), or from zeros where grads[i] is null.
  void step(const std::vector<float*>& params, const std::vector<const float*>& grads,
            const kernels::AdamWParams& p);

  // A tensor's elements [begin, begin + count) that lie in one chunk: the unit in which the
  // moments are saved and loaded, in chunk order.
  struct Piece {
    size_t tensor, begin, count;
  };
  std::vector<Piece> pieces() const;
  // Calls `sink` with every piece's m and v (count elements each), in pieces() order.
  void save(const std::function<void(const Piece&, const float* m, const float* v)>& sink);
  // Fills every piece's m and v from `source`, in pieces() order, and writes them to the drive.
  void load(const std::function<void(const Piece&, float* m, float* v)>& source);

 private:
  // Calls fn for each tensor segment of the chunk of `count` elements starting at global
  // element `begin`: (piece, offset of the piece within the chunk).
  void for_each_piece(size_t begin, size_t count,
                      const std::function<void(const Piece&, size_t at)>& fn) const;

  std::vector<size_t> numels_;
  std::vector<size_t> offsets_;  // (size() + 1) each tensor's first element, end to end
  size_t chunk_elems_;
  std::unique_ptr<offload::NvmeEngine> own_engine_;  // null with a shared swap space
  std::unique_ptr<offload::SwapSpace> own_swap_;
  offload::SwapSpace* swap_ = nullptr;  // own_swap_ or the shared one
  std::unique_ptr<offload::StreamPipeline> pipeline_;
  std::vector<offload::Extent> extents_;  // chunk c: m then v of its elements
  offload::PinnedBuffer zeros_;           // (kZeroElems) fp32, for tensors without a gradient
};

}  // namespace tierzero::python
