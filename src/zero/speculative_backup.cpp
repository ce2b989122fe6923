// Backups that undo a speculative optimizer update exactly (see speculative_backup.hpp).
#include "speculative_backup.hpp"

#include <algorithm>
#include <string>

#include "tierzero/core/error.hpp"

namespace tierzero::zero {

SpeculativeBackup::SpeculativeBackup(ShardStorage& storage)
    : storage_(storage),
      blocks_(storage.plan().num_units()),
      reserved_(storage.plan().num_units(), 0) {}

std::vector<SpeculativeBackup::Part> SpeculativeBackup::parts(size_t unit) const {
  const StateArenas& arenas = storage_.arenas();
  auto slot_bytes = [&](StateBuffer kind) {
    return arenas.slot(kind, unit).elems * arenas.elem_bytes(kind);
  };
  std::vector<Part> out;
  if (!storage_.placement(unit).master_is_param)
    out.push_back({StateBuffer::master, slot_bytes(StateBuffer::master)});
  out.push_back({StateBuffer::adam_m, slot_bytes(StateBuffer::adam_m)});
  out.push_back({StateBuffer::adam_v, slot_bytes(StateBuffer::adam_v)});
  // The working shard: the update publishes its new values there (or, where the master is the
  // working shard, updates it in place).
  if (storage_.stage() == 3)
    out.push_back({StateBuffer::param_shard, slot_bytes(StateBuffer::param_shard)});
  else
    out.push_back({StateBuffer::params_full,
                   storage_.plan().partition(unit).shard_numel * dtype_size(storage_.working())});
  return out;
}

size_t SpeculativeBackup::bytes(size_t unit) const {
  size_t total = 0;
  for (const Part& p : parts(unit)) total += p.bytes;
  return total;
}

bool SpeculativeBackup::reserve(size_t unit) {
  TZ_CHECK(unit < reserved_.size() && !reserved_[unit],
           "SpeculativeBackup::reserve: unit " + std::to_string(unit) +
               " does not exist or is reserved already",
           "reserve each unit once per step, then release_all() at the step");
  const size_t n = bytes(unit);
  if (n > 0) {
    offload::HostPool* pool = storage_.host_pool();
    if (pool == nullptr) return false;
    try {
      blocks_[unit] = pool->allocate(n, Category::optimizer, "zero speculative backup");
    } catch (const Error&) {
      return false;  // no room under the host budget: the step updates this unit itself
    }
  }
  reserved_[unit] = 1;
  return true;
}

void SpeculativeBackup::read_working(size_t unit, void* host) {
  if (storage_.stage() == 3) {
    storage_.read_slot(StateBuffer::param_shard, unit, host);
    return;
  }
  // Below stage 3 the shard is this rank's slice of the full parameters, on the device.
  const size_t n = storage_.plan().partition(unit).shard_numel * dtype_size(storage_.working());
  if (n == 0) return;
  Device& device = storage_.device();
  device.copy(host, storage_.param_shard_raw(unit), n, CopyKind::device_to_host,
              device.default_stream());
  device.default_stream().synchronize();
}

void SpeculativeBackup::write_working(size_t unit, const void* host) {
  if (storage_.stage() == 3) {
    storage_.write_slot(StateBuffer::param_shard, unit, host);
    return;
  }
  const size_t n = storage_.plan().partition(unit).shard_numel * dtype_size(storage_.working());
  if (n == 0) return;
  Device& device = storage_.device();
  device.copy(storage_.param_shard_raw(unit), host, n, CopyKind::host_to_device,
              device.default_stream());
  device.default_stream().synchronize();
}

void SpeculativeBackup::save(size_t unit) {
  TZ_CHECK(reserved(unit),
           "SpeculativeBackup::save: unit " + storage_.plan().units()[unit].name +
               " has no backup reserved",
           "reserve() the unit before handing it to the optimizer's worker");
  std::byte* at = blocks_[unit].bytes_ptr();  // (bytes(unit)) the parts back to back
  for (const Part& p : parts(unit)) {
    if (p.bytes == 0) continue;
    if (p.kind == StateBuffer::param_shard || p.kind == StateBuffer::params_full)
      read_working(unit, at);
    else
      storage_.read_slot(p.kind, unit, at);
    at += p.bytes;
  }
}

void SpeculativeBackup::restore(size_t unit) {
  TZ_CHECK(
      reserved(unit),
      "SpeculativeBackup::restore: unit " + storage_.plan().units()[unit].name + " has no backup",
      "only units saved during this step's backward can be restored");
  std::byte* at = blocks_[unit].bytes_ptr();
  for (const Part& p : parts(unit)) {
    if (p.bytes == 0) continue;
    if (p.kind == StateBuffer::param_shard || p.kind == StateBuffer::params_full)
      write_working(unit, at);
    else
      storage_.write_slot(p.kind, unit, at);
    at += p.bytes;
  }
}

void SpeculativeBackup::release_all() {
  for (offload::PinnedBuffer& b : blocks_) b.reset();
  std::fill(reserved_.begin(), reserved_.end(), 0);
}

size_t SpeculativeBackup::held_bytes() const {
  size_t total = 0;
  for (const offload::PinnedBuffer& b : blocks_) total += b.size();
  return total;
}

}  // namespace tierzero::zero
