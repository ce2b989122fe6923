// OffloadAdamW's engine, free of Python. Two paths, chosen per tensor at construction:
// - in place (fp32 CPU parameters): the parameter is its own master and the CPU kernel updates
//   it where it lies, the moments in the pinned host pool (InPlaceAdamW) or streamed from and to
//   NVMe through the pool's staging buffers (InPlaceNvmeAdamW);
// - through the store: a one-rank partition store (the zero layer) holding the tensor's fp32
//   master and moments in the pinned host pool under the hard budget or on NVMe (io_uring,
//   checksummed extents), one store unit per tensor; the step copies the gradient in, runs the
//   store's AdamW where the states live (the CPU kernel, or the NVMe read -> update -> write
//   pipeline) and reads the updated values out into the caller's fp32 buffer.
// Both share one pinned pool and its hard budget (the store's, or the engine's own when every
// tensor is updated in place). The Python binding (offload_adamw_binding.cpp) moves the tensors
// in and out through DLPack.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>
#include "in_place_adamw.hpp"
#include "in_place_nvme_adamw.hpp"
#include "tierzero/comm/mpi_communicator.hpp"
#include "tierzero/device/device.hpp"
#include "tierzero/device/device_allocator.hpp"
#include "tierzero/zero/partition_store.hpp"

namespace tierzero::python {

struct OffloadAdamWOptions {
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0.01;  // torch's AdamW defaults
  std::string state = "host";   // where masters and moments live: host or nvme
  std::string nvme_path;        // directory on the NVMe drive (state == nvme)
  size_t host_budget = 0;       // pinned host bytes the states and staging may use (0: 8 GiB)
  size_t nvme_chunk_elems = 0;  // elements per NVMe pipeline chunk (0: the store's default)
};

class OffloadAdamW {
 public:
  // `numels`: each parameter tensor's element count, in the order of every later call;
  // `in_place[i]`: tensor i is an fp32 CPU parameter that step() may update where it lies.
  // Throws Error when the states do not fit the host budget (or the NVMe
  // path cannot be used).
  OffloadAdamW(const std::vector<size_t>& numels, const std::vector<bool>& in_place,
               const OffloadAdamWOptions& options);
  ~OffloadAdamW();
  OffloadAdamW(const OffloadAdamW&) = delete;
  OffloadAdamW& operator=(const OffloadAdamW&) = delete;

  size_t size() const { return numels_.size(); }
  size_t numel(size_t i) const { return numels_.at(i); }
  bool in_place(size_t i) const { return in_place_index_.at(i) != kNone; }
  // Sets tensor i's parameters (the masters start from them): (numel(i)) fp32. Nothing to do for
  // a tensor updated in place (it is its own master).
  void load_param(size_t i, const float* values);
  // One step of AdamW with `lr`. grads[i]: tensor i's fp32 gradient (numel(i)), or null when it
  // has none this step (then it is taken as zero; torch would skip the tensor). params[i]: tensor
  // i's fp32 parameters (numel(i)), updated in place, or, for a tensor through the store,
  // overwritten with its updated master.
  void step(double lr, const std::vector<const float*>& grads, const std::vector<float*>& params);
  int64_t steps_taken() const { return steps_; }
  // The states as named blocks (kind: "param", "master", "exp_avg", "exp_avg_sq", ...).
  struct Block {
    size_t index = 0;  // tensor
    std::string kind;
    size_t begin = 0, elems = 0, elem_bytes = 4;
  };
  std::vector<Block> blocks() const;
  void save_state(const std::function<void(const Block&, const void*)>& sink);
  void load_state(const std::function<void(const Block&, void*)>& source, int64_t steps_taken);
  // Frees the store and its MPI group now (MPI is about to end; later calls throw Error).
  void release();

 private:
  static constexpr size_t kNone = ~size_t{0};
  void check_live() const;  // throws once released

  std::vector<size_t> numels_;
  std::vector<size_t> store_index_;      // (size()) tensor -> store unit, or kNone
  std::vector<size_t> in_place_index_;   // (size()) tensor -> in-place tensor, or kNone
  std::vector<size_t> store_tensor_;     // store unit -> tensor
  std::vector<size_t> in_place_tensor_;  // in-place tensor (InPlace[Nvme]AdamW) -> tensor
  OffloadAdamWOptions options_;
  int64_t steps_ = 0;
  bool released_ = false;
  // Declaration order is construction order; each part uses those above it.
  std::unique_ptr<comm::MpiCommunicator> solo_;  // a group of this process alone
  std::unique_ptr<Device> device_;
  std::unique_ptr<DeviceAllocator> allocator_;
  std::unique_ptr<offload::HostPool> own_pool_;  // when no store unit brings a pool
  std::unique_ptr<zero::PartitionStore> store_;  // null when every tensor is in place
  std::unique_ptr<InPlaceAdamW> in_place_;       // state "host": null when no tensor is in place
  std::unique_ptr<InPlaceNvmeAdamW> in_place_nvme_;  // state "nvme": likewise
};

// MPI for the module's lifetime (the store's groups and the trainer need it), created at first use
// unless the program already initialised MPI; finalised at interpreter exit, after every live
// OffloadAdamW has released its group (Python may destroy them after its exit handlers).
comm::MpiSession& module_mpi_session();
void close_module_mpi_session();

}  // namespace tierzero::python
