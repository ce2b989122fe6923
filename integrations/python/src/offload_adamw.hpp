// OffloadAdamW's engine, free of Python: a one-rank partition store (the zero layer) holding a
// model's fp32 masters and Adam moments in the pinned host pool under a hard budget or on NVMe
// (io_uring, checksummed extents), one store unit per parameter tensor. The step takes each
// tensor's fp32 gradient, runs the store's AdamW where the states live (the CPU kernel, or the
// NVMe read -> update -> write pipeline) and hands back the updated parameters. The Python
// binding (offload_adamw_binding.cpp) moves the tensors in and out through DLPack.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>
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
  // `numels`: each parameter tensor's element count, in the order of every later call. Throws
  // Error when the states do not fit the host budget (or the NVMe path cannot be used).
  OffloadAdamW(const std::vector<size_t>& numels, const OffloadAdamWOptions& options);
  ~OffloadAdamW();
  OffloadAdamW(const OffloadAdamW&) = delete;
  OffloadAdamW& operator=(const OffloadAdamW&) = delete;

  size_t size() const { return numels_.size(); }
  size_t numel(size_t i) const { return numels_.at(i); }
  // Sets tensor i's parameters (the masters start from them): (numel(i)) fp32.
  void load_param(size_t i, const float* values);
  // One step: `grad(i, out)` writes tensor i's gradient into `out` (numel(i) fp32), or returns
  // false when the tensor has none this step (its gradient is zero, as torch skips it: see
  // step()'s note in the binding); then AdamW with `lr`; then `param(i, values)` receives the
  // updated parameters of each tensor.
  void step(double lr, const std::function<bool(size_t, float*)>& grad,
            const std::function<void(size_t, const float*)>& param);
  int64_t steps_taken() const { return store().steps_taken(); }
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
  zero::PartitionStore& store() const;  // throws once released

  std::vector<size_t> numels_;
  OffloadAdamWOptions options_;
  std::unique_ptr<comm::MpiCommunicator> solo_;  // a group of this process alone
  std::unique_ptr<Device> device_;
  std::unique_ptr<DeviceAllocator> allocator_;
  std::unique_ptr<zero::PartitionStore> store_;
  std::vector<float> scratch_;  // (largest numel) one tensor's values on their way out
};

// MPI for the module's lifetime (the store's groups and the trainer need it), created at first use
// unless the program already initialised MPI; finalised at interpreter exit, after every live
// OffloadAdamW has released its group (Python may destroy them after its exit handlers).
comm::MpiSession& module_mpi_session();
void close_module_mpi_session();

}  // namespace tierzero::python
