// The partition store's persistent state buffers: for each kind of state (placement.hpp's
// StateBuffer) one arena per tier holding that kind for every unit placed on the tier, units back
// to back in unit order — a DeviceBuffer on the device, one pinned block on the host, and on NVMe
// one swap extent per chunk of each unit. Sizes follow placement.hpp exactly, so the tracker's
// model-state bytes are the ones model_state_bytes() predicts. Internal to the zero layer.
#pragma once

#include <array>
#include <cstddef>
#include <vector>

#include "tierzero/device/device_allocator.hpp"
#include "tierzero/offload/host_pool.hpp"
#include "tierzero/offload/nvme_engine.hpp"
#include "tierzero/offload/swap_space.hpp"
#include "tierzero/zero/placement.hpp"

namespace tierzero::zero {

class StateArenas {
 public:
  struct Slot {
    Tier tier = Tier::device;
    size_t elems = 0;   // 0: the unit has none of this kind
    size_t offset = 0;  // elements from the start of the tier's arena (device, host)
    std::vector<offload::Extent> chunks;  // nvme: consecutive chunks of at most chunk_elems
  };
  struct Kind {
    DeviceBuffer device;         // (sum of device slots) elements of elem_bytes
    offload::PinnedBuffer host;  // (sum of host slots) elements of elem_bytes
    std::vector<Slot> slots;     // per unit
    size_t elem_bytes = 4;       // the working type's size for the working parameters, else 4
  };

  // Allocates every arena (zeroed) for `plan` and `placement`; nvme slots need `swap`, host ones
  // `pool`.
  StateArenas(const PartitionPlan& plan, int stage, const std::vector<UnitPlacement>& placement,
              const PlacementConfig& config, DeviceAllocator& allocator, offload::HostPool* pool,
              offload::SwapSpace* swap);
  ~StateArenas();
  StateArenas(const StateArenas&) = delete;
  StateArenas& operator=(const StateArenas&) = delete;

  const Slot& slot(StateBuffer b, size_t unit) const {
    return kinds[static_cast<size_t>(b)].slots.at(unit);
  }
  bool has(StateBuffer b, size_t unit) const { return slot(b, unit).elems > 0; }
  // Device or host memory of the unit's slot (null when it is on NVMe or absent); ptr() only
  // for fp32 kinds.
  void* raw(StateBuffer b, size_t unit);
  float* ptr(StateBuffer b, size_t unit);
  size_t elem_bytes(StateBuffer b) const { return kinds[static_cast<size_t>(b)].elem_bytes; }

  // NVMe: reads / writes `count` elements of the unit's slot starting at element `begin` (chunk
  // aligned: begin is a multiple of chunk_elems, count reaches a chunk end or the slot end)
  // to / from host memory; returns the handles to wait on.
  std::vector<offload::IoHandle> read(StateBuffer b, size_t unit, size_t begin, size_t count,
                                      void* dst);
  std::vector<offload::IoHandle> write(StateBuffer b, size_t unit, size_t begin, size_t count,
                                       const void* src);

  std::array<Kind, kNumStateBuffers> kinds;
  size_t chunk_elems = 0;
  offload::SwapSpace* swap = nullptr;
};

// Waits for every handle; the first failure is rethrown after all have finished, so no buffer is
// freed under a transfer still in flight.
void wait_io(std::vector<offload::IoHandle>& handles);
// The same for error paths: waits for every handle, ignores failures, clears the list.
void wait_io_quietly(std::vector<offload::IoHandle>& handles);
// Every handle has finished (successfully or not); never blocks.
bool io_finished(const std::vector<offload::IoHandle>& handles);

}  // namespace tierzero::zero
