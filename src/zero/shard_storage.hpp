// ShardStorage: where the partition store's persistent state lives and how to reach it. It owns
// the offload resources a placement needs (the pinned host pool, the NVMe engine and its swap
// space), the state arenas (state_arenas.hpp), and a CPU Kernels object for the compute the store
// does on host-resident state (the zero layer computes only through Kernels). Every other part of
// the store — fetcher, reducer, optimizer engines — reads and writes shards through it, so the
// rules "a parameter shard is a slice of the full parameters below stage 3" and "the master is the
// parameter shard when they share a tier in fp32" live in one place. Internal to the zero layer.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "state_arenas.hpp"
#include "tierzero/device/device_allocator.hpp"
#include "tierzero/kernels/kernels.hpp"
#include "tierzero/offload/host_pool.hpp"
#include "tierzero/offload/nvme_engine.hpp"
#include "tierzero/offload/swap_space.hpp"
#include "tierzero/zero/placement.hpp"
#include "tierzero/zero/store_config.hpp"

namespace tierzero::zero {

class ShardStorage {
 public:
  // Allocates every arena (zeroed) and the offload resources the placement needs. Throws Error
  // when NVMe placement has no directory or a tier cannot hold its share.
  ShardStorage(const PartitionPlan& plan, int stage, const std::vector<UnitPlacement>& placement,
               const StoreConfig& config, DeviceAllocator& allocator);
  ~ShardStorage();
  ShardStorage(const ShardStorage&) = delete;
  ShardStorage& operator=(const ShardStorage&) = delete;

  const PartitionPlan& plan() const { return plan_; }
  int stage() const { return stage_; }
  DType working() const { return working_; }
  const std::vector<UnitPlacement>& placement() const { return placement_; }  // per unit
  const UnitPlacement& placement(size_t unit) const { return placement_[unit]; }
  Device& device() { return device_; }
  DeviceAllocator& allocator() { return allocator_; }
  StateArenas& arenas() { return *arenas_; }
  const StateArenas& arenas() const { return *arenas_; }
  offload::HostPool* host_pool() { return host_pool_.get(); }
  offload::NvmeEngine* nvme() { return nvme_.get(); }
  offload::SwapSpace* swap() { return swap_.get(); }
  // The stream host-to-device copies of offloaded shards run on, beside the compute on the
  // default stream (on the CPU backend: a worker thread), ordered by events.
  Stream& copy_stream();  // made on first use
  // The CPU kernels, for state in host memory (on the CPU backend the device's are the same
  // functions, so placements agree bitwise).
  kernels::Kernels& host_kernels() { return *host_kernels_; }
  // The kernels for state on `tier` (device or host).
  kernels::Kernels& kernels_for(Tier tier) {
    return tier == Tier::device ? device_.kernels() : *host_kernels_;
  }

  // This rank's shard of `unit`, for the kinds that may live on any tier: a device or host
  // pointer, null when it is on NVMe. Below stage 3 the parameter shard is a slice of the full
  // parameters, and the gradient shard (on the device) a slice of the full gradients.
  float* param_shard_ptr(size_t unit);  // fp32 working parameters only
  void* param_shard_raw(size_t unit);   // any working type
  float* grad_shard_ptr(size_t unit);
  // A gradient shard on NVMe is not cleared by writing zeros: it is marked clear, and the next
  // accumulation writes its values instead of adding to what is on disk (and a norm or update
  // reads zeros). Only the training thread, or the background update behind the waits that
  // order it with the reducer, touch these.
  bool grad_clear(size_t unit) const { return grad_clear_.at(unit) != 0; }
  void set_grad_clear(size_t unit, bool clear) { grad_clear_.at(unit) = clear ? 1 : 0; }
  StateBuffer master_kind(size_t unit) const;
  float* master_ptr(size_t unit);  // the fp32 master shard (the parameter shard when shared)
  // Below stage 3: the unit's full parameters on the device, working type.
  void* full_params_raw(size_t unit);

  // Writes this rank's shard (shard_numel fp32, host memory) of a shard-shaped kind (param_shard,
  // master) wherever it lives, rounded to the kind's element type. Waits until it has landed.
  void write_shard(StateBuffer kind, size_t unit, const float* host_shard);
  // The unit's whole slot of `kind` (arenas().slot: elems x elem_bytes bytes, its stored type)
  // copied to / from host memory, wherever it lives; waits until done.
  void read_slot(StateBuffer kind, size_t unit, void* host);
  void write_slot(StateBuffer kind, size_t unit, const void* host);
  // Below stage 3: sets / reads the unit's full parameters (host fp32, units[unit].numel).
  void load_full_params(size_t unit, const float* host_values);
  void read_full_params(size_t unit, float* host_values);
  // The updated master values [begin, begin + count) of the unit's shard become its working
  // parameters wherever they live, rounded once to the working type: by the device's kernel
  // where master and parameters are both on the device, else on the host (a device master is
  // copied out first). `master` is on the device when master_on_device.
  void publish_params(size_t unit, const float* master, size_t begin, size_t count,
                      bool master_on_device);
  // Where an update on the host may write the unit's new bf16 working parameters in its own pass
  // over memory (kernels::cpu::adamw_update_with_copy, the same bits as publish_params): the
  // parameter shard itself when it lives in host memory as bf16 (stage 3); else null, and
  // publish_params places them.
  uint16_t* host_bf16_params(size_t unit);
  // Where an update on the device may write the unit's new 16-bit working parameters in its own
  // pass (Kernels::adamw_update_segments with a copy, the same bits as publish_params): the
  // parameter shard when it lives on the device in the working type beside a device master that
  // is not itself the parameters; else null.
  void* device_working_params(size_t unit);

 private:
  const PartitionPlan& plan_;
  int stage_;
  DType working_;
  std::vector<UnitPlacement> placement_;
  DeviceAllocator& allocator_;
  Device& device_;
  std::unique_ptr<kernels::Kernels> host_kernels_;
  std::unique_ptr<offload::HostPool> host_pool_;  // when any state or staging is on the host
  std::unique_ptr<offload::NvmeEngine> nvme_;     // when any state is on NVMe
  std::unique_ptr<offload::SwapSpace> swap_;      // extents of nvme_
  std::unique_ptr<StateArenas> arenas_;
  std::vector<char> grad_clear_;         // (units) per unit: its NVMe gradient shard is zeros
  std::unique_ptr<Stream> copy_stream_;  // last: drained before the memory its copies read goes
};

}  // namespace tierzero::zero
