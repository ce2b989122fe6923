// The partition store's persistent state arenas (see state_arenas.hpp).
#include "state_arenas.hpp"

#include <algorithm>
#include <cstring>
#include <exception>
#include <string>

#include "tierzero/core/activity_log.hpp"
#include "tierzero/core/error.hpp"
#include "tierzero/core/timer.hpp"

namespace tierzero::zero {

void wait_io(std::vector<offload::IoHandle>& handles) {
  std::exception_ptr first;
  for (auto& h : handles) {
    try {
      h.wait();
    } catch (...) {
      if (!first) first = std::current_exception();
    }
  }
  handles.clear();
  if (first) std::rethrow_exception(first);
}

void wait_io_quietly(std::vector<offload::IoHandle>& handles) {
  for (auto& h : handles) {
    try {
      h.wait();
    } catch (const Error&) {
    }
  }
  handles.clear();
}

bool io_finished(const std::vector<offload::IoHandle>& handles) {
  return std::all_of(handles.begin(), handles.end(),
                     [](const offload::IoHandle& h) { return h.poll(); });
}

StateArenas::StateArenas(const PartitionPlan& plan, int stage,
                         const std::vector<UnitPlacement>& placement, const PlacementConfig& config,
                         DeviceAllocator& allocator, offload::HostPool* pool,
                         offload::SwapSpace* swap_space)
    : chunk_elems(config.nvme_chunk_elems), swap(swap_space) {
  TZ_CHECK(chunk_elems > 0, "PartitionStore: NVMe chunk of 0 elements",
           "offload_optimizer.buffer_size must be positive");
  Device& device = allocator.device();
  for (size_t b = 0; b < kNumStateBuffers; ++b) {
    const auto kind = static_cast<StateBuffer>(b);
    const Category category = state_buffer_category(kind);
    Kind& k = kinds[b];
    k.slots.resize(plan.num_units());
    k.elem_bytes = state_elem_bytes(kind, config.working);
    size_t device_elems = 0, host_elems = 0;
    for (size_t u = 0; u < plan.num_units(); ++u) {
      for (Tier tier : {Tier::device, Tier::host, Tier::nvme}) {
        const size_t e = unit_state_elems(plan, stage, placement, u, kind, tier);
        if (e == 0) continue;
        Slot& s = k.slots[u];
        s.tier = tier;
        s.elems = e;
        if (tier == Tier::device) {
          s.offset = device_elems;
          device_elems += e;
        } else if (tier == Tier::host) {
          s.offset = host_elems;
          host_elems += e;
        } else {
          TZ_CHECK(swap != nullptr, "PartitionStore: NVMe state without a swap space", "");
          for (size_t at = 0; at < e; at += chunk_elems) {
            const size_t n = std::min(chunk_elems, e - at);
            s.chunks.push_back(swap->allocate(n * k.elem_bytes, category, "zero nvme state"));
          }
        }
      }
    }
    // Labels name the arena in the tracker timeline and in over-budget errors.
    static const char* const kDeviceLabels[kNumStateBuffers] = {
        "zero params (full)", "zero grads (full)",  "zero param shards", "zero grad shards",
        "zero master shards", "zero adam m shards", "zero adam v shards"};
    static const char* const kHostLabels[kNumStateBuffers] = {
        "zero host params (full)", "zero host grads (full)",  "zero host param shards",
        "zero host grad shards",   "zero host master shards", "zero host adam m shards",
        "zero host adam v shards"};
    if (device_elems > 0) {
      k.device = allocator.allocate(device_elems * k.elem_bytes, category, kDeviceLabels[b]);
      device.fill_zero(k.device.data(), device_elems * k.elem_bytes, device.default_stream());
    }
    if (host_elems > 0) {
      TZ_CHECK(pool != nullptr, "PartitionStore: host state without a host pool", "");
      k.host = pool->allocate(host_elems * k.elem_bytes, category, kHostLabels[b]);
      std::memset(k.host.data(), 0, host_elems * k.elem_bytes);
    }
  }
  device.default_stream().synchronize();
  // NVMe state starts as zeros on disk too, so every chunk has a checksum before its first read.
  if (!swap) return;
  size_t largest = 0;
  for (const Kind& k : kinds)
    for (const Slot& s : k.slots)
      for (const offload::Extent& e : s.chunks) largest = std::max(largest, e.bytes);
  const std::vector<float> zeros(largest / sizeof(float), 0.0f);  // (largest chunk) fp32
  std::vector<offload::IoHandle> writes;
  for (size_t b = 0; b < kNumStateBuffers; ++b)
    for (const Slot& s : kinds[b].slots)
      for (const offload::Extent& e : s.chunks) writes.push_back(swap->write(e, zeros.data()));
  wait_io(writes);
}

StateArenas::~StateArenas() {
  if (!swap) return;
  for (Kind& k : kinds)
    for (Slot& s : k.slots)
      for (const offload::Extent& e : s.chunks) swap->free(e);
}

void* StateArenas::raw(StateBuffer b, size_t unit) {
  Kind& k = kinds[static_cast<size_t>(b)];
  const Slot& s = k.slots.at(unit);
  if (s.elems == 0) return nullptr;
  if (s.tier == Tier::device)
    return static_cast<std::byte*>(k.device.data()) + s.offset * k.elem_bytes;
  if (s.tier == Tier::host) return k.host.bytes_ptr() + s.offset * k.elem_bytes;
  return nullptr;
}

float* StateArenas::ptr(StateBuffer b, size_t unit) {
  TZ_CHECK(elem_bytes(b) == sizeof(float),
           std::string("PartitionStore: ") + state_buffer_name(b) + " is not fp32",
           "internal error: 16-bit working parameters are reached through raw()");
  return static_cast<float*>(raw(b, unit));
}

namespace {

template <typename Fn>
std::vector<offload::IoHandle> for_chunks(const StateArenas::Slot& s, size_t chunk, size_t begin,
                                          size_t count, Fn&& fn) {
  // fn(extent, elements from `begin`) issues one chunk's transfer.
  TZ_CHECK(s.tier == Tier::nvme && begin % chunk == 0 && begin + count <= s.elems &&
               (count % chunk == 0 || begin + count == s.elems),
           "PartitionStore: NVMe transfer of elements [" + std::to_string(begin) + ", " +
               std::to_string(begin + count) + ") is not chunk aligned",
           "internal error: transfers cover whole chunks");
  std::vector<offload::IoHandle> handles;
  for (size_t at = begin; at < begin + count; at += chunk)
    handles.push_back(fn(s.chunks.at(at / chunk), at - begin));
  return handles;
}

}  // namespace

std::vector<offload::IoHandle> StateArenas::read(StateBuffer b, size_t unit, size_t begin,
                                                 size_t count, void* dst) {
  const auto u = static_cast<int64_t>(unit);
  const size_t eb = elem_bytes(b);
  return for_chunks(
      slot(b, unit), chunk_elems, begin, count, [&](const offload::Extent& e, size_t at) {
        const double t0 = monotonic_seconds();
        return swap->read(e, static_cast<std::byte*>(dst) + at * eb,
                          [t0, u](const offload::IoResult& r) {
                            ActivityLog::global().record(Track::nvme_read, "nvme read", t0,
                                                         monotonic_seconds(), r.bytes, u);
                          });
      });
}

std::vector<offload::IoHandle> StateArenas::write(StateBuffer b, size_t unit, size_t begin,
                                                  size_t count, const void* src) {
  const auto u = static_cast<int64_t>(unit);
  const size_t eb = elem_bytes(b);
  return for_chunks(
      slot(b, unit), chunk_elems, begin, count, [&](const offload::Extent& e, size_t at) {
        const double t0 = monotonic_seconds();
        return swap->write(e, static_cast<const std::byte*>(src) + at * eb,
                           [t0, u](const offload::IoResult& r) {
                             ActivityLog::global().record(Track::nvme_write, "nvme write", t0,
                                                          monotonic_seconds(), r.bytes, u);
                           });
      });
}

}  // namespace tierzero::zero
